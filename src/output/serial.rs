//! JSON Lines or NMEA sentences over a serial port.
//!
//! A port that cannot be opened, or disappears (USB adapter unplugged), is retried with
//! exponential backoff (0.5 s doubling to 8 s) while messages are dropped and counted; when the
//! port returns, delivery resumes without a restart.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::output::SerialFormat;
use crate::output::{Message, Sink};

pub struct SerialSink {
    path: String,
    baud: u32,
    format: SerialFormat,
    port: Option<Box<dyn serialport::SerialPort>>,
    next_try: Instant,
    backoff: Duration,
    pub reopened: u64,
}

const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(8);

impl SerialSink {
    pub fn new(path: &str, baud: u32, format: SerialFormat) -> Self {
        Self {
            path: path.into(),
            baud,
            format,
            port: None,
            next_try: Instant::now(),
            backoff: BACKOFF_MIN,
            reopened: 0,
        }
    }

    fn ensure_open(&mut self) -> std::io::Result<()> {
        if self.port.is_some() {
            return Ok(());
        }
        if Instant::now() < self.next_try {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("{} is not open (retrying)", self.path),
            ));
        }
        match serialport::new(&self.path, self.baud)
            .timeout(Duration::from_millis(200))
            .open()
        {
            Ok(p) => {
                log::info!("serial {}: open at {} baud", self.path, self.baud);
                self.port = Some(p);
                self.backoff = BACKOFF_MIN;
                self.reopened += 1;
                Ok(())
            }
            Err(e) => {
                self.next_try = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    format!("cannot open {}: {e}", self.path),
                ))
            }
        }
    }
}

impl Sink for SerialSink {
    fn send(&mut self, msg: &Message) -> std::io::Result<()> {
        self.ensure_open()?;
        let Some(port) = self.port.as_mut() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "port closed",
            ));
        };
        let res = match self.format {
            SerialFormat::Jsonl => port
                .write_all(msg.json.as_bytes())
                .and_then(|_| port.write_all(b"\n")),
            SerialFormat::Nmea => match &msg.nmea {
                Some(s) => port.write_all(s.as_bytes()),
                None => Ok(()),
            },
        };
        if let Err(e) = res {
            // The device is probably gone: close it and let the backoff reopen it.
            self.port = None;
            self.next_try = Instant::now() + self.backoff;
            return Err(e);
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.port.as_mut() {
            Some(p) => p.flush(),
            None => Ok(()),
        }
    }
}
