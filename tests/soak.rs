//! The short soak of the reliability issue: a minute of audio (`SOAK_SECONDS`, 60 by default;
//! `scripts/long-checks.sh` runs ten minutes) through the daemon path (`run --input … --speed
//! N`) and through `replay`, each with its resident memory sampled while it runs. After the
//! warm-up the memory grows by less than 1 MiB and every frame that entered is processed or
//! counted as dropped. (A day of audio through both is `scripts/day_soak.sh`; the live run with
//! outputs unplugged is `scripts/soak.py`; both recorded in BENCHMARKS.md.)

mod common;

use std::path::Path;
use std::process::{Child, Stdio};

use common::{assert_ok, simulate, sonotrack};
use std::time::{Duration, Instant};

/// Resident memory of a process, kB (None once it has gone).
fn rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Wait for `child`, sampling its resident memory every 50 ms; a run past `limit` fails.
fn watch(mut child: Child, limit: Duration) -> (std::process::Output, Vec<u64>) {
    let start = Instant::now();
    let mut rss = Vec::new();
    while child.try_wait().unwrap().is_none() {
        if let Some(kb) = rss_kb(child.id()) {
            rss.push(kb);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (child.wait_with_output().unwrap(), rss)
}

/// Growth after the warm-up (the first fifth of the samples): the largest sample after it less
/// the largest during it, kB.
fn growth_after_warmup(rss: &[u64]) -> i64 {
    assert!(rss.len() >= 10, "too few memory samples ({})", rss.len());
    let warm = rss.len() / 5;
    let during = rss[..warm].iter().copied().max().unwrap_or(0);
    let after = rss[warm..].iter().copied().max().unwrap_or(0);
    after as i64 - during as i64
}

/// Seconds of audio in each soak: `SOAK_SECONDS`, else 60.
fn soak_seconds() -> u64 {
    std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|s| *s >= 10)
        .unwrap_or(60)
}

/// Frames a soak of [`soak_seconds`] must see at least (16 kHz, a hop of 512 samples: 31.25
/// frames a second; nine tenths of that).
fn frames_expected() -> u64 {
    soak_seconds() * 28
}

/// A scene of [`soak_seconds`], free field (cheap to simulate): four hydrophones, a boat
/// passing.
fn soak_scene(dir: &Path) {
    let spec = r#"
description = "soak"
sensors_m = [[0.0, 0.0, -4.0], [22.0, 2.0, -10.0], [4.0, 19.0, -7.0], [-12.0, 8.0, -15.0]]
speed_of_sound_m_s = 1500.0
sample_rate_hz = 16000
duration_s = DURATION
snr_db = 10.0
bounds_min_m = [-80.0, -80.0, -50.0]
bounds_max_m = [80.0, 80.0, 0.0]
[[source]]
signal = "ship"
path = { kind = "turn", start_m = [-30.0, -10.0, -5.0], speed_m_s = 1.0, heading_deg = 10.0, turn_rate_deg_s = 0.5 }
"#
    .replace("DURATION", &format!("{}.0", soak_seconds()));
    simulate(dir, &spec, true);
}

#[test]
fn a_soak_of_replay_keeps_memory_flat_and_accounts_for_every_frame() {
    let dir = common::tmp_dir("soak-replay");
    soak_scene(&dir);
    // Without truth (scoring keeps each frame's reports, about 120 bytes a frame).
    std::fs::remove_file(dir.join("scene/truth.csv")).unwrap();
    let child = sonotrack()
        .args([
            "-q",
            "replay",
            "--no-progress",
            "--no-bound",
            "--backend",
            "cpu",
        ])
        .arg(dir.join("scene"))
        .arg("--out")
        .arg(dir.join("out.jsonl"))
        .arg("--summary-json")
        .arg(dir.join("summary.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, rss) = watch(child, Duration::from_secs(600));
    assert_ok(&out);
    let growth = growth_after_warmup(&rss);
    assert!(
        growth < 1024,
        "memory grew {growth} kB after the warm-up: {rss:?}"
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("no {k} in {s}"));
    assert!(n("frames_in") > frames_expected(), "{s}");
    assert_eq!(
        n("frames_in"),
        n("frames_processed") + n("frames_dropped"),
        "{s}"
    );
}

#[test]
fn a_soak_of_the_daemon_path_keeps_memory_flat_and_accounts_for_every_frame() {
    let dir = common::tmp_dir("soak-daemon");
    soak_scene(&dir);
    let cfg = dir.join("soak.toml");
    // The scene's array; the WAV paced at up to 50x real time, as fast as two shared cores go.
    std::fs::write(
        &cfg,
        format!(
            r#"[array]
sensors_m = [[0.0, 0.0, -4.0], [22.0, 2.0, -10.0], [4.0, 19.0, -7.0], [-12.0, 8.0, -15.0]]
speed_of_sound_m_s = 1500.0
bounds_min_m = [-80.0, -80.0, -50.0]
bounds_max_m = [80.0, 80.0, 0.0]
[audio]
sample_rate_hz = 16000
[tracker]
backend = "cpu"
particles = 4096
[output]
status_interval_s = 1.0
[[output.sink]]
kind = "jsonl"
path = "{}"
"#,
            dir.join("out.jsonl").display()
        ),
    )
    .unwrap();
    let wav = dir.join("scene/audio_s16.wav");
    let child = sonotrack()
        .args(["run", "--config"])
        .arg(&cfg)
        .arg("--input")
        .arg(&wav)
        .args(["--speed", "50"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, rss) = watch(child, Duration::from_secs(300));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let growth = growth_after_warmup(&rss);
    assert!(
        growth < 1024,
        "memory grew {growth} kB after the warm-up: {rss:?}"
    );
    // The exit summary: "ran X s: A frames in, B processed, C dropped ...".
    let line = log
        .lines()
        .find(|l| l.contains("frames in,"))
        .unwrap_or_else(|| panic!("no summary in {log}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|t| !t.is_empty())
        .filter_map(|t| t.parse().ok())
        .collect();
    // ran <s>.<s> s: in, processed, dropped
    let (fin, proc, dropped) = (nums[2], nums[3], nums[4]);
    assert!(fin > frames_expected(), "{line}");
    assert_eq!(fin, proc + dropped, "{line}");
    // Every status line the file got is whole JSON.
    let text = std::fs::read_to_string(dir.join("out.jsonl")).unwrap();
    assert!(text.lines().count() > 20);
    for l in text.lines() {
        assert!(serde_json::from_str::<serde_json::Value>(l).is_ok(), "{l}");
    }
}
