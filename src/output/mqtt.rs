//! The MQTT output: a node publishes its stream to a broker, for `sonotrack fuse` and any other
//! subscriber.
//!
//! Topics (see docs/stream.md, "MQTT"):
//! - `<prefix>/<site>/<node>/tracks`: track, smoothed and deleted messages;
//! - `<prefix>/<site>/<node>/status`: status messages, retained (a new subscriber gets the last);
//! - `<prefix>/<site>/<node>/state`: `{"type":"node",...,"online":true|false}`, retained; the
//!   broker publishes the offline one as the node's last will when it loses the node.
//!
//! Everything is QoS 1 on a persistent session (`clean_session` false), so a broker that keeps
//! sessions (Mosquitto with `persistence true`) gets every message a restart interrupted. The
//! client's request queue is the bounded offline queue (`queue` messages): while the broker is
//! away new messages wait there, and when it is full they are dropped and counted. Messages
//! that a broker without the session forgets, and those still unacknowledged when the node
//! stops, are counted too. Nothing here ever waits for the network: the pipeline's side is a
//! `try_publish`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rumqttc::{Client, Connection, Event, LastWill, Outgoing, Packet, QoS, Request};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::output::broker::{
    Backoff, BrokerConfig, Problem, explain, topic_level_ok, topic_prefix_ok,
};
use crate::output::message::SCHEMA_VERSION;
use crate::output::{Message, MessageKind, Sink, open_error};

/// The `[[output.sink]]` table of `kind = "mqtt"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttSinkConfig {
    /// The broker: `{ address = "host:port", username = ..., password_file = ..., ca_file = ... }`.
    pub broker: BrokerConfig,
    /// First topic levels (default `sonotrack`).
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// The installation (harbour, building) and this node's name in it.
    pub site: String,
    pub node: String,
    /// Messages held while the broker is away; more are dropped and counted.
    #[serde(default = "default_queue")]
    pub queue: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate_hz: Option<f64>,
}

pub fn default_prefix() -> String {
    "sonotrack".into()
}

fn default_queue() -> usize {
    10_000
}

/// Largest offline queue accepted (messages; a track message is about 1 kB).
const MAX_QUEUE: usize = 1_000_000;

impl MqttSinkConfig {
    /// The first problem with this output's settings (key relative to the sink's table).
    pub fn problem(&self) -> Option<(String, String, &'static str)> {
        let own = |p: Problem| (format!("broker.{}", p.0), p.1, p.2);
        if let Some(p) = self.broker.problem() {
            return Some(own(p));
        }
        if !topic_prefix_ok(&self.prefix) {
            return Some((
                "prefix".into(),
                format!("`{}`", self.prefix),
                "use levels of letters, digits, '-', '_' or '.' joined by '/', e.g. \"sonotrack\"",
            ));
        }
        for (key, v) in [("site", &self.site), ("node", &self.node)] {
            if !topic_level_ok(v) {
                return Some((
                    key.into(),
                    format!("`{v}`"),
                    "use 1-64 letters, digits, '-', '_' or '.' (it becomes one topic level)",
                ));
            }
        }
        if !(1..=MAX_QUEUE).contains(&self.queue) {
            return Some((
                "queue".into(),
                format!("{}", self.queue),
                "use 1-1000000 messages",
            ));
        }
        None
    }

    pub fn topics(&self) -> NodeTopics {
        NodeTopics::new(&self.prefix, &self.site, &self.node)
    }
}

/// A node's topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTopics {
    pub tracks: String,
    pub status: String,
    pub state: String,
}

impl NodeTopics {
    pub fn new(prefix: &str, site: &str, node: &str) -> Self {
        let base = format!("{prefix}/{site}/{node}");
        Self {
            tracks: format!("{base}/tracks"),
            status: format!("{base}/status"),
            state: format!("{base}/state"),
        }
    }
}

/// The retained payload of a node's `state` topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    #[serde(rename = "type")]
    pub kind: String,
    pub schema: u32,
    pub site: String,
    pub node: String,
    pub online: bool,
}

impl NodeState {
    pub fn json(site: &str, node: &str, online: bool) -> String {
        let s = NodeState {
            kind: "node".into(),
            schema: SCHEMA_VERSION,
            site: site.into(),
            node: node.into(),
            online,
        };
        serde_json::to_string(&s).unwrap_or_default()
    }
}

/// Counters shared by the sink and its connection thread.
#[derive(Debug, Default)]
struct Shared {
    /// Publishes handed to the client (state messages included).
    accepted: AtomicU64,
    /// Publishes the broker acknowledged.
    acked: AtomicU64,
    /// Publishes lost after the client took them (a broker without the session, or still
    /// unacknowledged at shutdown): the runner counts these as drops.
    lost: Arc<AtomicU64>,
    connected: AtomicBool,
    closing: AtomicBool,
}

impl Shared {
    fn outstanding(&self) -> u64 {
        let a = self.accepted.load(Ordering::Relaxed);
        let done = self.acked.load(Ordering::Relaxed) + self.lost.load(Ordering::Relaxed);
        a.saturating_sub(done)
    }
}

/// Longest a flush (end of a replay) waits for the broker's acknowledgements.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

pub struct MqttSink {
    name: String,
    client: Client,
    topics: NodeTopics,
    offline_state: String,
    shared: Arc<Shared>,
    /// The connection thread, and word from it when it ends.
    driver: Option<(JoinHandle<()>, Receiver<()>)>,
}

impl MqttSink {
    /// Connect (in the background: an absent broker is retried, not an error here).
    pub fn open(cfg: &MqttSinkConfig) -> Result<Self> {
        let name = format!("mqtt:{}", cfg.broker.address);
        let default_id = format!("sonotrack-{}-{}", cfg.site, cfg.node);
        let mut options = cfg
            .broker
            .options(&default_id, true)
            .map_err(|e| open_error(&name, e, "fix the [output.sink] broker table"))?;
        let topics = cfg.topics();
        let offline_state = NodeState::json(&cfg.site, &cfg.node, false);
        options.set_last_will(LastWill::new(
            topics.state.clone(),
            offline_state.clone(),
            QoS::AtLeastOnce,
            true,
        ));
        if cfg.broker.credentials_in_clear() {
            log::warn!(
                "output {name}: the password travels unencrypted; give broker.ca_file to use TLS"
            );
        }
        let (client, connection) = Client::new(options, cfg.queue);
        let shared = Arc::new(Shared::default());
        let online = NodeState::json(&cfg.site, &cfg.node, true);
        let driver = spawn_driver(
            name.clone(),
            connection,
            client.clone(),
            shared.clone(),
            (topics.state.clone(), online),
        )
        .map_err(|e| {
            open_error(
                &name,
                format!("cannot start its thread: {e}"),
                "free resources",
            )
        })?;
        Ok(Self {
            name,
            client,
            topics,
            offline_state,
            shared,
            driver: Some(driver),
        })
    }

    fn topic(&self, kind: MessageKind) -> (&str, bool) {
        match kind {
            MessageKind::Status => (&self.topics.status, true),
            MessageKind::Track | MessageKind::Smoothed | MessageKind::Deleted => {
                (&self.topics.tracks, false)
            }
        }
    }
}

impl Sink for MqttSink {
    fn send(&mut self, msg: &Message) -> std::io::Result<()> {
        let (topic, retain) = self.topic(msg.kind);
        match self
            .client
            .try_publish(topic, QoS::AtLeastOnce, retain, msg.json.as_bytes())
        {
            Ok(()) => {
                self.shared.accepted.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(std::io::Error::other(format!(
                "offline queue full or client closed ({e}); broker {}",
                if self.shared.connected.load(Ordering::Relaxed) {
                    "connected"
                } else {
                    "unreachable"
                }
            ))),
        }
    }

    /// Wait (at most [`FLUSH_WAIT`]) until the broker acknowledged everything sent.
    fn flush(&mut self) -> std::io::Result<()> {
        let start = Instant::now();
        while self.shared.outstanding() > 0 && start.elapsed() < FLUSH_WAIT {
            if !self.shared.connected.load(Ordering::Relaxed) && start.elapsed() > FLUSH_WAIT / 5 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    fn late_drops(&self) -> Option<Arc<AtomicU64>> {
        Some(self.shared.lost.clone())
    }
}

impl Drop for MqttSink {
    /// Say goodbye: the offline state (a clean disconnect sends no last will), then
    /// DISCONNECT; what the broker never acknowledged is counted as lost.
    fn drop(&mut self) {
        let _ = self.flush();
        if self
            .client
            .try_publish(
                &self.topics.state,
                QoS::AtLeastOnce,
                true,
                self.offline_state.as_bytes(),
            )
            .is_ok()
        {
            self.shared.accepted.fetch_add(1, Ordering::Relaxed);
        }
        let _ = self.flush();
        self.shared.closing.store(true, Ordering::Relaxed);
        let _ = self.client.try_disconnect();
        if let Some((handle, done)) = self.driver.take() {
            // (A connection thread stuck in a connect attempt is left to end on its own.)
            if done.recv_timeout(Duration::from_secs(3)).is_ok() {
                let _ = handle.join();
            }
        }
        let left = self.shared.outstanding();
        if left > 0 {
            self.shared.lost.fetch_add(left, Ordering::Relaxed);
            log::warn!(
                "output {}: {left} messages not acknowledged by the broker at shutdown",
                self.name
            );
        }
    }
}

/// Client ids with a connection thread in this process. A reload (SIGHUP) opens the new
/// outputs before the old ones close; with the same client id both would connect and the
/// broker would drop one for the other, so a new connection waits for the old one's goodbye.
static ACTIVE_IDS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Longest a new connection waits for an old one of the same client id to close.
const HANDOVER_WAIT: Duration = Duration::from_secs(10);

/// Wait until no connection of this process uses client id `id`, then claim it.
fn claim_id(id: &str) {
    let start = Instant::now();
    loop {
        if let Ok(mut ids) = ACTIVE_IDS.lock() {
            if !ids.iter().any(|i| i == id) || start.elapsed() > HANDOVER_WAIT {
                ids.push(id.to_string());
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn release_id(id: &str) {
    if let Ok(mut ids) = ACTIVE_IDS.lock() {
        if let Some(k) = ids.iter().position(|i| i == id) {
            ids.remove(k);
        }
    }
}

/// The connection thread: polls the client's event loop (which reconnects), counts
/// acknowledgements, republishes the online state on every connection, and backs off while
/// the broker is away.
fn spawn_driver(
    name: String,
    mut conn: Connection,
    client: Client,
    shared: Arc<Shared>,
    (state_topic, online): (String, String),
) -> std::io::Result<(JoinHandle<()>, Receiver<()>)> {
    let (done_tx, done_rx) = sync_channel(1);
    let id = conn.eventloop.mqtt_options.client_id();
    let handle = std::thread::Builder::new()
        .name(format!("{name} connection"))
        .spawn(move || {
            claim_id(&id);
            let mut backoff = Backoff::default();
            let mut failing = false;
            loop {
                let pending = conn
                    .eventloop
                    .pending
                    .iter()
                    .filter(|r| matches!(r, Request::Publish(_)))
                    .count() as u64;
                let Ok(event) = conn.recv() else { break };
                let closing = shared.closing.load(Ordering::Relaxed);
                match event {
                    Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                        if !ack.session_present && pending > 0 {
                            shared.lost.fetch_add(pending, Ordering::Relaxed);
                            log::warn!(
                                "output {name}: the broker kept no session; {pending} unacknowledged messages lost"
                            );
                        }
                        shared.connected.store(true, Ordering::Relaxed);
                        backoff.reset();
                        if failing {
                            log::info!("output {name}: connected again");
                        } else {
                            log::info!("output {name}: connected");
                        }
                        failing = false;
                        if !closing
                            && client
                                .try_publish(&state_topic, QoS::AtLeastOnce, true, online.as_bytes())
                                .is_ok()
                        {
                            shared.accepted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        shared.acked.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Event::Outgoing(Outgoing::Disconnect)) if closing => break,
                    Ok(_) => {}
                    Err(e) => {
                        shared.connected.store(false, Ordering::Relaxed);
                        if closing {
                            break;
                        }
                        let wait = backoff.next_wait();
                        if !failing {
                            log::warn!(
                                "output {name}: {}; retrying, messages wait in the offline queue",
                                explain(&e, &name["mqtt:".len()..])
                            );
                            failing = true;
                        } else {
                            log::debug!("output {name}: {e}; next attempt in {wait:?}");
                        }
                        let until = Instant::now() + wait;
                        while Instant::now() < until && !shared.closing.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        if shared.closing.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                }
            }
            release_id(&id);
            let _ = done_tx.send(());
        })?;
    Ok((handle, done_rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> MqttSinkConfig {
        MqttSinkConfig {
            broker: BrokerConfig::plain("127.0.0.1:1883"),
            prefix: default_prefix(),
            site: "harbour".into(),
            node: "north".into(),
            queue: 100,
            max_rate_hz: None,
        }
    }

    #[test]
    fn topics_and_checks() {
        let c = cfg();
        assert!(c.problem().is_none());
        assert_eq!(c.topics().tracks, "sonotrack/harbour/north/tracks");
        assert_eq!(c.topics().state, "sonotrack/harbour/north/state");
        let mut bad = c.clone();
        bad.node = "a/#".into();
        assert_eq!(bad.problem().map(|p| p.0), Some("node".into()));
        let mut bad = c.clone();
        bad.queue = 0;
        assert_eq!(bad.problem().map(|p| p.0), Some("queue".into()));
        let mut bad = c;
        bad.broker.address = "nowhere".into();
        assert_eq!(bad.problem().map(|p| p.0), Some("broker.address".into()));
    }

    /// No broker: sends never wait, the queue fills, the rest are refused (the runner counts
    /// them), and what the queue held is counted lost when the sink closes.
    #[test]
    fn an_absent_broker_fills_the_queue_and_counts() {
        // (A port nothing listens on: bind one, note it, close it.)
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut c = cfg();
        c.broker.address = format!("127.0.0.1:{port}");
        c.queue = 10;
        let mut sink = MqttSink::open(&c).unwrap();
        let start = Instant::now();
        let mut refused = 0;
        for i in 0..50 {
            let m = Message::json_only(MessageKind::Track, Some(1), i as f64, "{}".into());
            if sink.send(&m).is_err() {
                refused += 1;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(1));
        let accepted = sink.shared.accepted.load(Ordering::Relaxed);
        assert_eq!(accepted + refused, 50);
        assert!(refused >= 30, "{refused} refused");
        let lost = sink.late_drops().unwrap();
        drop(sink);
        // (The goodbye state message may have found room too.)
        let lost = lost.load(Ordering::Relaxed);
        assert!(
            (accepted..=accepted + 1).contains(&lost),
            "every accepted message is lost: {lost} of {accepted}"
        );
    }
}
