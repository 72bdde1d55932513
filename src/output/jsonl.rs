//! JSON Lines to a file or to standard output.

use std::io::Write;

use crate::error::Result;
use crate::output::outgoing::MessageKind;
use crate::output::{Message, Sink, open_error};

pub struct JsonlSink {
    out: Box<dyn Write + Send>,
    /// Whole lines waiting to be written: a file gets only whole lines, each batch in one
    /// write, so a second writer appending to the same file (the old and the new output
    /// across a SIGHUP) never splits a line.
    pending: Vec<u8>,
    /// Lines in `pending`, and how many the last failed write lost.
    pending_lines: u64,
    lost: u64,
    /// Standard output is flushed per line so a pipe reader sees each message at once.
    line_flush: bool,
}

/// Lines are written when this many bytes are waiting (or at a status message or a flush).
const BATCH_BYTES: usize = 64 * 1024;

impl JsonlSink {
    /// A configured output: `path` "-" is standard output; a file is opened for appending, so
    /// that a restart or a reload (SIGHUP) keeps every line written before.
    pub fn open(path: &str) -> Result<Self> {
        Self::open_with(path, true)
    }

    /// A fresh file for one replay's stream (`replay --out`): truncated first.
    pub fn create(path: &str) -> Result<Self> {
        Self::open_with(path, false)
    }

    fn open_with(path: &str, append: bool) -> Result<Self> {
        if path == "-" {
            return Ok(Self {
                out: Box::new(std::io::stdout()),
                pending: Vec::new(),
                pending_lines: 0,
                lost: 0,
                line_flush: true,
            });
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .map_err(|e| {
                open_error(
                    &format!("jsonl:{path}"),
                    format!("cannot open the file for writing: {e}"),
                    "check that the directory exists and is writable",
                )
            })?;
        Ok(Self::from_writer(Box::new(f)))
    }

    /// A sink over any writer (tests).
    pub fn from_writer(out: Box<dyn Write + Send>) -> Self {
        Self {
            out,
            pending: Vec::with_capacity(BATCH_BYTES),
            pending_lines: 0,
            lost: 0,
            line_flush: false,
        }
    }

    /// Write the waiting lines in one call.
    fn write_pending(&mut self) -> std::io::Result<()> {
        if !self.pending.is_empty() {
            let r = self.out.write_all(&self.pending);
            self.lost = if r.is_err() { self.pending_lines } else { 0 };
            self.pending.clear();
            self.pending_lines = 0;
            r?;
        }
        self.out.flush()
    }
}

impl Sink for JsonlSink {
    fn send(&mut self, msg: &Message) -> std::io::Result<()> {
        self.pending.extend_from_slice(msg.json.as_bytes());
        self.pending.push(b'\n');
        self.pending_lines += 1;
        let batched = matches!(msg.kind, MessageKind::Track | MessageKind::Smoothed);
        if self.line_flush || !batched || self.pending.len() >= BATCH_BYTES {
            self.write_pending()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.write_pending()
    }

    fn lost_by(&mut self, _e: &std::io::Error) -> u64 {
        self.lost.max(1)
    }
}

impl Drop for JsonlSink {
    fn drop(&mut self) {
        // The runner flushes before it ends; this keeps lines of a sink used on its own.
        let _ = self.write_pending();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(i: usize) -> Message {
        let kind = if i % 50 == 0 {
            MessageKind::Status
        } else {
            MessageKind::Track
        };
        Message::json_only(
            kind,
            Some(1),
            i as f64,
            format!("{{\"seq\":{i},\"pad\":\"{}\"}}", "x".repeat(i % 300)),
        )
    }

    /// A configured file is appended to, and two sinks writing it at once (the old and the
    /// new output across a SIGHUP) leave only whole lines and lose none; `replay --out`
    /// starts afresh (reliability and field-ready issues).
    #[test]
    fn reopened_files_append_whole_lines() {
        let dir = std::env::temp_dir().join(format!("sonotrack-jsonl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.jsonl");
        let p = path.to_str().unwrap();
        std::fs::write(&path, "{\"before\":1}\n").unwrap();
        let mut a = JsonlSink::open(p).unwrap();
        let mut b = JsonlSink::open(p).unwrap();
        for i in 0..3000 {
            let s = if i % 2 == 0 { &mut a } else { &mut b };
            s.send(&line(i)).unwrap();
        }
        a.flush().unwrap();
        drop(a);
        drop(b);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3001);
        assert_eq!(lines[0], "{\"before\":1}");
        for l in &lines {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v.is_object());
        }
        let mut c = JsonlSink::create(p).unwrap();
        c.send(&line(1)).unwrap();
        drop(c);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
