//! `sonotrack fuse`: subscribes to the nodes of one site, fuses their tracks on a fixed clock
//! and publishes the fused tracks like a node (JSON Lines, UDP, serial, NMEA, MQTT).
//!
//! One thread polls the broker connection and hands each payload, with the node named by its
//! topic (checked, never read from the payload), to a bounded queue; the main loop drains it
//! every tick, steps the [`Fuser`] at `now − delay_s`, and sends the messages. Everything that
//! is not used is counted by reason in the `fusion_status` message.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rumqttc::{Client, Event, Packet, QoS};
use serde::Serialize;

use crate::config::fuse::FuseConfig;
use crate::error::{Error, Result};
use crate::fusion::engine::{FusedEnd, FusedEstimate, Fuser};
use crate::fusion::report::{MAX_PAYLOAD, Payload, parse};
use crate::math::geo::Origin;
use crate::output::broker::{Backoff, MAX_PACKET_BYTES, explain, topic_level_ok};
use crate::output::message::{FusedSource, SCHEMA_VERSION};
use crate::output::mqtt::NodeState;
use crate::output::{
    DeletedMessage, FrameStamp, Message, MessageKind, SinkSet, TrackMessage, rfc3339,
};
use crate::track::TrackMode;
use crate::track::manager::{TrackReport, TrackStatus};
use crate::track::motion::models::Kinematics;
use crate::track::report::{EndReason, EstimateKind, GaussianState, TrackEnd};

/// Payloads waiting for the main loop, at most.
const INBOX: usize = 10_000;

/// A payload from the broker.
struct Inbound {
    node: String,
    leaf: Leaf,
    payload: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Leaf {
    Tracks,
    State,
}

/// Options of one run.
#[derive(Debug, Clone, Default)]
pub struct FuseOptions {
    /// Stop after this many seconds.
    pub seconds: Option<f64>,
}

/// What a run did, for the closing log line and tests.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FuseSummary {
    pub steps: u64,
    pub fused_messages: u64,
    pub reports: u64,
    pub ignored: BTreeMap<String, u64>,
}

/// The `fusion_status` message.
#[derive(Debug, Clone, Serialize)]
struct FusionStatus {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: u32,
    t: f64,
    wall: String,
    nodes: BTreeMap<String, NodeView>,
    fused_tracks: usize,
    reports: u64,
    ignored: BTreeMap<String, u64>,
    sink_drops: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize)]
struct NodeView {
    online: bool,
    tracks: usize,
    /// Seconds since its last track report (absent before the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    last_report_s: Option<f64>,
}

#[derive(Debug, Default)]
struct NodeInfo {
    online: bool,
    last_report: Option<Instant>,
}

/// Seconds since 1970 of `t`.
fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Run the fusion service until SIGTERM/SIGINT or `opts.seconds`.
pub fn run(cfg: &FuseConfig, opts: &FuseOptions) -> Result<FuseSummary> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| Error::Output {
            name: "fuse".into(),
            problem: format!("cannot install the signal handler: {e}"),
            fix: "report this as a bug".into(),
        })?;
    }
    let mut sinks = SinkSet::open(&cfg.output.sinks, &cfg.output.nmea, 99, false)?;
    let inbox = Arc::new(InboxCounts::default());
    let (rx, client) = subscribe(cfg, inbox.clone(), stop.clone())?;
    let mut fuser = Fuser::new(cfg.fusion.clone());
    let mut nodes: BTreeMap<String, NodeInfo> = BTreeMap::new();
    let mut summary = FuseSummary::default();
    let start = SystemTime::now();
    let started = Instant::now();
    let tick = Duration::from_secs_f64(1.0 / cfg.rate_hz);
    let mut next = Instant::now();
    let mut last_status = Instant::now();
    let mut seq = 0u64;
    log::info!(
        "fusing site {} of {} at {} Hz",
        cfg.site,
        cfg.broker.address,
        cfg.rate_hz
    );
    while !stop.load(Ordering::Relaxed)
        && opts
            .seconds
            .is_none_or(|s| started.elapsed().as_secs_f64() < s)
    {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        next += tick;
        if next < now {
            next = now + tick;
        }
        drain(&rx, cfg, &mut fuser, &mut nodes, &mut summary);
        let wall = SystemTime::now() - Duration::from_secs_f64(cfg.delay_s);
        let t_utc = unix_s(wall);
        let t_s = t_utc - unix_s(start);
        let out = fuser.step(t_utc);
        summary.steps += 1;
        let stamp = FrameStamp {
            wall: Some(wall),
            power: None,
            reports: out.tracks.len(),
            origin: Some(&cfg.origin),
        };
        for e in &out.tracks {
            let m = fused_message(e, seq, t_s, &cfg.origin, &stamp);
            let msg = Message::track(&m, sinks.nmea.as_mut());
            sinks.send(msg);
            summary.fused_messages += 1;
        }
        for (id, why) in &out.ended {
            let end = fused_end(*id, *why);
            let m = DeletedMessage::new(&end, seq, t_s, Some(wall));
            let msg = Message::deleted(&m, sinks.nmea.as_mut());
            sinks.send(msg);
        }
        seq += 1;
        if last_status.elapsed().as_secs_f64() >= cfg.status_interval_s {
            last_status = Instant::now();
            inbox.add_to(&mut summary);
            let s = status(&fuser, &nodes, &summary, &sinks, t_s, wall);
            let json = serde_json::to_string(&s).unwrap_or_default();
            sinks.send(Message::json_only(MessageKind::Status, None, t_s, json));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = client.try_disconnect();
    sinks.flush(Duration::from_secs(5));
    inbox.add_to(&mut summary);
    summary.ignored.retain(|_, n| *n > 0);
    Ok(summary)
}

/// Everything waiting in the inbox into the fuser.
fn drain(
    rx: &Receiver<Inbound>,
    cfg: &FuseConfig,
    fuser: &mut Fuser,
    nodes: &mut BTreeMap<String, NodeInfo>,
    summary: &mut FuseSummary,
) {
    let mut ignore = |why: &str| *summary.ignored.entry(why.into()).or_default() += 1;
    while let Ok(m) = rx.try_recv() {
        match m.leaf {
            Leaf::State => match serde_json::from_slice::<NodeState>(&m.payload) {
                Ok(s) => {
                    let info = nodes.entry(m.node.clone()).or_default();
                    if info.online && !s.online {
                        log::info!("fusion: node {} went offline", m.node);
                    }
                    info.online = s.online;
                    if !s.online {
                        fuser.node_gone(&m.node);
                    }
                }
                Err(_) => ignore("malformed"),
            },
            Leaf::Tracks => match parse(&m.node, &m.payload, &cfg.origin) {
                Payload::Track(t) => {
                    let info = nodes.entry(m.node.clone()).or_default();
                    info.online = true;
                    info.last_report = Some(Instant::now());
                    summary.reports += 1;
                    fuser.report(*t);
                }
                Payload::Deleted(id) => fuser.ended(&m.node, id),
                Payload::Ignored(why) => ignore(why),
            },
        }
    }
}

/// Connect, subscribe to the site's nodes (again on every connection) and feed the inbox.
fn subscribe(
    cfg: &FuseConfig,
    inbox: Arc<InboxCounts>,
    stop: Arc<AtomicBool>,
) -> Result<(Receiver<Inbound>, Client)> {
    let name = format!("fuse:{}", cfg.broker.address);
    let options = cfg
        .broker
        // A clean session: reports queued while the service was away are stale by the time
        // it is back, and a message the client refuses (over its packet limit) is not sent
        // again on every reconnection.
        .options(&format!("sonotrack-fuse-{}", cfg.site), false)
        .map_err(|e| Error::Output {
            name: name.clone(),
            problem: e,
            fix: "fix the broker table of the fuse configuration".into(),
        })?;
    if cfg.broker.credentials_in_clear() {
        log::warn!("{name}: the password travels unencrypted; give broker.ca_file to use TLS");
    }
    let (client, mut conn) = Client::new(options, 100);
    let (tx, rx) = sync_channel::<Inbound>(INBOX);
    let base = format!("{}/{}/", cfg.prefix, cfg.site);
    let filters = [format!("{base}+/tracks"), format!("{base}+/state")];
    let sub = client.clone();
    let address = cfg.broker.address.clone();
    std::thread::Builder::new()
        .name("fuse subscriber".into())
        .spawn(move || {
            let mut backoff = Backoff::default();
            let mut failing = false;
            while !stop.load(Ordering::Relaxed) {
                let Ok(event) = conn.recv() else { break };
                match event {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        backoff.reset();
                        log::info!("{name}: connected; subscribing to {}", filters.join(", "));
                        failing = false;
                        for f in &filters {
                            let _ = sub.try_subscribe(f.as_str(), QoS::AtLeastOnce);
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        route(&p.topic, &p.payload, &base, &tx, &inbox);
                    }
                    Ok(_) => {}
                    Err(e) if too_large(&e) => {
                        // The client drops the connection at a packet over its limit (before
                        // reading it); count it and reconnect at once.
                        inbox.oversized.fetch_add(1, Ordering::Relaxed);
                        log::warn!(
                            "{name}: a message over {MAX_PACKET_BYTES} bytes on the site's topics was dropped (the connection with it; reconnecting); set the broker's message_size_limit to 65536 to refuse such messages at the broker"
                        );
                    }
                    Err(e) => {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        if !failing {
                            log::warn!("{name}: {}; retrying", explain(&e, &address));
                            failing = true;
                        }
                        let until = Instant::now() + backoff.next_wait();
                        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            }
        })
        .map_err(|e| Error::Output {
            name: "fuse".into(),
            problem: format!("cannot start the subscriber thread: {e}"),
            fix: "free resources".into(),
        })?;
    Ok((rx, client))
}

/// Whether the client dropped its connection over a packet larger than its limit.
fn too_large(e: &rumqttc::ConnectionError) -> bool {
    matches!(
        e,
        rumqttc::ConnectionError::MqttState(rumqttc::StateError::Deserialization(
            rumqttc::Error::PayloadSizeLimitExceeded(_)
        ))
    )
}

/// Hand one publish to the inbox: the node from the topic `<base><node>/<leaf>`, checked.
fn route(topic: &str, payload: &[u8], base: &str, tx: &SyncSender<Inbound>, counts: &InboxCounts) {
    let parsed = topic.strip_prefix(base).and_then(|rest| {
        let (node, leaf) = rest.split_once('/')?;
        let leaf = match leaf {
            "tracks" => Leaf::Tracks,
            "state" => Leaf::State,
            _ => return None,
        };
        topic_level_ok(node).then(|| (node.to_string(), leaf))
    });
    let Some((node, leaf)) = parsed else {
        counts.bad_topic.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if payload.len() > MAX_PAYLOAD {
        counts.oversized.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if let Err(TrySendError::Full(_)) = tx.try_send(Inbound {
        node,
        leaf,
        payload: payload.to_vec(),
    }) {
        counts.queue_full.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the subscriber thread drops before the inbox, by reason.
#[derive(Debug, Default)]
struct InboxCounts {
    queue_full: AtomicU64,
    bad_topic: AtomicU64,
    oversized: AtomicU64,
}

impl InboxCounts {
    /// Copy the counts into the summary's `ignored`.
    fn add_to(&self, summary: &mut FuseSummary) {
        for (k, v) in [
            ("queue_full", &self.queue_full),
            ("bad_topic", &self.bad_topic),
            ("oversized", &self.oversized),
        ] {
            let n = v.load(Ordering::Relaxed);
            if n > 0 {
                summary.ignored.insert(k.into(), n);
            }
        }
    }
}

/// A fused estimate as a node's track message, in the fusion origin's frame.
pub fn fused_message(
    e: &FusedEstimate,
    seq: u64,
    t_s: f64,
    origin: &Origin,
    stamp: &FrameStamp,
) -> TrackMessage {
    let pos = [e.x[0], e.x[1], e.x[2]];
    let vel = [e.x[3], e.x[4], e.x[5]];
    let mut pos_cov = [[0.0; 3]; 3];
    let mut cov = [[0.0; 6]; 6];
    for i in 0..6 {
        for j in 0..6 {
            cov[i][j] = e.p[(i, j)];
            if i < 3 && j < 3 {
                pos_cov[i][j] = e.p[(i, j)];
            }
        }
    }
    let report = TrackReport {
        id: e.id,
        status: if e.tentative {
            TrackStatus::Tentative
        } else {
            TrackStatus::Confirmed
        },
        seq,
        t_s,
        t_frame_s: t_s,
        position: pos,
        velocity: vel,
        pos_cov,
        vel_std: [3, 4, 5].map(|k| e.p[(k, k)].max(0.0).sqrt()),
        model_probs: Vec::new(),
        turn_rate_rad_s: 0.0,
        ess: 0.0,
        support: f32::NAN,
        mode: TrackMode::ThreeD,
        inv_range: None,
        coherence: None,
        state: GaussianState {
            mean: [pos[0], pos[1], pos[2], vel[0], vel[1], vel[2]],
            cov,
        },
        kin: Kinematics::ThreeD,
        estimate: EstimateKind::Filtered,
        line: None,
        mirror: None,
        mirror_prob: None,
        heading_deg: None,
        existence: None,
    };
    let stamp = FrameStamp {
        origin: Some(origin),
        ..*stamp
    };
    let mut m = TrackMessage::new(&report, &[], &stamp);
    m.model = "fused".into();
    m.fused_from = e
        .members
        .iter()
        .map(|(node, id)| FusedSource {
            node: node.clone(),
            id: *id,
        })
        .collect();
    m
}

/// A fused track's end as a node's track end.
pub fn fused_end(id: u64, why: FusedEnd) -> TrackEnd {
    match why {
        FusedEnd::Lost => TrackEnd {
            id,
            reason: EndReason::Lost,
            detail: "no node holds the source any more".into(),
            was_confirmed: true,
        },
        FusedEnd::Merged { into } => TrackEnd {
            id,
            reason: EndReason::Duplicate,
            detail: format!("the same source as fused track {into}"),
            was_confirmed: true,
        },
    }
}

fn status(
    fuser: &Fuser,
    nodes: &BTreeMap<String, NodeInfo>,
    summary: &FuseSummary,
    sinks: &SinkSet,
    t_s: f64,
    wall: SystemTime,
) -> FusionStatus {
    FusionStatus {
        kind: "fusion_status",
        schema: SCHEMA_VERSION,
        t: (t_s * 1e3).round() / 1e3,
        wall: rfc3339(wall),
        nodes: nodes
            .iter()
            .map(|(n, i)| {
                let view = NodeView {
                    online: i.online,
                    tracks: fuser.tracks_of(n),
                    last_report_s: i
                        .last_report
                        .map(|t| (t.elapsed().as_secs_f64() * 1e3).round() / 1e3),
                };
                (n.clone(), view)
            })
            .collect(),
        fused_tracks: fuser.fused_tracks(),
        reports: summary.reports,
        ignored: summary.ignored.clone(),
        sink_drops: sinks.drops(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_name_their_node_or_are_counted() {
        let (tx, rx) = sync_channel(2);
        let c = InboxCounts::default();
        let base = "sonotrack/harbour/";
        let big = vec![b' '; MAX_PAYLOAD + 1];
        let topics: [(&str, &[u8]); 7] = [
            ("sonotrack/harbour/north/tracks", b"{}"),
            ("sonotrack/harbour/south/state", b"{}"),
            ("sonotrack/harbour/x/status", b"{}"),
            ("sonotrack/other/x/tracks", b"{}"),
            ("sonotrack/harbour/a b/tracks", b"{}"),
            ("sonotrack/harbour/west/tracks", &big),
            ("sonotrack/harbour/east/tracks", b"{}"),
        ];
        for (topic, payload) in topics {
            route(topic, payload, base, &tx, &c);
        }
        assert_eq!(c.bad_topic.load(Ordering::Relaxed), 3);
        assert_eq!(c.oversized.load(Ordering::Relaxed), 1);
        assert_eq!(
            c.queue_full.load(Ordering::Relaxed),
            1,
            "the inbox holds two"
        );
        let got: Vec<_> = rx.try_iter().map(|m| m.node).collect();
        assert_eq!(got, ["north", "south"]);
        let mut summary = FuseSummary::default();
        c.add_to(&mut summary);
        assert_eq!(summary.ignored.len(), 3);
    }
}
