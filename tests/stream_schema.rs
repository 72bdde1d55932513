//! The position stream as integrators receive it: every JSON message of a real replay checked
//! against `docs/stream.schema.json`, a `deleted` message after each track's last report,
//! frames identifiable, received levels and Earth positions present; and the NMEA TTM/TLL
//! sentences of the same replay over UDP (numbers, statuses, the lost sentence, checksums).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::UdpSocket;
use std::time::Duration;

use sonotrack::audio::sim::{SceneSpec, write_scene};
use sonotrack::gpu::BackendChoice;
use sonotrack::math::geo::Origin;
use sonotrack::output::nmea::{SentenceKind, verify};
use sonotrack::output::{SerialFormat, SinkConfig};
use sonotrack::pipeline::replay::{self, ReplayOptions};

const ORIGIN: Origin = Origin {
    latitude_deg: 53.343,
    longitude_deg: -6.201,
    depth_m: 0.0,
    heading_deg: 30.0,
};

/// The `harbour` preset for 8 s with its source silent after 4 s (one track born and lost),
/// its configuration with [`ORIGIN`] and its directory.
fn lost_source_scene(
    name: &str,
) -> (
    sonotrack::config::Config,
    std::path::PathBuf,
    Option<sonotrack::analysis::truth::Truth>,
    common::TmpDir,
) {
    let dir = common::tmp_dir(name);
    let mut spec = SceneSpec::preset("harbour").unwrap();
    spec.duration_s = 8.0;
    spec.sources[0].active = vec![[0.0, 4.0]];
    write_scene(&dir, &spec, false).unwrap();
    let (mut cfg, wav, truth) = replay::resolve(&dir, None).unwrap();
    cfg.array.origin = Some(ORIGIN);
    (cfg, wav, truth, dir)
}

fn cpu() -> ReplayOptions {
    ReplayOptions {
        backend: BackendChoice::Cpu,
        ..ReplayOptions::default()
    }
}

/// Returns the JSON lines and the NMEA datagrams of the lost source's replay.
fn replay_with_outputs(name: &str) -> (Vec<serde_json::Value>, Vec<String>) {
    let (mut cfg, wav, truth, dir) = lost_source_scene(name);
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    cfg.output.sinks.push(SinkConfig::Udp {
        address: rx.local_addr().unwrap().to_string(),
        format: SerialFormat::Nmea,
        sentences: vec![SentenceKind::Ttm, SentenceKind::Tll, SentenceKind::Psnt],
        max_rate_hz: None,
    });
    cfg.smoothing.lag_s = 0.3;
    cfg.validate("test").unwrap();
    let out = dir.join("stream.jsonl");
    let opts = ReplayOptions {
        out: Some(out.to_string_lossy().into_owned()),
        smooth: true,
        ..cpu()
    };
    // (The receiver reads while the replay sends: a socket's buffer holds a few hundred.)
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(n) = rx.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        got
    });
    replay::replay_file(&cfg, &wav, truth.as_ref(), &opts).unwrap();
    let datagrams = reader.join().unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    (lines, datagrams)
}

fn schema() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/stream.schema.json");
    let text = std::fs::read_to_string(path).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).expect("the schema is valid JSON Schema")
}

#[test]
fn the_stream_matches_its_schema_and_ends_tracks() {
    let (lines, datagrams) = replay_with_outputs("stream-schema");
    let v = schema();
    for (i, m) in lines.iter().enumerate() {
        let errors: Vec<String> = v.iter_errors(m).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "line {}: {errors:?}\n{m}", i + 1);
    }
    // The schema is not vacuous: a track message missing its id, a wrong status, an unknown
    // field and an unknown type all fail.
    let track = lines.iter().find(|m| m["type"] == "track").unwrap();
    for broken in [
        without(track, "id"),
        with(track, "status", "lost".into()),
        with(track, "colour", "red".into()),
        with(track, "type", "trak".into()),
    ] {
        assert!(!v.is_valid(&broken), "{broken}");
    }

    // Every track message is given again smoothed and lagged, once each, with its id, seq and
    // time; a smoothed message has no wrong estimate.
    let key = |m: &serde_json::Value| (m["id"].as_u64().unwrap(), m["seq"].as_u64().unwrap());
    let filtered: BTreeSet<(u64, u64)> = lines
        .iter()
        .filter(|m| m["type"] == "track")
        .map(|m| {
            assert_eq!(m["estimate"], "filtered");
            key(m)
        })
        .collect();
    for est in ["smoothed", "lagged"] {
        let of: Vec<(u64, u64)> = lines
            .iter()
            .filter(|m| m["type"] == "smoothed" && m["estimate"] == est)
            .map(key)
            .collect();
        assert_eq!(of.len(), filtered.len(), "{est}");
        assert_eq!(
            of.iter().copied().collect::<BTreeSet<_>>(),
            filtered,
            "{est}"
        );
    }
    let smoothed = lines.iter().find(|m| m["type"] == "smoothed").unwrap();
    assert!(!v.is_valid(&with(smoothed, "estimate", "filtered".into())));

    // Frames: every track message of a seq says how many its frame has.
    let mut per_seq: BTreeMap<u64, (usize, u64)> = BTreeMap::new();
    for m in lines.iter().filter(|m| m["type"] == "track") {
        let e = per_seq.entry(m["seq"].as_u64().unwrap()).or_default();
        e.0 += 1;
        e.1 = m["frame_reports"].as_u64().unwrap();
    }
    assert!(per_seq.values().all(|&(n, said)| n as u64 == said));

    // A deleted message for the lost track, after its last report, within 1.5 s of silence.
    let confirmed: BTreeSet<u64> = lines
        .iter()
        .filter(|m| m["type"] == "track" && m["status"] == "confirmed")
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    assert!(!confirmed.is_empty());
    for id in &confirmed {
        let pos = |pred: &dyn Fn(&serde_json::Value) -> bool| lines.iter().rposition(pred);
        let last = pos(&|m| m["type"] == "track" && m["id"] == *id).unwrap();
        let end = pos(&|m| m["type"] == "deleted" && m["id"] == *id)
            .unwrap_or_else(|| panic!("no deleted message for track {id}"));
        assert!(end > last);
        let d = &lines[end];
        assert_eq!(d["reason"], "lost");
        assert_eq!(d["was_confirmed"], true);
        let t = d["t"].as_f64().unwrap();
        assert!((4.0..=4.0 + 1.5 + 0.5).contains(&t), "ended at {t} s");
    }

    // Received level (while the source sounds) and Earth position on the confirmed reports.
    let reports: Vec<_> = lines
        .iter()
        .filter(|m| m["type"] == "track" && m["status"] == "confirmed")
        .collect();
    let sounding: Vec<_> = reports
        .iter()
        .filter(|m| m["t_frame"].as_f64().unwrap() < 3.9)
        .collect();
    let with_level = sounding
        .iter()
        .filter(|m| m["level_dbfs"].is_number())
        .count();
    assert!(
        with_level * 10 >= sounding.len() * 9,
        "{with_level} of {}",
        sounding.len()
    );
    for m in &reports {
        let g = &m["geo"];
        assert!((g["lat_deg"].as_f64().unwrap() - ORIGIN.latitude_deg).abs() < 0.01);
        assert!((g["lon_deg"].as_f64().unwrap() - ORIGIN.longitude_deg).abs() < 0.01);
        let pos: Vec<f64> = m["pos"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let range = g["range_m"].as_f64().unwrap();
        assert!((range - pos[0].hypot(pos[1])).abs() < 0.01);
    }

    check_nmea(&datagrams, &confirmed);
}

/// TTM and TLL: valid checksums, at most 82 characters, target numbers 01-99, status T while
/// tracked and L once, at the end, for each lost track.
fn check_nmea(datagrams: &[String], confirmed: &BTreeSet<u64>) {
    let sentences: Vec<&str> = datagrams
        .iter()
        .flat_map(|d| d.split_inclusive("\r\n"))
        .collect();
    assert!(!sentences.is_empty(), "no NMEA datagram arrived");
    for s in &sentences {
        assert!(verify(s) && s.len() <= 82 && s.ends_with("\r\n"), "{s:?}");
    }
    let fields =
        |s: &str| -> Vec<String> { s.trim_end().split(['*', ',']).map(str::to_owned).collect() };
    for id in confirmed {
        let name = format!("T{id}");
        let ttm: Vec<Vec<String>> = sentences
            .iter()
            .filter(|s| s.starts_with("$IITTM"))
            .map(|s| fields(s))
            .filter(|f| f[11] == name)
            .collect();
        assert!(!ttm.is_empty(), "no TTM for track {id}");
        let number: u8 = ttm[0][1].parse().unwrap();
        assert!((1..=99).contains(&number));
        assert!(ttm.iter().all(|f| f[1] == ttm[0][1]), "one number a track");
        assert!(ttm.iter().any(|f| f[12] == "T"));
        assert_eq!(ttm.last().unwrap()[12], "L", "the last TTM says lost");
        assert_eq!(ttm.iter().filter(|f| f[12] == "L").count(), 1);
        assert!(
            ttm.iter()
                .all(|f| f[4] == "T" && f[7] == "T" && f[10] == "N")
        );
        let tll: Vec<Vec<String>> = sentences
            .iter()
            .filter(|s| s.starts_with("$IITLL"))
            .map(|s| fields(s))
            .filter(|f| f[6] == name)
            .collect();
        assert!(!tll.is_empty(), "no TLL for track {id}");
        // 53°20.58' N, 6°12.06' W, within a kilometre.
        assert!(tll.iter().all(|f| f[2].starts_with("5320") && f[3] == "N"));
        assert!(tll.iter().all(|f| f[4].starts_with("0061") && f[5] == "W"));
        assert_eq!(tll.last().unwrap()[8], "L");
    }
    assert!(sentences.iter().any(|s| s.starts_with("$PSNTD,")));
}

fn without(m: &serde_json::Value, key: &str) -> serde_json::Value {
    let mut m = m.clone();
    m.as_object_mut().unwrap().remove(key);
    m
}

fn with(m: &serde_json::Value, key: &str, v: serde_json::Value) -> serde_json::Value {
    let mut m = m.clone();
    m[key] = v;
    m
}

/// The example client in `examples/udp_client.py` prints the reports and the end of a track
/// it receives.
#[test]
fn the_example_udp_client_reads_the_stream() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Command, Stdio};
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3 (CI installs it)");
        return;
    }
    let (mut cfg, wav, truth, _dir) = lost_source_scene("udp-client");
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/udp_client.py");
    let mut client = Command::new("python3")
        .args(["-u", script, &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for it to listen.
    let mut err = BufReader::new(client.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("listening"), "{line}");
    cfg.output.sinks.push(SinkConfig::Udp {
        address: format!("127.0.0.1:{port}"),
        format: SerialFormat::Jsonl,
        sentences: Vec::new(),
        max_rate_hz: None,
    });
    replay::replay_file(&cfg, &wav, truth.as_ref(), &cpu()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    client.kill().unwrap();
    let mut out = String::new();
    client
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let _ = client.wait();
    assert!(out.contains("track   1 confirmed"), "{out}");
    assert!(out.contains("track   1 ended (lost)"), "{out}");
}
