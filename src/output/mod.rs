//! Outputs: the position-stream schema and the sinks that carry it.
//!
//! A message is serialised once (JSON, and NMEA when a serial sink wants it) and shared by all
//! sinks. Each sink runs on its own thread behind a bounded queue: a slow or broken sink drops
//! its own backlog and counts it, and never stalls the pipeline. File and standard-output sinks
//! in a replay are the exception: they are lossless (the pipeline waits), since a replay's output
//! file must hold every message.
//!
//! [`message`] is the schema, [`outgoing`] a message serialised for the sinks, [`runner`] the queues and threads, [`sink_config`] what the
//! configuration says an output is; one file per kind of sink.

pub mod broker;
pub mod jsonl;
pub mod latency;
pub mod message;
pub mod mqtt;
pub mod nmea;
pub mod outgoing;
pub mod runner;
pub mod serial;
pub mod sink_config;
pub mod udp;

pub use latency::LatencyHistogram;
pub use message::{
    DeletedMessage, FrameStamp, SCHEMA_VERSION, StatusMessage, TrackMessage, rfc3339,
};
pub use outgoing::{Message, MessageKind};
pub use runner::{Sink, SinkRunner, SinkSet, SinkStats};
pub use sink_config::{SerialFormat, SinkConfig};

pub(crate) use runner::open_error;
