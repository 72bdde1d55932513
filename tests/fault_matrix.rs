//! The fault matrix of the reliability issue, the rows that need no capture device: input faults
//! (clicks, a dead channel, clipping, NaN bursts) in one replay, a capture gap, and a
//! configuration made invalid and reloaded in the daemon. Each is survived with every frame
//! processed or counted as dropped. The other rows are tests of their own (BENCHMARKS.md,
//! "Reliability", lists them all): serial unplug and replug and an absent UDP peer
//! (`tests/outputs.rs`), a GPU launch failure (`tests/replay.rs`, and the device run).

mod common;

use std::process::Stdio;

use common::sonotrack;
use std::time::{Duration, Instant};

use sonotrack::audio::sim::faults::{Clipping, DeadChannel};
use sonotrack::audio::sim::{SceneSpec, write_scene};
use sonotrack::audio::wav::write_wav;
use sonotrack::gpu::BackendChoice;
use sonotrack::pipeline::replay::{self, ReplayOptions};

/// Clicks (300 a minute), channel 2 dead for 5 s, 3 s of clipping and a second of NaN bursts on
/// channel 0, in 20 s of the harbour scene: every frame processed, the dead channel's frames
/// counted, the NaNs counted, the track kept.
#[test]
fn input_faults_are_counted_and_survived() {
    let dir = common::tmp_dir("fault-input");
    let mut spec = SceneSpec::preset("harbour").unwrap();
    spec.duration_s = 20.0;
    spec.faults.clicks_per_min = 300.0;
    spec.faults.dead = vec![DeadChannel {
        channel: 2,
        start_s: 6.0,
        duration_s: 5.0,
    }];
    spec.faults.clipping = vec![Clipping {
        start_s: 13.0,
        duration_s: 3.0,
        gain: 8.0,
    }];
    write_scene(&dir, &spec, false).unwrap();
    let (cfg, wav, truth) = replay::resolve(&dir, None).unwrap();
    // NaN bursts on channel 0 from 17 to 18 s.
    let (mut data, ch, fs) = common::read_all(&wav);
    let fs = fs as usize;
    for i in (17 * fs..18 * fs).step_by(2) {
        data[i * ch] = f32::NAN;
    }
    write_wav(&wav, ch, fs as u32, &data, false).unwrap();
    let opts = ReplayOptions {
        backend: BackendChoice::Cpu,
        ..ReplayOptions::default()
    };
    let s = replay::replay_file(&cfg, &wav, truth.as_ref(), &opts).unwrap();
    let c = &s.counters;
    let hop_s = cfg.hop_samples() as f64 / fs as f64;
    let frame_s = cfg.frame_samples() as f64 / fs as f64;
    eprintln!(
        "input faults: {} frames in, {} processed, {} dropped; channel 2 unusable in {} frames, channel 0 in {}; {} non-finite samples zeroed; {}",
        c.frames_in,
        c.frames_processed,
        c.frames_dropped(),
        c.bad_channel_frames[2],
        c.bad_channel_frames[0],
        c.nonfinite_samples,
        s.accuracy
            .as_ref()
            .map_or("no accuracy".into(), |a| a.to_string())
    );
    assert_eq!(c.frames_in, c.frames_processed + c.frames_dropped());
    assert_eq!(c.frames_dropped(), 0);
    // Frames wholly inside the dead interval are unusable on channel 2; those overlapping it
    // partly may be too: between (5 - frame) / hop and (5 + frame) / hop + 1.
    let dead = c.bad_channel_frames[2] as f64;
    assert!(
        dead >= (5.0 - frame_s) / hop_s - 1.0 && dead <= (5.0 + frame_s) / hop_s + 1.0,
        "{dead} frames"
    );
    assert!(c.nonfinite_samples >= (fs / 2) as u64 - 1, "{c:?}");
    assert!(c.bad_channel_frames[0] > 0);
    let a = s.accuracy.clone().unwrap();
    assert!(a.rmse_m < 1.0, "{a}");
}

/// A capture gap (an over-run or a device that stalled) drops exactly the frames that would
/// span it, and counts them.
#[test]
fn a_capture_gap_drops_and_counts_the_frames_across_it() {
    let mut cfg = sonotrack::bench::workload::harbour_config();
    cfg.gcc.frame_samples = Some(1024);
    cfg.gcc.hop_samples = Some(512);
    let mut asm = cfg.frame_assembler(0);
    let ch = cfg.input_channels();
    let block = vec![0.1f32; ch * 4096];
    let mut frames = 0u64;
    let mut drain = |asm: &mut sonotrack::audio::assembler::FrameAssembler| {
        while asm.pop().is_some() {
            frames += 1;
        }
    };
    asm.push(&block);
    drain(&mut asm);
    // 3000 samples lost (samples 4096..7096): the frames that would include any of them
    // cannot be built.
    let dropped = asm.gap(3000);
    asm.push(&block);
    drain(&mut asm);
    eprintln!("capture gap of 3000 samples: {dropped} frames dropped, {frames} built");
    // Frames are 1024 long every 512: 7 fit in 0..4096 and 6 in 7096..11192 (starts 7168 to
    // 10240); the 7 starts between (3584 to 6656) are dropped and counted.
    assert_eq!(frames, 13);
    assert_eq!(dropped, 7);
    assert_eq!(asm.lost_frames, 7);
    let starts = (11192 - 1024) / 512 + 1;
    assert_eq!(frames + dropped, starts);
}

/// SIGHUP with a configuration made invalid keeps the old outputs (and says so); after it is
/// fixed, the next SIGHUP reloads. No frame is lost and the file output keeps every line.
#[test]
fn an_invalid_configuration_reloaded_keeps_the_old_outputs() {
    let dir = common::tmp_dir("fault-reload");
    let out = dir.join("out.jsonl");
    let good = format!(
        "[array]\nsensors_m = [[0.0, 0.0, -4.0], [22.0, 2.0, -10.0], [4.0, 19.0, -7.0], [-12.0, 8.0, -15.0], [7.0, 5.0, -22.0]]\nspeed_of_sound_m_s = 1500.0\nbounds_min_m = [-80.0, -80.0, -60.0]\nbounds_max_m = [80.0, 80.0, 0.0]\n[audio]\nsample_rate_hz = 48000\n[tracker]\nbackend = \"cpu\"\nparticles = 4096\n[output]\nstatus_interval_s = 0.5\n[[output.sink]]\nkind = \"jsonl\"\npath = \"{}\"\n",
        out.display()
    );
    let cfg = dir.join("run.toml");
    std::fs::write(&cfg, &good).unwrap();
    let mut child = sonotrack()
        .args(["run", "--config"])
        .arg(&cfg)
        .args(["--simulate", "harbour", "--seconds", "12"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let hup = |child: &std::process::Child| {
        // SAFETY: kill(2) on our own child's pid with a valid signal number.
        unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    };
    // The daemon's log, read as it is written.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let log = log.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                let mut l = log.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        })
    };
    let wait_for = |what: &dyn Fn(&str) -> bool, why: &str| {
        let start = Instant::now();
        while !what(&log.lock().unwrap()) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "waited for {why}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Running (signal handlers installed) once it has written to its output.
    let start = Instant::now();
    while std::fs::read_to_string(&out).unwrap_or_default().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(60), "no output");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(
        &cfg,
        good.replace("particles = 4096", "particles = \"many\""),
    )
    .unwrap();
    hup(&child);
    wait_for(
        &|l| l.contains("keeping the old outputs"),
        "the refused reload",
    );
    let lines_mid = std::fs::read_to_string(&out)
        .unwrap_or_default()
        .lines()
        .count();
    std::fs::write(&cfg, &good).unwrap();
    hup(&child);
    wait_for(&|l| l.contains("outputs reloaded"), "the reload");
    while child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the daemon did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let log = log.lock().unwrap().clone();
    assert!(status.success(), "{log}");
    assert!(log.contains("tracker.particles"), "{log}");
    assert!(log.contains("1 reloads"), "{log}");
    let line = log.lines().find(|l| l.contains("frames in,")).unwrap();
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|t| t.parse().ok())
        .collect();
    eprintln!("invalid reload: {line}");
    assert_eq!(nums[2], nums[3] + nums[4], "{line}");
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > lines_mid, "nothing written after the reload");
    for l in &lines {
        assert!(serde_json::from_str::<serde_json::Value>(l).is_ok(), "{l}");
    }
}
