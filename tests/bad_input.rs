//! Bad input never panics and never passes silently: each case gives an error naming the file,
//! key or device and the fix, or a counted drop.

mod common;

use common::read_all;

use sonotrack::audio::sim::{SceneSpec, write_scene};
use sonotrack::audio::wav::write_wav;
use sonotrack::config::Config;
use sonotrack::error::Error;
use sonotrack::gpu::BackendChoice;
use sonotrack::output::{SerialFormat, SinkConfig};
use sonotrack::pipeline::replay::{self, ReplayOptions};

fn cpu() -> ReplayOptions {
    ReplayOptions {
        backend: BackendChoice::Cpu,
        ..ReplayOptions::default()
    }
}

/// A short simulated room scene (6 channels, 16 kHz) written as 32-bit float.
fn room(name: &str, seconds: f64) -> common::TmpDir {
    let dir = common::tmp_dir(name);
    let mut spec = SceneSpec::preset("room").unwrap();
    spec.duration_s = seconds;
    write_scene(&dir, &spec, false).unwrap();
    dir
}

#[test]
fn malformed_wav_names_the_file() {
    let dir = room("bad-wav", 1.0);
    std::fs::write(
        dir.join("audio.wav"),
        b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk",
    )
    .unwrap();
    let (cfg, wav, truth) = replay::resolve(&dir, None).unwrap();
    let e = replay::replay_file(&cfg, &wav, truth.as_ref(), &cpu()).unwrap_err();
    assert!(matches!(e, Error::Wav { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("audio.wav") && msg.contains("fix:"), "{msg}");
}

#[test]
fn channel_and_rate_mismatches_are_refused_before_any_audio() {
    let dir = room("mismatch", 1.0);
    let (cfg, wav, truth) = replay::resolve(&dir, None).unwrap();
    // The configuration says 5 sensors; the file has 6 channels.
    let mut five = cfg.clone();
    five.array.sensors_m.pop();
    let e = replay::replay_file(&five, &wav, truth.as_ref(), &cpu()).unwrap_err();
    match e {
        Error::Config(c) => {
            assert_eq!(c.key, "audio.channels");
            assert!(c.fix.contains("audio.channels = 6"), "{c}");
        }
        other => panic!("{other}"),
    }
    let mut rate = cfg.clone();
    rate.audio.sample_rate_hz = 48_000;
    let e = replay::replay_file(&rate, &wav, truth.as_ref(), &cpu()).unwrap_err();
    assert!(
        matches!(&e, Error::Config(c) if c.key == "audio.sample_rate_hz"),
        "{e}"
    );
}

#[test]
fn wrong_key_in_a_config_file_is_named() {
    let dir = common::tmp_dir("badkey");
    let p = dir.join("c.toml");
    std::fs::write(
        &p,
        "[array]\nsensors_m = [[0,0,0],[1,0,0],[0,1,0],[0,0,1]]\nspeed_of_sound_m_s = 343\n[tracker]\nparticle = 100\n",
    )
    .unwrap();
    let e = Config::load(&p).unwrap_err().to_string();
    assert!(
        e.contains("tracker.particle") && e.contains("c.toml") && e.contains("line 5"),
        "{e}"
    );
    assert!(e.contains("did you mean `particles`?"), "{e}");
}

/// NaN and infinite samples are zeroed and counted; a dead channel is counted and left out;
/// the track survives both.
#[test]
fn nan_samples_and_a_dead_channel_are_counted_not_fatal() {
    let dir = room("nan-dead", 5.0);
    let wav = dir.join("audio.wav");
    let (mut data, ch, fs) = read_all(&wav);
    let frames = data.len() / ch;
    // Channel 1: NaN bursts for a second in the middle; channel 5: unplugged throughout.
    for i in 0..frames {
        if (2 * fs as usize..3 * fs as usize).contains(&i) && i % 3 == 0 {
            data[i * ch + 1] = if i % 2 == 0 { f32::NAN } else { f32::INFINITY };
        }
        data[i * ch + 5] = 0.0;
    }
    write_wav(&wav, ch, fs, &data, false).unwrap();
    let (cfg, wav, truth) = replay::resolve(&dir, None).unwrap();
    let s = replay::replay_file(&cfg, &wav, truth.as_ref(), &cpu()).unwrap();
    let c = &s.counters;
    assert!(c.nonfinite_samples > 1000, "{c:?}");
    assert_eq!(
        c.bad_channel_frames[5], c.frames_processed,
        "channel 5 dead in every frame"
    );
    assert!(
        c.bad_channel_frames[1] > 5,
        "channel 1 unusable while the NaNs last"
    );
    assert_eq!(c.bad_channel_frames[0], 0);
    assert_eq!(c.frames_in, c.frames_processed);
    let a = s.accuracy.clone().unwrap();
    eprintln!("with NaNs and a dead channel: {a}");
    assert!(a.rmse_m < 0.3, "{a}");
    let text = s.to_string();
    assert!(text.contains("non-finite samples zeroed"), "{text}");
}

/// An unreachable UDP peer and a serial port that does not exist cost dropped messages, not
/// the replay.
#[test]
fn absent_outputs_are_counted_not_fatal() {
    let dir = room("sinks", 2.0);
    let (mut cfg, wav, truth) = replay::resolve(&dir, None).unwrap();
    // A UDP port nobody listens on (bound, then released).
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    cfg.output.sinks = vec![
        SinkConfig::Udp {
            address: format!("127.0.0.1:{port}"),
            format: SerialFormat::Jsonl,
            sentences: Vec::new(),
            max_rate_hz: None,
        },
        SinkConfig::Serial {
            port: "/dev/sonotrack-no-such-port".into(),
            baud: 115_200,
            format: SerialFormat::Nmea,
            sentences: vec![sonotrack::output::nmea::SentenceKind::Psnt],
            max_rate_hz: None,
        },
    ];
    let s = replay::replay_file(&cfg, &wav, truth.as_ref(), &cpu()).unwrap();
    assert_eq!(s.counters.frames_in, s.counters.frames_processed);
}

#[test]
fn scene_without_truth_replays_without_accuracy() {
    let dir = room("notruth", 1.0);
    std::fs::remove_file(dir.join("truth.csv")).unwrap();
    let (cfg, wav, truth) = replay::resolve(&dir, None).unwrap();
    assert!(truth.is_none());
    let s = replay::replay_file(&cfg, &wav, None, &cpu()).unwrap();
    assert!(s.accuracy.is_none());
}

#[test]
fn wav_without_config_is_a_usage_error() {
    let dir = room("noconfig", 1.0);
    let e = replay::resolve(&dir.join("audio.wav"), None).unwrap_err();
    assert!(matches!(e, Error::Usage(_)), "{e}");
    assert!(e.to_string().contains("--config"));
}
