//! The reliability issue's reproducers, through the command line: each was a panic, a hang, an
//! unbounded allocation or nonsense accepted silently; each is now a prompt error that names
//! the option, file or key. (Parser-level cases are unit tests beside their parsers.)

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{simulate, sonotrack};
use std::time::Duration;

/// Run with a deadline (a hang fails the test instead of stalling CI).
fn run_bounded(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{cmd:?} ran past 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A refused run: a non-zero exit, no panic, and an error mentioning `needle`.
fn refused(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
}

/// A tiny scene: four sensors, a static white source, one second.
fn scene(dir: &Path) {
    let spec = r#"
description = "reproducers"
sensors_m = [[0.0, 0.0, 0.0], [3.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 3.0]]
speed_of_sound_m_s = 343.0
sample_rate_hz = 16000
duration_s = 1.0
snr_db = 20.0
[[source]]
signal = "white"
path = { kind = "static", position_m = [1.0, 1.0, 1.0] }
"#;
    simulate(dir, spec, false);
}

#[test]
fn non_finite_and_out_of_range_options_are_refused() {
    let dir = common::tmp_dir("repro-options");
    scene(&dir);
    let sc = dir.join("scene");
    for (opt, value) in [
        ("--ospa-c", "NaN"),
        ("--ospa-c", "inf"),
        ("--ospa-c", "0"),
        ("--ospa-p", "NaN"),
        ("--ospa-p", "inf"),
        ("--ospa-p", "1e308"),
        ("--warmup", "NaN"),
        ("--threshold", "NaN"),
    ] {
        let out = run_bounded(
            sonotrack()
                .args(["-q", "evaluate", "--scene"])
                .arg(&sc)
                .arg(sc.join("truth.csv"))
                .args([opt, value]),
        );
        refused(&out, opt);
    }
    for (opt, value) in [
        ("--realtime", "0"),
        ("--realtime", "NaN"),
        ("--from", "NaN"),
        ("--to", "inf"),
        ("--warmup", "NaN"),
        ("--threshold", "NaN"),
        ("--ospa-c", "0"),
    ] {
        let out = run_bounded(
            sonotrack()
                .args(["-q", "replay"])
                .arg(&sc)
                .args([opt, value]),
        );
        refused(&out, opt);
    }
}

#[test]
fn simulate_refuses_numbers_that_would_exhaust_memory() {
    let dir = common::tmp_dir("repro-simulate");
    for (path, rate, needle) in [
        (
            "{ kind = \"turn\", start_m = [1.0, 1.0, 1.0], speed_m_s = 1e9, heading_deg = 0.0, turn_rate_deg_s = 0.0 }",
            "20.0",
            "speed",
        ),
        (
            "{ kind = \"turn\", start_m = [1.0, 1.0, 1.0], speed_m_s = 1.0, heading_deg = 0.0, turn_rate_deg_s = 0.0, climb_m_s = inf }",
            "20.0",
            "non-finite",
        ),
        (
            "{ kind = \"static\", position_m = [1.0, 1.0, 1.0] }",
            "inf",
            "truth_rate_hz",
        ),
        (
            "{ kind = \"static\", position_m = [1.0, 1.0, 1.0] }",
            "1e9",
            "truth_rate_hz",
        ),
    ] {
        let spec = format!(
            "description = \"x\"\nsensors_m = [[0.0, 0.0, 0.0], [3.0, 0.0, 0.0]]\nspeed_of_sound_m_s = 343.0\nsample_rate_hz = 16000\nduration_s = 1.0\nsnr_db = 20.0\ntruth_rate_hz = {rate}\n[[source]]\nsignal = \"white\"\npath = {path}\n"
        );
        std::fs::write(dir.join("s.toml"), spec).unwrap();
        let out = run_bounded(
            sonotrack()
                .args(["-q", "simulate", "--spec"])
                .arg(dir.join("s.toml"))
                .arg("--out")
                .arg(dir.join("out")),
        );
        refused(&out, needle);
    }
}

#[test]
fn streams_with_huge_sequence_numbers_are_refused() {
    let dir = common::tmp_dir("repro-stream");
    scene(&dir);
    let sc = dir.join("scene");
    let line = |seq: &str| {
        format!(
            "{{\"type\":\"track\",\"t\":0.1,\"t_frame\":0.1,\"seq\":{seq},\"id\":1,\"pos\":[1,1,1]}}\n"
        )
    };
    for seq in ["1e19", "9223372036854775807", "1000000000000"] {
        std::fs::write(dir.join("s.jsonl"), line("0") + &line(seq)).unwrap();
        let out = run_bounded(
            sonotrack()
                .args(["-q", "evaluate", "--scene"])
                .arg(&sc)
                .arg(dir.join("s.jsonl")),
        );
        refused(&out, "seq");
    }
    let status = "{\"type\":\"status\",\"frames_in\":18446744073709551615}\n";
    std::fs::write(dir.join("s.jsonl"), line("0") + status).unwrap();
    let out = run_bounded(
        sonotrack()
            .args(["-q", "evaluate", "--scene"])
            .arg(&sc)
            .arg(dir.join("s.jsonl")),
    );
    refused(&out, "frames_in");
}

#[test]
fn empty_damaged_and_unsupported_wavs_say_what_is_wrong() {
    let dir = common::tmp_dir("repro-wav");
    scene(&dir);
    let sc = dir.join("scene");
    let wav = std::fs::read_dir(&sc)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "wav"))
        .unwrap();
    let header = |tag: u16, bits: u16, extra: &[u8], data: usize| {
        let ch = 4u16;
        let mut fmt = Vec::new();
        fmt.extend_from_slice(&tag.to_le_bytes());
        fmt.extend_from_slice(&ch.to_le_bytes());
        fmt.extend_from_slice(&16000u32.to_le_bytes());
        fmt.extend_from_slice(&(16000 * u32::from(ch * bits / 8)).to_le_bytes());
        fmt.extend_from_slice(&(ch * bits / 8).to_le_bytes());
        fmt.extend_from_slice(&bits.to_le_bytes());
        fmt.extend_from_slice(extra);
        let mut body = b"WAVEfmt ".to_vec();
        body.extend_from_slice(&(fmt.len() as u32).to_le_bytes());
        body.extend_from_slice(&fmt);
        body.extend_from_slice(b"data");
        body.extend_from_slice(&(data as u32).to_le_bytes());
        body.extend(std::iter::repeat_n(0u8, data));
        let mut f = b"RIFF".to_vec();
        f.extend_from_slice(&(body.len() as u32).to_le_bytes());
        f.extend_from_slice(&body);
        f
    };
    let mut extensible = Vec::new();
    extensible.extend_from_slice(&22u16.to_le_bytes());
    extensible.extend_from_slice(&16u16.to_le_bytes());
    extensible.extend_from_slice(&0u32.to_le_bytes());
    extensible.extend((0u8..16).collect::<Vec<u8>>());
    for (bytes, needle) in [
        (header(3, 32, &[], 0), "no samples"),
        (header(6, 8, &[], 4000), "does not support"),
        (header(0xFFFE, 16, &extensible, 4000), "does not support"),
        (
            b"RIFF\x10\x00\x00\x00WAVEfmt \x10\x00".to_vec(),
            "ends inside its header",
        ),
    ] {
        std::fs::write(&wav, bytes).unwrap();
        let out = run_bounded(sonotrack().args(["-q", "replay"]).arg(&sc));
        refused(&out, needle);
    }
}

/// Counts from the command line that sized an allocation (a plan grid, a trial's scenes, a
/// benchmark's particles) are refused by name (reliability issue).
#[test]
fn counts_that_would_exhaust_memory_are_refused() {
    let harbour =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("boards/arrays/harbour-5-hydrophone.toml");
    let dir = common::tmp_dir("repro-counts");
    let out = run_bounded(
        sonotrack()
            .args(["-q", "plan"])
            .arg(&harbour)
            .args(["--resolution", "1000000", "--out"])
            .arg(dir.join("plan")),
    );
    refused(&out, "--resolution");
    let out = run_bounded(sonotrack().args([
        "-q",
        "trial",
        "--family",
        "noise-only",
        "--runs",
        "4000000000",
    ]));
    refused(&out, "--runs");
    let out = run_bounded(sonotrack().args([
        "-q",
        "bench",
        "--what",
        "pf",
        "--backend",
        "cpu",
        "--pf-particles",
        "100000000000",
    ]));
    refused(&out, "--pf-particles");
}
