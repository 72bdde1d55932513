//! Sinks on their own threads: each behind a bounded queue, so that a slow or broken sink drops
//! its own backlog and counts it, and never stalls the pipeline. File and standard-output sinks
//! in a replay are the exception: they are lossless (the pipeline waits), since a replay's
//! output file must hold every message.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::output::latency::LatencyHistogram;
use crate::output::nmea::{NmeaEncoder, NmeaSettings};
use crate::output::outgoing::{Message, MessageKind};
use crate::output::sink_config::SinkConfig;
use crate::output::{jsonl, mqtt, serial, udp};

/// A destination for messages. Implementations may reconnect internally; errors are counted by
/// the runner, never fatal.
pub trait Sink: Send {
    fn send(&mut self, msg: &Message) -> std::io::Result<()>;
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    /// How many messages the error `send` or `flush` just returned lost: 1 (the message) unless
    /// the sink knows better (a UDP "connection refused" also reports an earlier datagram that
    /// never arrived; a file's failed write, every line of its batch).
    fn lost_by(&mut self, _e: &std::io::Error) -> u64 {
        1
    }
    /// A counter of messages the sink lost after accepting them (an MQTT broker that forgot
    /// its session), which the runner adds to its drops.
    fn late_drops(&self) -> Option<Arc<AtomicU64>> {
        None
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
    /// Lost after the sink accepted them (see [`Sink::late_drops`]).
    pub late_drops: Option<Arc<AtomicU64>>,
}

impl SinkStats {
    pub fn drops(&self) -> u64 {
        let late = self
            .late_drops
            .as_ref()
            .map_or(0, |l| l.load(Ordering::Relaxed));
        self.queue_drops.load(Ordering::Relaxed) + self.write_errors.load(Ordering::Relaxed) + late
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
    /// When each track's last message was sent, by (smoothed or not, track id).
    last_sent: BTreeMap<(bool, u64), f64>,
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
        let stats = Arc::new(SinkStats {
            late_drops: sink.late_drops(),
            ..SinkStats::default()
        });
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
                                if let (Some(r), MessageKind::Track) = (m.ready, m.kind) {
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
                            // (A line that is full this second: the sink's own rate limit.)
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                st.rate_limited.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                st.write_errors.fetch_add(sink.lost_by(&e), Ordering::Relaxed);
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
                                st.write_errors.fetch_add(sink.lost_by(&e), Ordering::Relaxed);
                                log::warn!("output {log_name}: flush failed: {e}");
                            }
                            let _ = done.send(());
                        }
                    }
                }
                if let Err(e) = sink.flush() {
                    st.write_errors.fetch_add(sink.lost_by(&e), Ordering::Relaxed);
                    log::warn!("output {log_name}: final flush failed: {e}");
                }
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
        if let (MessageKind::Deleted, Some(id)) = (msg.kind, msg.track_id) {
            self.last_sent.remove(&(false, id));
            self.last_sent.remove(&(true, id));
        } else if let (Some(rate), Some(id)) = (self.max_rate_hz, msg.track_id) {
            // (Smoothed messages of a track are limited on their own.)
            let id = (msg.kind == MessageKind::Smoothed, id);
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
    /// Builds the NMEA sentences when some output carries them.
    pub nmea: Option<NmeaEncoder>,
    /// Counters of the outputs this set replaced (a reload), so that drops are counted for the
    /// whole process: by output name.
    retired: Vec<(String, Arc<SinkStats>)>,
}

impl SinkSet {
    /// Open the configured outputs. `lossless_files`: file/stdout outputs wait rather than drop.
    /// A serial output without `max_rate_hz` sends each track at most its share of what the
    /// line carries (`max_tracks` shares), so that every track gets through.
    pub fn open(
        configs: &[SinkConfig],
        nmea: &NmeaSettings,
        max_tracks: usize,
        lossless_files: bool,
    ) -> Result<Self> {
        let mut set = SinkSet::default();
        let kinds: Vec<_> = configs
            .iter()
            .flat_map(|c| c.nmea_sentences().iter().copied())
            .collect();
        if !kinds.is_empty() {
            set.nmea = Some(NmeaEncoder::new(kinds, nmea.clone()));
        }
        for c in configs {
            let name = c.name();
            let (sink, lossless): (Box<dyn Sink>, bool) = match c {
                SinkConfig::Jsonl { path, .. } => {
                    (Box::new(jsonl::JsonlSink::open(path)?), lossless_files)
                }
                SinkConfig::Udp {
                    address, format, ..
                } => {
                    let udp = udp::UdpSink::open(address)?;
                    let sentences = c.nmea_sentences();
                    (Box::new(udp.with_format(*format, sentences)), false)
                }
                SinkConfig::Serial {
                    port, baud, format, ..
                } => {
                    let sentences = c.nmea_sentences();
                    (
                        Box::new(serial::SerialSink::new(port, *baud, *format, sentences)),
                        false,
                    )
                }
                SinkConfig::Mqtt(m) => (Box::new(mqtt::MqttSink::open(m)?), false),
            };
            let rate = match c {
                SinkConfig::Serial { baud, format, .. } => c.max_rate_hz().or_else(|| {
                    let share = serial::reports_per_s(*baud, *format, c.nmea_sentences())
                        / max_tracks.max(1) as f64;
                    log::info!(
                        "output {name}: each track at most {share:.2} times a second (its share of {baud} baud)"
                    );
                    Some(share)
                }),
                _ => c.max_rate_hz(),
            };
            set.runners
                .push(SinkRunner::spawn(name, sink, lossless, rate));
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

    /// Take over the counters of the set this one replaces (SIGHUP), its own and those it had
    /// taken over.
    pub fn carry_counts_from(&mut self, old: &SinkSet) {
        self.retired.extend(old.retired.iter().cloned());
        self.retired.extend(
            old.runners
                .iter()
                .map(|r| (r.name.clone(), r.stats.clone())),
        );
    }

    /// Messages dropped per output since the process started (reloads included).
    pub fn drops(&self) -> BTreeMap<String, u64> {
        let mut d: BTreeMap<String, u64> = self
            .runners
            .iter()
            .map(|r| (r.name.clone(), r.stats.drops()))
            .collect();
        for (name, st) in &self.retired {
            *d.entry(name.clone()).or_default() += st.drops();
        }
        d
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
        Message::json_only(MessageKind::Track, Some(1), t, format!("{{\"i\":{i}}}"))
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

    struct Broken;
    impl Sink for Broken {
        fn send(&mut self, _m: &Message) -> std::io::Result<()> {
            Err(std::io::Error::other("unplugged"))
        }
    }

    /// A reload (SIGHUP) replaces the outputs but not their counts: drops are cumulative for
    /// the process (reliability issue).
    #[test]
    fn drop_counts_survive_a_reload() {
        let mut old = SinkSet::default();
        old.add("serial:/dev/ttyX".into(), Box::new(Broken), true);
        for i in 0..7 {
            old.send(msg(i, i as f64));
        }
        old.flush(Duration::from_secs(5));
        let mut fresh = SinkSet::default();
        fresh.add("serial:/dev/ttyX".into(), Box::new(Broken), true);
        fresh.carry_counts_from(&old);
        drop(old);
        for i in 0..3 {
            fresh.send(msg(i, i as f64));
        }
        fresh.flush(Duration::from_secs(5));
        assert_eq!(fresh.drops()["serial:/dev/ttyX"], 10);
        let mut third = SinkSet::default();
        third.carry_counts_from(&fresh);
        assert_eq!(third.drops()["serial:/dev/ttyX"], 10);
    }

    /// A serial output without `max_rate_hz` gets each track's share of its line: 4,800 baud
    /// carries 480 bytes a second, 3.6 TTM + TLL reports (134 bytes), 1.8 a track for two.
    #[test]
    fn a_serial_line_shares_its_capacity_among_the_tracks() {
        use crate::output::nmea::SentenceKind;
        let serial = SinkConfig::Serial {
            port: "/dev/sonotrack-no-such-port".into(),
            baud: 4800,
            format: crate::output::SerialFormat::Nmea,
            sentences: vec![SentenceKind::Ttm, SentenceKind::Tll],
            max_rate_hz: None,
        };
        let set = SinkSet::open(
            std::slice::from_ref(&serial),
            &NmeaSettings::default(),
            2,
            false,
        )
        .unwrap();
        let rate = set.runners[0].max_rate_hz.unwrap();
        assert!((rate - 480.0 / 134.0 / 2.0).abs() < 1e-9, "{rate}");
        let fixed = match serial {
            SinkConfig::Serial {
                port,
                baud,
                format,
                sentences,
                ..
            } => SinkConfig::Serial {
                port,
                baud,
                format,
                sentences,
                max_rate_hz: Some(0.5),
            },
            other => other,
        };
        let set = SinkSet::open(&[fixed], &NmeaSettings::default(), 2, false).unwrap();
        assert_eq!(set.runners[0].max_rate_hz, Some(0.5));
    }
}
