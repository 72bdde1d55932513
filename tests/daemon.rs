//! The daemon as systemd and an integrator meet it: readiness, status and watchdog over
//! $NOTIFY_SOCKET, positions over UDP that match the truth, SIGHUP swapping the outputs without
//! a restart, SIGTERM draining and exiting 0 within 2 s, and (with the `capture` feature) real
//! ALSA capture through cpal from a file-backed ALSA device.

mod common;

use std::net::UdpSocket;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sonotrack::analysis::truth::Truth;
use sonotrack::audio::sim::{SceneSpec, write_scene};

fn sonotrack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sonotrack"))
}

/// A simulated harbour scene and a configuration for it with `outputs` (TOML).
fn scene_and_config(dir: &Path, seconds: f64, audio: &str, outputs: &str) -> (PathBuf, Truth) {
    let mut spec = SceneSpec::preset("harbour").unwrap();
    spec.duration_s = seconds;
    let scene = dir.join("scene");
    write_scene(&scene, &spec, false).unwrap();
    let truth = Truth::load(&scene.join("truth.csv")).unwrap();
    let cfg = format!(
        "{}\n[audio]\nsample_rate_hz = {}\n{audio}\n\n[tracker]\nbackend = \"cpu\"\n\n[output]\nstatus_interval_s = 0.5\n{outputs}\n",
        common::array_toml(&spec),
        spec.sample_rate_hz,
    );
    let path = dir.join("run.toml");
    std::fs::write(&path, cfg).unwrap();
    (path, truth)
}

fn udp_sink(port: u16) -> String {
    format!("[[output.sink]]\nkind = \"udp\"\naddress = \"127.0.0.1:{port}\"\n")
}

/// Errors of received track messages against the truth at their emission time, after `after` s.
fn errors(datagrams: &[String], truth: &Truth, after: f64) -> Vec<f64> {
    datagrams
        .iter()
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter(|v| v["type"] == "track")
        .filter_map(|v| {
            let t = v["t"].as_f64()?;
            if t < after {
                return None;
            }
            let p: Vec<f64> = v["pos"]
                .as_array()?
                .iter()
                .filter_map(|x| x.as_f64())
                .collect();
            let q = truth.at(0, t)?;
            Some(((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt())
        })
        .collect()
}

fn receive(rx: &UdpSocket, until: Instant, child: &mut Child) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    rx.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    while Instant::now() < until {
        if let Ok(n) = rx.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        } else if child.try_wait().unwrap().is_some() {
            // Drain what is left, then stop.
            while let Ok(n) = rx.recv(&mut buf) {
                out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            break;
        }
    }
    out
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: sending a signal to our own child process by pid.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

#[test]
fn notify_udp_sighup_and_sigterm() {
    let dir = common::tmp_dir("daemon");
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = rx.local_addr().unwrap().port();
    let (cfg, truth) = scene_and_config(&dir, 8.0, "", &udp_sink(port));
    let notify_path = dir.join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    // Read notifications as they come, as systemd does (its queue holds only a few).
    let notes = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (notes, done) = (notes.clone(), done.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(n) = notify.recv(&mut buf) {
                    let mut g = notes.lock().unwrap();
                    g.push_str(&String::from_utf8_lossy(&buf[..n]));
                    g.push('\n');
                }
            }
        })
    };
    let mut child = sonotrack()
        .args(["run", "--config"])
        .arg(&cfg)
        .arg("--input")
        .arg(dir.join("scene/audio.wav"))
        .args(["--speed", "2"])
        .env("NOTIFY_SOCKET", &notify_path)
        .env("WATCHDOG_USEC", "400000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Positions for 2.5 s of wall time (5 s of audio at twice real time).
    let first = receive(
        &rx,
        Instant::now() + Duration::from_millis(2500),
        &mut child,
    );
    // SIGHUP: the outputs are re-read; the same UDP output plus a JSON Lines file now.
    let jsonl = dir.join("after-hup.jsonl");
    let text = std::fs::read_to_string(&cfg).unwrap()
        + &format!(
            "[[output.sink]]\nkind = \"jsonl\"\npath = \"{}\"\n",
            jsonl.display()
        );
    std::fs::write(&cfg, text).unwrap();
    signal(&child, libc::SIGHUP);
    let second = receive(&rx, Instant::now() + Duration::from_millis(800), &mut child);
    // SIGTERM: drain and exit 0 within 2 s.
    let t = Instant::now();
    signal(&child, libc::SIGTERM);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "no exit within 2 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = {
        use std::io::Read;
        let mut s = String::new();
        child.stderr.take().unwrap().read_to_string(&mut s).unwrap();
        s
    };
    assert!(status.success(), "exit {status:?}\n{stderr}");
    assert!(stderr.contains("1 reloads"), "{stderr}");
    // Notifications: ready, status, watchdog pings, stopping.
    std::thread::sleep(Duration::from_millis(100));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().unwrap();
    let notes = notes.lock().unwrap().clone();
    for want in ["READY=1", "STATUS=frames", "WATCHDOG=1", "STOPPING=1"] {
        assert!(notes.contains(want), "no {want} in {notes}");
    }
    // Positions agree with the truth once the track has settled, before and after SIGHUP.
    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    let e = errors(&all, &truth, 2.0);
    assert!(e.len() > 20, "{} positions", e.len());
    let mut s = e.clone();
    s.sort_by(f64::total_cmp);
    assert!(s[s.len() / 2] < 0.05, "median error {}", s[s.len() / 2]);
    assert!(
        !errors(&second, &truth, 0.0).is_empty(),
        "no positions after SIGHUP"
    );
    let after = std::fs::read_to_string(&jsonl).unwrap_or_default();
    assert!(
        after.contains("\"type\":\"track\""),
        "the reloaded outputs got nothing"
    );
    // Every frame is accounted for in the last status.
    let last = first
        .iter()
        .chain(&second)
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .rfind(|v| v["type"] == "status")
        .unwrap();
    assert_eq!(
        last["frames_in"].as_u64().unwrap(),
        last["frames_processed"].as_u64().unwrap() + last["frames_dropped"].as_u64().unwrap()
    );
}

/// Real capture through cpal and ALSA, with no sound card: an asoundrc defines a capture PCM
/// whose samples come from a raw file (the `file` plugin's `infile` over the `null` device).
/// The `null` device is not paced (it delivers as fast as it is read), so the ring is sized to
/// hold the whole file and the rest (silence) overflows, counted as capture gaps.
#[cfg(feature = "capture")]
#[test]
fn alsa_file_device_to_udp_positions() {
    let dir = common::tmp_dir("alsa");
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = rx.local_addr().unwrap().port();
    let audio = "device = \"sonotrack_test\"\nsample_format = \"i16\"\nperiod_frames = 1024\nring_seconds = 30.0";
    let (cfg, truth) = scene_and_config(&dir, 8.0, audio, &udp_sink(port));
    // The scene as raw interleaved 16-bit samples.
    let mut src = sonotrack::audio::wav::WavSource::open(&dir.join("scene/audio.wav")).unwrap();
    let mut raw = Vec::new();
    let mut buf = vec![0.0f32; 4096 * 5];
    use sonotrack::audio::{AudioSource, ReadResult};
    while let ReadResult::Samples(n) = src.read(&mut buf).unwrap() {
        for v in &buf[..n * 5] {
            raw.extend_from_slice(&((v.clamp(-1.0, 1.0) * 32767.0) as i16).to_le_bytes());
        }
    }
    let raw_path = dir.join("capture.raw");
    std::fs::write(&raw_path, &raw).unwrap();
    std::fs::write(
        dir.join(".asoundrc"),
        format!(
            "pcm.sonotrack_test {{\n  type file\n  slave.pcm \"null\"\n  file \"/dev/null\"\n  infile \"{}\"\n  format \"raw\"\n  hint {{ show on description \"sonotrack test capture\" }}\n}}\n",
            raw_path.display()
        ),
    )
    .unwrap();
    let mut child = sonotrack()
        .args(["run", "--config"])
        .arg(&cfg)
        .args(["--seconds", "4"])
        .env("HOME", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let got = receive(&rx, Instant::now() + Duration::from_secs(20), &mut child);
    let status = child.wait().unwrap();
    let stderr = {
        use std::io::Read;
        let mut s = String::new();
        child.stderr.take().unwrap().read_to_string(&mut s).unwrap();
        s
    };
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("capturing from sonotrack_test"), "{stderr}");
    let e = errors(&got, &truth, 2.0);
    assert!(e.len() > 50, "{} positions\n{stderr}", e.len());
    let mut s = e.clone();
    s.sort_by(f64::total_cmp);
    assert!(s[s.len() / 2] < 0.05, "median error {}", s[s.len() / 2]);
}
