//! JSON Lines to a file or to standard output.

use std::fs::File;
use std::io::{BufWriter, Write};

use crate::error::Result;
use crate::output::{Message, Sink, open_error};

pub struct JsonlSink {
    out: Box<dyn Write + Send>,
    /// Standard output is flushed per line so a pipe reader sees each message at once.
    line_flush: bool,
}

impl JsonlSink {
    /// `path` "-" is standard output.
    pub fn open(path: &str) -> Result<Self> {
        if path == "-" {
            return Ok(Self {
                out: Box::new(std::io::stdout()),
                line_flush: true,
            });
        }
        let f = File::create(path).map_err(|e| {
            open_error(
                &format!("jsonl:{path}"),
                format!("cannot create the file: {e}"),
                "check that the directory exists and is writable",
            )
        })?;
        Ok(Self {
            out: Box::new(BufWriter::new(f)),
            line_flush: false,
        })
    }

    /// A sink over any writer (tests).
    pub fn from_writer(out: Box<dyn Write + Send>) -> Self {
        Self {
            out,
            line_flush: false,
        }
    }
}

impl Sink for JsonlSink {
    fn send(&mut self, msg: &Message) -> std::io::Result<()> {
        self.out.write_all(msg.json.as_bytes())?;
        self.out.write_all(b"\n")?;
        if self.line_flush || msg.is_status {
            self.out.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
