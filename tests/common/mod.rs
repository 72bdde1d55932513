//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod mqtt;

use std::path::{Path, PathBuf};

/// A scene from `../shared/scenes`, or None (with a message) when the directory is not there.
pub fn shared_scene(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/scenes")
        .join(name);
    if p.join("array.json").exists() {
        Some(p)
    } else {
        eprintln!(
            "skipped: {} is not present (the shared scenes live beside the checkout)",
            p.display()
        );
        None
    }
}

/// A fresh temporary directory for one test, removed when the test is done with it (kept,
/// with its path printed, when the test fails, for a look at what it wrote).
pub fn tmp_dir(name: &str) -> TmpDir {
    let d = std::env::temp_dir().join(format!("sonotrack-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temporary directory");
    TmpDir(d)
}

/// See [`tmp_dir`].
pub struct TmpDir(PathBuf);

impl std::ops::Deref for TmpDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TmpDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TmpDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for a look: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The `sonotrack` binary of this build.
pub fn sonotrack() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_sonotrack"))
}

/// A run that must have succeeded: its standard error otherwise.
pub fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sonotrack simulate` of the scene file text `spec` into `dir/scene` (16-bit with `s16`).
pub fn simulate(dir: &Path, spec: &str, s16: bool) -> PathBuf {
    std::fs::write(dir.join("spec.toml"), spec).expect("writing the scene file");
    let mut cmd = sonotrack();
    cmd.args(["-q", "simulate"]);
    if s16 {
        cmd.arg("--s16");
    }
    let out = cmd
        .arg("--spec")
        .arg(dir.join("spec.toml"))
        .arg("--out")
        .arg(dir.join("scene"))
        .output()
        .expect("running sonotrack");
    assert_ok(&out);
    dir.join("scene")
}

/// Every sample of a WAV file (interleaved), its channel count and its sample rate.
pub fn read_all(path: &Path) -> (Vec<f32>, usize, u32) {
    use sonotrack::audio::{AudioSource, ReadResult};
    let mut src = sonotrack::audio::wav::WavSource::open(path).expect("opening the WAV");
    let ch = src.channels();
    let mut buf = vec![0.0; ch * 4096];
    let mut out = Vec::new();
    while let ReadResult::Samples(n) = src.read(&mut buf).expect("reading the WAV") {
        out.extend_from_slice(&buf[..n * ch]);
    }
    (out, ch, src.sample_rate_hz())
}

/// The `[array]` table of a configuration for simulated scene `spec` (its sensors, speed of
/// sound and search volume), to compose a test's configuration from.
pub fn array_toml(spec: &sonotrack::audio::sim::SceneSpec) -> String {
    let sensors: Vec<String> = spec
        .sensors_m
        .iter()
        .map(|s| format!("[{}, {}, {}]", s[0], s[1], s[2]))
        .collect();
    format!(
        "[array]\nsensors_m = [{}]\nspeed_of_sound_m_s = {}\nbounds_min_m = {:?}\nbounds_max_m = {:?}\n",
        sensors.join(", "),
        spec.speed_of_sound_m_s,
        spec.bounds_min_m.expect("a scene with a search volume"),
        spec.bounds_max_m.expect("a scene with a search volume"),
    )
}
