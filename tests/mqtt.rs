//! The MQTT output against a real broker (Mosquitto on loopback): the topic tree and payloads
//! a node publishes, a broker restart mid-run (nothing lost beyond what is counted), a node
//! killed (its last will marks it offline), a broker that demands credentials, and TLS.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::mqtt::{Broker, Subscriber, mosquitto_available};
use sonotrack::audio::sim::SceneSpec;
use sonotrack::output::broker::BrokerConfig;
use sonotrack::output::mqtt::{MqttSink, MqttSinkConfig};
use sonotrack::output::{Message, MessageKind, Sink};

/// A configuration for the built-in harbour scene with one MQTT output.
fn harbour_config(dir: &Path, broker: &str, node: &str, keep_alive_s: f64) -> PathBuf {
    let spec = SceneSpec::preset("harbour").unwrap();
    let cfg = format!(
        "{}\n[array.origin]\nlatitude_deg = 53.5\nlongitude_deg = 9.9\ndepth_m = 5.0\nheading_deg = 30.0\n\n\
         [audio]\nsample_rate_hz = {}\n\n[tracker]\nbackend = \"cpu\"\n\n[output]\nstatus_interval_s = 0.5\n\n\
         [[output.sink]]\nkind = \"mqtt\"\nsite = \"test\"\nnode = \"{node}\"\n\
         broker = {{ address = \"{broker}\", keep_alive_s = {keep_alive_s} }}\n",
        common::array_toml(&spec),
        spec.sample_rate_hz,
    );
    let path = dir.join(format!("{node}.toml"));
    std::fs::write(&path, cfg).unwrap();
    path
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap()
}

#[test]
fn a_node_publishes_tracks_status_and_its_state() {
    if !mosquitto_available() {
        return;
    }
    let dir = common::tmp_dir("mqtt-node");
    let broker = Broker::start(&dir, "");
    let sub = Subscriber::start(&broker.address(), "sonotrack/test/#", "it-sub-node");
    let cfg = harbour_config(&dir, &broker.address(), "north", 5.0);
    let out = common::sonotrack()
        .args(["run", "--config"])
        .arg(&cfg)
        .args(["--simulate", "harbour", "--seconds", "4"])
        .output()
        .unwrap();
    common::assert_ok(&out);
    assert!(sub.wait_for(Duration::from_secs(5), |g| {
        g.iter()
            .any(|(t, p)| t.ends_with("/state") && p.contains("\"online\":false"))
    }));
    let tracks = sub.on("sonotrack/test/north/tracks");
    let confirmed: Vec<_> = tracks
        .iter()
        .map(|p| json(p))
        .filter(|v| v["type"] == "track" && v["status"] == "confirmed")
        .collect();
    assert!(
        confirmed.len() > 20,
        "{} confirmed track messages",
        confirmed.len()
    );
    // Georeferenced: the fusion service reads these.
    let g = &confirmed[confirmed.len() - 1]["geo"];
    assert!(g["lat_deg"].as_f64().unwrap() > 53.4, "{g}");
    assert_eq!(g["enu_cov"].as_array().map(Vec::len), Some(6), "{g}");
    let status = sub.on("sonotrack/test/north/status");
    assert!(status.len() >= 4, "{} status messages", status.len());
    let last = json(status.last().unwrap());
    assert_eq!(last["type"], "status");
    assert_eq!(
        last["sink_drops"]["mqtt:".to_string() + &broker.address()],
        0
    );
    let states: Vec<_> = sub
        .on("sonotrack/test/north/state")
        .iter()
        .map(|p| json(p))
        .collect();
    assert_eq!(
        states.first().map(|s| s["online"].clone()),
        Some(true.into())
    );
    assert_eq!(
        states.last().map(|s| s["online"].clone()),
        Some(false.into())
    );
    // Retained: a subscriber that comes later still learns the node's state and last status.
    let late = Subscriber::start(&broker.address(), "sonotrack/test/+/+", "it-sub-late");
    assert!(late.wait_for(Duration::from_secs(3), |g| g.len() >= 2));
    assert_eq!(late.on("/state").len(), 1);
    assert_eq!(late.on("/status").len(), 1);
    assert!(late.on("/tracks").is_empty());
}

fn sink_config(address: &str, node: &str) -> MqttSinkConfig {
    MqttSinkConfig {
        broker: BrokerConfig::plain(address),
        prefix: "sonotrack".into(),
        site: "test".into(),
        node: node.into(),
        queue: 10_000,
        max_rate_hz: None,
    }
}

fn numbered(i: u64) -> Message {
    Message::json_only(
        MessageKind::Track,
        Some(1),
        i as f64,
        format!("{{\"type\":\"track\",\"n\":{i}}}"),
    )
}

fn numbers(sub: &Subscriber, node: &str) -> Vec<u64> {
    let mut n: Vec<u64> = sub
        .on(&format!("/{node}/tracks"))
        .iter()
        .filter_map(|p| json(p)["n"].as_u64())
        .collect();
    n.sort_unstable();
    n.dedup();
    n
}

/// QoS 1 on persistent sessions: a broker restarted mid-stream (as a service manager does it)
/// costs at most the message in flight as it went, counted; those sent while it was down wait
/// in the offline queue.
#[test]
fn a_broker_restart_loses_only_what_is_counted() {
    if !mosquitto_available() {
        return;
    }
    let dir = common::tmp_dir("mqtt-restart");
    let mut broker = Broker::start(&dir, "");
    let sub = Subscriber::start(&broker.address(), "sonotrack/test/#", "it-sub-restart");
    let mut sink = MqttSink::open(&sink_config(&broker.address(), "a")).unwrap();
    let lost = sink.late_drops().unwrap();
    let mut refused = 0u64;
    let mut send = |sink: &mut MqttSink, range: std::ops::Range<u64>| {
        for i in range {
            if sink.send(&numbered(i)).is_err() {
                refused += 1;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    send(&mut sink, 0..200);
    broker.stop();
    send(&mut sink, 200..400);
    broker.restart();
    send(&mut sink, 400..600);
    sink.flush().unwrap();
    assert!(sub.wait_for(Duration::from_secs(10), |g| g.len() >= 600));
    drop(sink);
    let got = numbers(&sub, "a");
    let lost = lost.load(Ordering::Relaxed);
    assert_eq!(refused, 0, "nothing refused");
    // Nothing lost beyond what is counted: at most the message in flight as the broker went
    // down (written to a socket it had already closed; the client does not send it again), in
    // about a third of runs.
    assert_eq!(
        got.len() as u64 + lost,
        600,
        "missing: {:?}, counted lost: {lost}",
        (0..600).filter(|i| !got.contains(i)).collect::<Vec<_>>()
    );
    assert!(lost <= 1, "{lost} counted lost");
}

/// A broker restarted without its sessions (persistence off): what it forgot is counted.
#[test]
fn a_broker_that_forgets_sessions_costs_only_counted_messages() {
    if !mosquitto_available() {
        return;
    }
    let dir = common::tmp_dir("mqtt-forget");
    let mut broker = Broker::start(&dir, "");
    let mut sink = MqttSink::open(&sink_config(&broker.address(), "b")).unwrap();
    let lost = sink.late_drops().unwrap();
    for i in 0..100 {
        sink.send(&numbered(i)).unwrap();
    }
    sink.flush().unwrap();
    broker.stop();
    let _ = std::fs::remove_file(dir.join("mosquitto.db"));
    for i in 100..300 {
        sink.send(&numbered(i)).unwrap();
    }
    // (The subscriber's own session is gone too: it subscribes afresh before the restart's
    // messages can flow.)
    broker.restart();
    let sub = Subscriber::start(&broker.address(), "sonotrack/test/#", "it-sub-forget");
    for i in 300..400 {
        sink.send(&numbered(i)).unwrap();
    }
    sink.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(sink);
    let got = numbers(&sub, "b").into_iter().filter(|&n| n >= 100).count() as u64;
    let lost = lost.load(Ordering::Relaxed);
    assert!(got >= 100, "the messages after the restart arrive ({got})");
    assert_eq!(got + lost, 300, "received {got} + counted lost {lost}");
}

/// SIGKILL, no goodbye: the broker publishes the node's last will within 1.5 keep-alives.
#[test]
fn a_killed_node_goes_offline_by_its_last_will() {
    if !mosquitto_available() {
        return;
    }
    let dir = common::tmp_dir("mqtt-will");
    let broker = Broker::start(&dir, "");
    let sub = Subscriber::start(&broker.address(), "sonotrack/test/+/state", "it-sub-will");
    let cfg = harbour_config(&dir, &broker.address(), "doomed", 1.0);
    let mut child = common::sonotrack()
        .args(["-q", "run", "--config"])
        .arg(&cfg)
        .args(["--simulate", "harbour", "--seconds", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(sub.wait_for(Duration::from_secs(10), |g| {
        g.iter().any(|(_, p)| p.contains("\"online\":true"))
    }));
    child.kill().unwrap();
    let killed = Instant::now();
    let _ = child.wait();
    assert!(sub.wait_for(Duration::from_secs(5), |g| {
        g.iter().any(|(_, p)| p.contains("\"online\":false"))
    }));
    let after = killed.elapsed();
    assert!(
        after < Duration::from_millis(2500),
        "offline after {after:?}"
    );
}

/// A broker that demands credentials: without them, or with the wrong ones, nothing is
/// delivered and every message is counted; with them, everything arrives.
#[test]
fn credentials_are_sent_as_configured_and_refusals_counted() {
    if !mosquitto_available() {
        return;
    }
    let dir = common::tmp_dir("mqtt-auth");
    let pwfile = dir.join("passwd");
    let st = std::process::Command::new("mosquitto_passwd")
        .args(["-b", "-c"])
        .arg(&pwfile)
        .args(["node", "s3cret"])
        .status()
        .expect("mosquitto_passwd runs");
    assert!(st.success());
    let broker = Broker::start(
        &dir,
        &format!("allow_anonymous false\npassword_file {}", pwfile.display()),
    );
    let sub = Subscriber::start_with(
        &broker.address(),
        "sonotrack/test/#",
        "it-sub-auth",
        Some(("node", "s3cret")),
    );
    assert!(sub.subscribed.load(Ordering::Relaxed));
    let secret = dir.join("node.pw");
    std::fs::write(&secret, "s3cret\n").unwrap();
    for (node, login) in [
        ("anon", None),
        ("wrong", Some("nope")),
        ("right", Some("file")),
    ] {
        let mut c = sink_config(&broker.address(), node);
        match login {
            Some("file") => {
                c.broker.username = Some("node".into());
                c.broker.password_file = Some(secret.display().to_string());
            }
            Some(p) => {
                c.broker.username = Some("node".into());
                c.broker.password = Some(p.into());
            }
            None => {}
        }
        let mut sink = MqttSink::open(&c).unwrap();
        let lost = sink.late_drops().unwrap();
        for i in 0..50 {
            sink.send(&numbered(i)).unwrap();
        }
        sink.flush().unwrap();
        drop(sink);
        let got = numbers(&sub, node).len() as u64;
        let lost = lost.load(Ordering::Relaxed);
        if node == "right" {
            assert_eq!((got, lost), (50, 0), "{node}");
        } else {
            assert_eq!(got, 0, "{node}: nothing gets through");
            assert!(lost >= 50, "{node}: every message counted ({lost})");
        }
    }
}

/// A reload (SIGHUP) opens the new outputs before the old ones close. With the same client id,
/// the new connection waits for the old one's goodbye: the node's retained state ends online
/// and both sinks' messages arrive.
#[test]
fn a_reloaded_output_takes_over_the_session() {
    if !mosquitto_available() {
        return;
    }
    let dir = common::tmp_dir("mqtt-reload");
    let broker = Broker::start(&dir, "");
    let sub = Subscriber::start(&broker.address(), "sonotrack/test/#", "it-sub-reload");
    let c = sink_config(&broker.address(), "r");
    let mut old = MqttSink::open(&c).unwrap();
    for i in 0..50 {
        old.send(&numbered(i)).unwrap();
    }
    let mut fresh = MqttSink::open(&c).unwrap();
    for i in 50..100 {
        fresh.send(&numbered(i)).unwrap();
    }
    drop(old);
    fresh.flush().unwrap();
    // The takeover waits for the old session's goodbye; on a loaded machine (a build beside the
    // tests) 10 s was once not enough, so the wait is generous and the count is in the message.
    let arrived = sub.wait_for(Duration::from_secs(30), |g| g.len() >= 100);
    assert!(arrived, "{} of 100 arrived", numbers(&sub, "r").len());
    assert_eq!(numbers(&sub, "r").len(), 100);
    let states = sub.on("/r/state");
    assert!(
        states.last().unwrap().contains("\"online\":true"),
        "{states:?}"
    );
    drop(fresh);
}

/// `openssl` with `args`, in `dir`; panics with its output when it fails.
fn openssl(dir: &Path, args: &str) {
    let out = std::process::Command::new("openssl")
        .args(args.split_whitespace())
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// TLS (`broker.ca_file`): a broker whose certificate chains to the configured authority gets
/// every message; one that the node cannot verify (another authority) gets none, and every
/// message is counted.
#[test]
fn tls_verifies_the_broker() {
    if !mosquitto_available() {
        return;
    }
    let dir = common::tmp_dir("mqtt-tls");
    let subj = |cn: &str| format!("-subj /CN={cn}");
    for ca in ["ca", "other"] {
        openssl(
            &dir,
            &format!(
                "req -x509 -newkey rsa:2048 -nodes -days 2 -keyout {ca}.key -out {ca}.pem {}",
                subj(ca)
            ),
        );
    }
    // The broker's certificate: an end entity (not a CA) for 127.0.0.1, signed by `ca`.
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        &dir,
        &format!(
            "req -new -newkey rsa:2048 -nodes -keyout server.key -out server.csr {}",
            subj("127.0.0.1")
        ),
    );
    openssl(
        &dir,
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out server.pem -extfile server.ext",
    );
    // (Run as root, Mosquitto drops to its own user: let it read these throwaway keys.)
    use std::os::unix::fs::PermissionsExt;
    for f in ["server.key", "server.pem", "ca.pem"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    // TLS on the broker's port; a plain listener beside it for the test's subscriber.
    let plain = common::mqtt::free_port();
    let d = dir.display();
    let broker = Broker::start(
        &dir,
        &format!(
            "cafile {d}/ca.pem\ncertfile {d}/server.pem\nkeyfile {d}/server.key\nlistener {plain} 127.0.0.1\n"
        ),
    );
    let sub = Subscriber::start(
        &format!("127.0.0.1:{plain}"),
        "sonotrack/test/#",
        "it-sub-tls",
    );
    for (node, ca) in [("trusted", "ca.pem"), ("untrusted", "other.pem")] {
        let mut c = sink_config(&broker.address(), node);
        c.broker.ca_file = Some(format!("{d}/{ca}"));
        let mut sink = MqttSink::open(&c).unwrap();
        let lost = sink.late_drops().unwrap();
        for i in 0..50 {
            sink.send(&numbered(i)).unwrap();
        }
        sink.flush().unwrap();
        drop(sink);
        if node == "trusted" {
            assert!(sub.wait_for(Duration::from_secs(5), |g| g.len() >= 50));
        }
        let got = numbers(&sub, node).len() as u64;
        let lost = lost.load(Ordering::Relaxed);
        if node == "trusted" {
            assert_eq!((got, lost), (50, 0), "{node}");
        } else {
            assert_eq!(got, 0, "{node}: nothing reaches a broker it cannot verify");
            assert!(lost >= 50, "{node}: every message counted ({lost})");
        }
    }
}
