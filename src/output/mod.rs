//! Outputs: the position-stream schema and the sinks that carry it.
//!
//! A message is serialised once (JSON, and NMEA when a serial sink wants it) and shared by all
//! sinks. Each sink runs on its own thread behind a bounded queue: a slow or broken sink drops
//! its own backlog and counts it, and never stalls the pipeline. File and standard-output sinks
//! in a replay are the exception: they are lossless (the pipeline waits), since a replay's output
//! file must hold every message.

pub mod jsonl;
pub mod nmea;
pub mod serial;
pub mod udp;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::config::{SerialFormat, SinkConfig, TrackMode};
use crate::error::{Error, Result};
use crate::track::manager::{TrackReport, TrackStatus};

/// Version of the message schema; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Round to a fixed number of decimals for compact, stable output.
fn round(x: f64, decimals: i32) -> f64 {
    let s = 10f64.powi(decimals);
    let r = (x * s).round() / s;
    if r == 0.0 { 0.0 } else { r }
}

/// RFC 3339 UTC time with milliseconds.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if month <= 2 { y + 1 } else { y };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// A track message (schema version 1). See README.md, "Output schema".
#[derive(Debug, Clone, Serialize)]
pub struct TrackMessage {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub schema: u32,
    /// Emission time of the reported state, seconds from the stream start (in direction mode,
    /// which knows no range, the arrival time: `t_frame`).
    pub t: f64,
    /// Arrival time of the frame centre at the array, seconds from the stream start.
    pub t_frame: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall: Option<String>,
    pub seq: u64,
    pub id: u64,
    pub status: TrackStatus,
    /// Metres, array frame (3-D mode); a unit vector towards the source in direction mode.
    pub pos: [f64; 3],
    pub vel: [f64; 3],
    pub pos_std: [f64; 3],
    /// Upper triangle of the position covariance: xx, xy, xz, yy, yz, zz (m²).
    pub pos_cov: [f64; 6],
    pub vel_std: [f64; 3],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub az_deg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub el_deg: Option<f64>,
    /// Direction mode: the inverse range (1/m; 0 is a plane wave) and its standard deviation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inv_range: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inv_range_std: Option<f64>,
    /// Direction mode: the range (m), 1 / `inv_range`, where the inverse range is at least
    /// twice its standard deviation (nearer, the wavefront's curvature measures it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_m: Option<f64>,
    pub model: String,
    pub models: BTreeMap<String, f64>,
    pub turn_rate: f64,
    pub ess: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub support: Option<f64>,
}

impl TrackMessage {
    pub fn new(r: &TrackReport, model_names: &[String], wall: Option<SystemTime>) -> Self {
        let c = &r.pos_cov;
        let best = r
            .model_probs
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let direction = r.mode == TrackMode::Direction;
        let (az, el) = if direction {
            let [x, y, z] = r.position;
            (
                Some(round(y.atan2(x).to_degrees(), 3)),
                Some(round(z.clamp(-1.0, 1.0).asin().to_degrees(), 3)),
            )
        } else {
            (None, None)
        };
        Self {
            kind: "track",
            schema: SCHEMA_VERSION,
            t: round(r.t_s, 5),
            t_frame: round(r.t_frame_s, 5),
            wall: wall.map(rfc3339),
            seq: r.seq,
            id: r.id,
            status: r.status,
            pos: r.position.map(|v| round(v, 4)),
            vel: r.velocity.map(|v| round(v, 4)),
            pos_std: [0, 1, 2].map(|i| round(c[i][i].max(0.0).sqrt(), 5)),
            pos_cov: crate::evaluate::upper_triangle(c).map(|v| round(v, 8)),
            vel_std: r.vel_std.map(|v| round(v, 4)),
            az_deg: az,
            el_deg: el,
            inv_range: r.inv_range.map(|v| round(v[0], 6)),
            inv_range_std: r.inv_range.map(|v| round(v[1], 6)),
            range_m: r.range_m().map(|v| round(v, 3)),
            model: model_names.get(best).cloned().unwrap_or_default(),
            models: model_names
                .iter()
                .zip(&r.model_probs)
                .map(|(n, p)| (n.clone(), round(f64::from(*p), 4)))
                .collect(),
            turn_rate: round(f64::from(r.turn_rate_rad_s), 5),
            ess: round(f64::from(r.ess), 1),
            support: r
                .support
                .is_finite()
                .then(|| round(f64::from(r.support), 3)),
        }
    }
}

/// A status message (schema version 1), once per `output.status_interval_s`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatusMessage {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub schema: u32,
    /// Stream time of the last frame, seconds.
    pub t: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall: Option<String>,
    pub backend: String,
    pub frames_in: u64,
    pub frames_processed: u64,
    pub frames_dropped: u64,
    /// Dropped frames by reason.
    pub dropped: BTreeMap<String, u64>,
    /// Non-finite samples replaced by zero so far.
    pub nonfinite_samples: u64,
    /// Frames in which each channel was unusable (dead or mostly non-finite).
    pub bad_channel_frames: Vec<u64>,
    pub backend_switches: u64,
    pub tracks: usize,
    /// The TDOA noise the tracker assumes now, in samples: its online estimate from the
    /// tracks' residuals, at least `tracker.tdoa_std_samples`. It rises with reverberation,
    /// noise or a second source near a track.
    pub tdoa_noise_samples: f64,
    /// Mean and largest processing time per frame since the last status, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc_us_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc_us_max: Option<f64>,
    /// Messages each output dropped (queue full or write failed), by output name.
    pub sink_drops: BTreeMap<String, u64>,
}

/// One serialised message, shared by every sink.
#[derive(Debug, Clone)]
pub struct Message {
    pub is_status: bool,
    pub track_id: Option<u64>,
    /// Stream time, for rate limiting.
    pub t_s: f64,
    pub json: String,
    pub nmea: Option<String>,
    /// Live: when the frame behind this message was complete (for the latency figure).
    pub ready: Option<std::time::Instant>,
}

impl Message {
    pub fn track(m: &TrackMessage, want_nmea: bool) -> Self {
        Self {
            is_status: false,
            track_id: Some(m.id),
            t_s: m.t,
            json: serde_json::to_string(m).unwrap_or_default(),
            nmea: want_nmea.then(|| nmea::track_sentence(m)),
            ready: None,
        }
    }

    pub fn status(m: &StatusMessage, want_nmea: bool) -> Self {
        Self {
            is_status: true,
            track_id: None,
            t_s: m.t,
            json: serde_json::to_string(m).unwrap_or_default(),
            nmea: want_nmea.then(|| nmea::status_sentence(m)),
            ready: None,
        }
    }
}

/// Latency from a frame being complete to its message leaving, as a fixed histogram (flat
/// memory however long the daemon runs): 50 µs bins up to 100 ms, then one overflow bin.
#[derive(Debug)]
pub struct LatencyHistogram {
    bins: Box<[AtomicU64]>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            bins: (0..=LATENCY_BINS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

const LATENCY_BINS: usize = 2000;
const LATENCY_BIN_US: f64 = 50.0;

impl LatencyHistogram {
    pub fn record(&self, d: Duration) {
        let bin = ((d.as_secs_f64() * 1e6 / LATENCY_BIN_US) as usize).min(LATENCY_BINS);
        self.bins[bin].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.bins.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The q-quantile in milliseconds (upper edge of its bin), None when empty.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let target = ((n as f64 * q).ceil() as u64).max(1);
        let mut acc = 0;
        for (i, b) in self.bins.iter().enumerate() {
            acc += b.load(Ordering::Relaxed);
            if acc >= target {
                return Some((i + 1) as f64 * LATENCY_BIN_US / 1000.0);
            }
        }
        None
    }
}

/// A destination for messages. Implementations may reconnect internally; errors are counted by
/// the runner, never fatal.
pub trait Sink: Send {
    fn send(&mut self, msg: &Message) -> std::io::Result<()>;
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Counters one sink's runner keeps.
#[derive(Debug, Default)]
pub struct SinkStats {
    pub sent: AtomicU64,
    /// Dropped because the queue was full.
    pub queue_drops: AtomicU64,
    /// Dropped because the write failed (port gone, peer unreachable).
    pub write_errors: AtomicU64,
    pub rate_limited: AtomicU64,
    /// Frame-complete to message-sent latency of track messages (live only).
    pub latency: LatencyHistogram,
}

impl SinkStats {
    pub fn drops(&self) -> u64 {
        self.queue_drops.load(Ordering::Relaxed) + self.write_errors.load(Ordering::Relaxed)
    }
}

enum Cmd {
    Msg(Arc<Message>),
    Flush(SyncSender<()>),
}

/// A sink on its own thread behind a bounded queue.
pub struct SinkRunner {
    pub name: String,
    pub stats: Arc<SinkStats>,
    lossless: bool,
    max_rate_hz: Option<f64>,
    last_sent: BTreeMap<u64, f64>,
    tx: Option<SyncSender<Cmd>>,
    handle: Option<JoinHandle<()>>,
}

/// Consecutive good sends after which a failing output counts as recovered (for the log).
const RECOVERED_AFTER: u32 = 20;

/// Messages a sink may have queued before new ones are dropped.
pub const QUEUE_CAPACITY: usize = 256;

impl SinkRunner {
    pub fn spawn(
        name: String,
        mut sink: Box<dyn Sink>,
        lossless: bool,
        max_rate_hz: Option<f64>,
    ) -> Self {
        let (tx, rx): (SyncSender<Cmd>, Receiver<Cmd>) = sync_channel(QUEUE_CAPACITY);
        let stats = Arc::new(SinkStats::default());
        let st = stats.clone();
        let thread_name = format!("sink {name}");
        let log_name = name.clone();
        let handle = std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || {
                // An output is back only after a run of good sends: a UDP peer that is away
                // makes sends fail and succeed alternately (the ICMP errors arrive late), and
                // that must not flood the log.
                let mut failing = false;
                let mut streak = 0u32;
                let mut dropped_since = 0u64;
                for cmd in rx {
                    match cmd {
                        Cmd::Msg(m) => match sink.send(&m) {
                            Ok(()) => {
                                st.sent.fetch_add(1, Ordering::Relaxed);
                                if let (Some(r), false) = (m.ready, m.is_status) {
                                    st.latency.record(r.elapsed());
                                }
                                streak += 1;
                                if failing && streak >= RECOVERED_AFTER {
                                    log::info!(
                                        "output {log_name}: delivering again ({dropped_since} messages dropped)"
                                    );
                                    failing = false;
                                }
                            }
                            Err(e) => {
                                st.write_errors.fetch_add(1, Ordering::Relaxed);
                                streak = 0;
                                if !failing {
                                    log::warn!("output {log_name}: {e}; dropping messages until it recovers");
                                    failing = true;
                                    dropped_since = 0;
                                }
                                dropped_since += 1;
                            }
                        },
                        Cmd::Flush(done) => {
                            if let Err(e) = sink.flush() {
                                log::warn!("output {log_name}: flush failed: {e}");
                            }
                            let _ = done.send(());
                        }
                    }
                }
                let _ = sink.flush();
            })
            .ok();
        Self {
            name,
            stats,
            lossless,
            max_rate_hz,
            last_sent: BTreeMap::new(),
            tx: handle.as_ref().map(|_| tx),
            handle,
        }
    }

    pub fn send(&mut self, msg: &Arc<Message>) {
        if let (Some(rate), Some(id)) = (self.max_rate_hz, msg.track_id) {
            if let Some(last) = self.last_sent.get(&id) {
                if msg.t_s - last < 1.0 / rate - 1e-9 {
                    self.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
            self.last_sent.insert(id, msg.t_s);
        }
        let Some(tx) = &self.tx else {
            self.stats.queue_drops.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if self.lossless {
            if tx.send(Cmd::Msg(msg.clone())).is_err() {
                self.stats.queue_drops.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            match tx.try_send(Cmd::Msg(msg.clone())) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.stats.queue_drops.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Wait until everything queued so far is written (end of a replay, shutdown).
    pub fn flush(&self, timeout: Duration) {
        if let Some(tx) = &self.tx {
            let (dtx, drx) = sync_channel(1);
            if tx.send(Cmd::Flush(dtx)).is_ok() {
                let _ = drx.recv_timeout(timeout);
            }
        }
    }
}

impl Drop for SinkRunner {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Every configured output.
#[derive(Default)]
pub struct SinkSet {
    pub runners: Vec<SinkRunner>,
    pub want_nmea: bool,
}

impl SinkSet {
    /// Open the configured outputs. `lossless_files`: file/stdout outputs wait rather than drop.
    pub fn open(configs: &[SinkConfig], lossless_files: bool) -> Result<Self> {
        let mut set = SinkSet::default();
        for c in configs {
            let name = c.name();
            let (sink, lossless): (Box<dyn Sink>, bool) = match c {
                SinkConfig::Jsonl { path, .. } => {
                    (Box::new(jsonl::JsonlSink::open(path)?), lossless_files)
                }
                SinkConfig::Udp { address, .. } => (Box::new(udp::UdpSink::open(address)?), false),
                SinkConfig::Serial {
                    port, baud, format, ..
                } => {
                    if *format == SerialFormat::Nmea {
                        set.want_nmea = true;
                    }
                    (
                        Box::new(serial::SerialSink::new(port, *baud, *format)),
                        false,
                    )
                }
            };
            set.runners
                .push(SinkRunner::spawn(name, sink, lossless, c.max_rate_hz()));
        }
        Ok(set)
    }

    pub fn add(&mut self, name: String, sink: Box<dyn Sink>, lossless: bool) {
        self.runners
            .push(SinkRunner::spawn(name, sink, lossless, None));
    }

    pub fn send(&mut self, msg: Message) {
        if self.runners.is_empty() {
            return;
        }
        let m = Arc::new(msg);
        for r in &mut self.runners {
            r.send(&m);
        }
    }

    pub fn flush(&self, timeout: Duration) {
        for r in &self.runners {
            r.flush(timeout);
        }
    }

    pub fn drops(&self) -> BTreeMap<String, u64> {
        self.runners
            .iter()
            .map(|r| (r.name.clone(), r.stats.drops()))
            .collect()
    }
}

/// Error for an output that cannot be opened at start-up.
pub(crate) fn open_error(name: &str, problem: impl Into<String>, fix: impl Into<String>) -> Error {
    Error::Output {
        name: name.into(),
        problem: problem.into(),
        fix: fix.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_262_400_123);
        assert_eq!(rfc3339(t), "2026-11-21T12:00:00.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    struct Slow(Arc<Mutex<Vec<String>>>);
    impl Sink for Slow {
        fn send(&mut self, m: &Message) -> std::io::Result<()> {
            std::thread::sleep(Duration::from_millis(2));
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .push(m.json.clone());
            Ok(())
        }
    }

    fn msg(i: u64, t: f64) -> Message {
        Message {
            is_status: false,
            track_id: Some(1),
            t_s: t,
            json: format!("{{\"i\":{i}}}"),
            nmea: None,
            ready: None,
        }
    }

    #[test]
    fn a_slow_sink_drops_and_counts_instead_of_blocking() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut r = SinkRunner::spawn("slow".into(), Box::new(Slow(got.clone())), false, None);
        let start = std::time::Instant::now();
        for i in 0..2000 {
            r.send(&Arc::new(msg(i, i as f64)));
        }
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "the pipeline side never waits"
        );
        r.flush(Duration::from_secs(10));
        let sent = got.lock().unwrap().len() as u64;
        assert_eq!(sent + r.stats.queue_drops.load(Ordering::Relaxed), 2000);
        assert!(r.stats.queue_drops.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn lossless_sink_keeps_everything_in_order() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut r = SinkRunner::spawn("file".into(), Box::new(Slow(got.clone())), true, None);
        for i in 0..300 {
            r.send(&Arc::new(msg(i, i as f64)));
        }
        r.flush(Duration::from_secs(10));
        let v = got.lock().unwrap().clone();
        assert_eq!(v.len(), 300);
        assert_eq!(v[299], "{\"i\":299}");
    }

    #[test]
    fn rate_limit_per_track() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut r = SinkRunner::spawn("rl".into(), Box::new(Slow(got.clone())), true, Some(2.0));
        for i in 0..20 {
            r.send(&Arc::new(msg(i, i as f64 * 0.1)));
        }
        r.flush(Duration::from_secs(5));
        // 2 Hz over 2 s of stream time: t = 0, 0.5, 1.0, 1.5.
        assert_eq!(got.lock().unwrap().len(), 4);
        assert_eq!(r.stats.rate_limited.load(Ordering::Relaxed), 16);
    }
}
