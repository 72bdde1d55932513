//! JSON Lines or NMEA sentences over a serial port.
//!
//! A port that cannot be opened, or disappears (USB adapter unplugged), is retried with
//! exponential backoff (0.5 s doubling to 8 s) while messages are dropped and counted; when the
//! port returns, delivery resumes without a restart.
//!
//! The line carries baud / 10 bytes a second (8N1). A budget of that many bytes, refilled with
//! the stream's clock and holding at most one second's worth, decides what goes: a track or
//! status message that would overrun it is dropped (counted as rate limited), so the line never
//! backs up into seconds of latency; a track's end is always sent.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::output::SerialFormat;
use crate::output::nmea::SentenceKind;
use crate::output::outgoing::MessageKind;
use crate::output::{Message, Sink};

/// Track reports a second a line at `baud` carries in `format` with `sentences` (NMEA), at the
/// typical size of a report.
pub fn reports_per_s(baud: u32, format: SerialFormat, sentences: &[SentenceKind]) -> f64 {
    // (A JSON track message is 450-650 bytes.)
    let bytes = match format {
        SerialFormat::Jsonl => 600,
        SerialFormat::Nmea => sentences.iter().map(|k| k.typical_report_bytes()).sum(),
    }
    .max(1);
    f64::from(baud) / 10.0 / bytes as f64
}

/// Bytes a serial line can carry per second over the stream's clock.
#[derive(Debug, Clone)]
pub struct LineBudget {
    bytes_per_s: f64,
    tokens: f64,
    last_t: Option<f64>,
}

impl LineBudget {
    /// A line at `baud` (10 bits a byte: start, 8 data, stop).
    pub fn new(baud: u32) -> Self {
        let bytes_per_s = f64::from(baud) / 10.0;
        Self {
            bytes_per_s,
            tokens: bytes_per_s,
            last_t: None,
        }
    }

    /// Whether `bytes` may go at stream time `t_s` (taking them from the budget if so);
    /// `always` sends take them regardless, leaving the budget in debt.
    pub fn take(&mut self, t_s: f64, bytes: usize, always: bool) -> bool {
        if let Some(last) = self.last_t {
            let dt = (t_s - last).max(0.0);
            self.tokens = (self.tokens + dt * self.bytes_per_s).min(self.bytes_per_s);
        }
        self.last_t = Some(t_s);
        let b = bytes as f64;
        if always || b <= self.tokens {
            self.tokens -= b;
            true
        } else {
            false
        }
    }
}

pub struct SerialSink {
    path: String,
    baud: u32,
    format: SerialFormat,
    sentences: Vec<SentenceKind>,
    budget: LineBudget,
    port: Option<Box<dyn serialport::SerialPort>>,
    next_try: Instant,
    backoff: Duration,
    pub reopened: u64,
}

const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(8);

impl SerialSink {
    pub fn new(path: &str, baud: u32, format: SerialFormat, sentences: &[SentenceKind]) -> Self {
        Self {
            path: path.into(),
            baud,
            format,
            sentences: sentences.to_vec(),
            budget: LineBudget::new(baud),
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
        let bytes = match self.format {
            SerialFormat::Jsonl => msg.json.len() + 1,
            SerialFormat::Nmea => msg.nmea.of(&self.sentences).map(str::len).sum(),
        };
        if bytes == 0 {
            return Ok(());
        }
        let always = msg.kind == MessageKind::Deleted;
        if !self.budget.take(msg.t_s, bytes, always) {
            return Err(line_full(&self.path, self.baud));
        }
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
            SerialFormat::Nmea => msg
                .nmea
                .of(&self.sentences)
                .try_for_each(|s| port.write_all(s.as_bytes())),
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

/// The error of a message the line has no room for (the runner counts it as rate limited).
fn line_full(path: &str, baud: u32) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::WouldBlock,
        format!("{path}: {baud} baud carries no more this second"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4,800 baud carries 480 bytes a second: 70-byte reports at 10 Hz (700 B/s) get through
    /// at most 480 B/s over a long run; a track's end always goes.
    #[test]
    fn the_line_budget_holds_the_baud_rate() {
        let mut b = LineBudget::new(4800);
        let mut sent = 0usize;
        for i in 0..600 {
            if b.take(f64::from(i) * 0.1, 70, false) {
                sent += 70;
            }
        }
        let rate = sent as f64 / 60.0;
        assert!(rate <= 480.0 + 480.0 / 60.0 && rate > 400.0, "{rate} B/s");
        assert!(b.take(60.0, 70, true), "an end is always sent");
    }
}
