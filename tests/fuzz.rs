//! The fuzz harness: one target per parser (WAV header and data, array.json, configuration with
//! includes, truth.csv, the JSON Lines stream, simulate specs, MQTT payloads), each fed structured mutations of
//! the seeds in `fuzz/corpus/<target>/` (the engine is `sonotrack::testing::fuzz`; the command
//! line's options are a target in the binary's own tests).
//!
//! Each case must return (an error is fine, a panic is not), within a watchdog's 30 s, and
//! allocate no more than the caps below: a larger request aborts the run with the case printed.
//! CI runs 300 cases per target; `FUZZ_CASES` or `FUZZ_CASES_<TARGET>` (e.g.
//! `FUZZ_CASES_SIMULATE`) set more. The recorded ten-million-case run and its command are in
//! BENCHMARKS.md, "Reliability".

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sonotrack::analysis::score::{EvalOptions, evaluate};
use sonotrack::analysis::stream::parse_stream;
use sonotrack::analysis::truth::Truth;
use sonotrack::audio::sim::{SceneSpec, SimSource};
use sonotrack::audio::wav::WavSource;
use sonotrack::audio::{AudioSource, ReadResult};
use sonotrack::config::Config;
use sonotrack::pipeline::scene::config_from_array_json;
use sonotrack::testing::fuzz::{FuzzReport, run_cases};

/// Largest single allocation a case may ask for.
const ONE_ALLOCATION_CAP: usize = 256 << 20;
/// Most memory outstanding at once, over the whole test process.
const OUTSTANDING_CAP: usize = 1 << 30;

/// Counts outstanding bytes and refuses requests above the caps (the process then aborts with
/// the case that asked, printed by [`refuse`]).
struct Capped;

static OUTSTANDING: AtomicUsize = AtomicUsize::new(0);
/// The case now running (for the abort messages).
static CURRENT: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// Targets run one at a time, so that the case printed is the one that failed.
static SERIAL: Mutex<()> = Mutex::new(());

fn refuse(size: usize) {
    let mut err = std::io::stderr();
    let _ = err.write_all(b"\nfuzz: allocation cap exceeded by a request of ");
    let mut digits = [0u8; 20];
    let mut n = size;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let _ = err.write_all(&digits[i..]);
    let _ = err.write_all(b" bytes; the case:\n");
    if let Ok(c) = CURRENT.try_lock() {
        let _ = err.write_all(&c);
    }
    let _ = err.write_all(b"\n");
}

// SAFETY: every call is forwarded to the system allocator unchanged; a refused request returns
// null, which the caller treats as an allocation failure.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let size = layout.size();
        if size > ONE_ALLOCATION_CAP
            || OUTSTANDING.load(Ordering::Relaxed).saturating_add(size) > OUTSTANDING_CAP
        {
            refuse(size);
            return std::ptr::null_mut();
        }
        // SAFETY: the layout is the caller's, passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            OUTSTANDING.fetch_add(size, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        OUTSTANDING.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ONE_ALLOCATION_CAP
            || OUTSTANDING
                .load(Ordering::Relaxed)
                .saturating_add(new_size.saturating_sub(layout.size()))
                > OUTSTANDING_CAP
        {
            refuse(new_size);
            return std::ptr::null_mut();
        }
        // SAFETY: as for `alloc`; `ptr` and `layout` are the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            OUTSTANDING.fetch_add(new_size, Ordering::Relaxed);
            OUTSTANDING.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Capped = Capped;

/// Cases for target `name`: `FUZZ_CASES_<NAME>`, else `FUZZ_CASES`, else 300.
fn cases(name: &str) -> u64 {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse().ok());
    var(&format!("FUZZ_CASES_{}", name.to_uppercase()))
        .or_else(|| var("FUZZ_CASES"))
        .unwrap_or(300)
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let s: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!s.is_empty(), "no seeds in {}", dir.display());
    s
}

/// Aborts the process, printing the case, when one case runs past 30 s (a hang).
struct Watchdog {
    started: std::sync::Arc<AtomicU64>,
}

impl Watchdog {
    fn start() -> Self {
        let started = std::sync::Arc::new(AtomicU64::new(0));
        let s = started.clone();
        let origin = Instant::now();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let at = s.load(Ordering::Relaxed);
                if at > 0 && origin.elapsed().as_millis() as u64 > at + 30_000 {
                    let mut err = std::io::stderr();
                    let _ = err.write_all(b"\nfuzz: a case ran past 30 s; the case:\n");
                    if let Ok(c) = CURRENT.try_lock() {
                        let _ = err.write_all(&c);
                    }
                    std::process::abort();
                }
            }
        });
        Self { started }
    }
}

/// Run a target over the seeds of `name` and check its report.
fn fuzz(name: &str, text: bool, target: impl FnMut(&[u8]) -> bool) {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let seeds = seeds(name);
    let dog = Watchdog::start();
    let origin = Instant::now();
    let mut target = target;
    let rep: FuzzReport = run_cases(&seeds, text, cases(name), 7, |case| {
        if let Ok(mut c) = CURRENT.lock() {
            c.clear();
            c.extend_from_slice(case);
        }
        dog.started
            .store(origin.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
        let r = target(case);
        dog.started.store(0, Ordering::Relaxed);
        r
    });
    eprintln!(
        "fuzz {name}: {} cases, {} accepted, {} panics, slowest {:.1} ms, {:.1} s",
        rep.cases,
        rep.accepted,
        rep.panics.len(),
        rep.slowest.as_secs_f64() * 1e3,
        origin.elapsed().as_secs_f64()
    );
    if rep.slowest > Duration::from_secs(1) {
        eprintln!(
            "fuzz {name}: the slowest case:\n{}",
            String::from_utf8_lossy(&rep.slowest_case)
        );
    }
    let crashes: Vec<String> = rep
        .panics
        .iter()
        .map(|(m, d)| format!("{m}\n--- input:\n{}", String::from_utf8_lossy(d)))
        .collect();
    assert!(
        crashes.is_empty(),
        "{name}: panics:\n{}",
        crashes.join("\n\n")
    );
    // Every seed is a valid input: a target that accepts nothing is not being exercised.
    assert!(rep.accepted > 0, "{name}: no case was accepted");
}

#[test]
fn fuzz_wav() {
    let dir = common::tmp_dir("fuzz-wav");
    let path = dir.join("case.wav");
    let mut buf = vec![0.0f32; 64 * 1024];
    fuzz("wav", false, |d| {
        std::fs::write(&path, d).unwrap();
        let Ok(mut src) = WavSource::open(&path) else {
            return false;
        };
        let ch = src.channels().max(1);
        let want = (buf.len() / ch) * ch;
        for _ in 0..8 {
            match src.read(&mut buf[..want]) {
                Ok(ReadResult::Samples(_)) => {}
                _ => break,
            }
        }
        true
    });
}

#[test]
fn fuzz_array_json() {
    fuzz("array_json", true, |d| {
        config_from_array_json(&String::from_utf8_lossy(d), Path::new("array.json")).is_ok()
    });
}

#[test]
fn fuzz_config_with_includes() {
    // The boards tree, so that the seeds' includes (`../orin-nx.toml`,
    // `../arrays/room-distributed.toml`) resolve from `examples/main.toml`.
    let dir = common::tmp_dir("fuzz-config");
    let boards = Path::new(env!("CARGO_MANIFEST_DIR")).join("boards");
    std::fs::create_dir_all(dir.join("examples")).unwrap();
    std::fs::create_dir_all(dir.join("arrays")).unwrap();
    for sub in ["", "arrays"] {
        for e in std::fs::read_dir(boards.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                std::fs::copy(&p, dir.join(sub).join(p.file_name().unwrap())).unwrap();
            }
        }
    }
    let main = dir.join("examples/main.toml");
    fuzz("config", true, |d| {
        std::fs::write(&main, d).unwrap();
        match Config::load(&main) {
            Ok(c) => {
                let _ = c.explain();
                let _ = c.filter_params();
                true
            }
            Err(_) => false,
        }
    });
}

#[test]
fn fuzz_truth() {
    fuzz("truth", true, |d| {
        match Truth::parse(&String::from_utf8_lossy(d)) {
            Ok(t) => {
                let _ = t.span();
                let _ = t.at(0, 0.25);
                true
            }
            Err(_) => false,
        }
    });
}

#[test]
fn fuzz_stream() {
    let truth =
        Truth::parse("t,target,x,y,z\n0,0,1,1,1\n10,0,2,2,2\n0,1,0,0,0\n10,1,5,0,0\n").unwrap();
    let opts = EvalOptions {
        warmup_s: 0.0,
        ..EvalOptions::default()
    };
    fuzz("stream", true, |d| {
        match parse_stream(&String::from_utf8_lossy(d)) {
            Ok(frames) => {
                let _ = evaluate(&frames, &truth, None, &opts);
                true
            }
            Err(_) => false,
        }
    });
}

/// What a fusion service reads from a broker: track messages, deletions and node states, each
/// payload tried as all three, into the fuser.
#[test]
fn fuzz_mqtt_payload() {
    use sonotrack::fusion::engine::{FuseParams, Fuser};
    use sonotrack::fusion::report::{Payload, parse};
    use sonotrack::math::geo::Origin;
    use sonotrack::output::mqtt::NodeState;
    let origin = Origin {
        latitude_deg: 53.5,
        longitude_deg: 9.9,
        depth_m: 0.0,
        heading_deg: 0.0,
    };
    let mut fuser = Fuser::new(FuseParams::default());
    let mut now = 0.0;
    fuzz("mqtt_payload", true, |d| {
        let state = serde_json::from_slice::<NodeState>(d).is_ok();
        let used = match parse("node", d, &origin) {
            Payload::Track(t) => {
                now = t.t;
                fuser.report(*t);
                true
            }
            Payload::Deleted(id) => {
                fuser.ended("node", id);
                true
            }
            Payload::Ignored(_) => false,
        };
        let _ = fuser.step(now);
        used || state
    });
}

#[test]
fn fuzz_simulate_spec() {
    let mut buf = vec![0.0f32; 16 * 1024];
    fuzz("simulate", true, |d| {
        let Ok(mut spec) = toml::from_str::<SceneSpec>(&String::from_utf8_lossy(d)) else {
            return false;
        };
        if spec.validate().is_err() {
            return false;
        }
        // Build and run the accepted ones briefly (a tenth of a second).
        spec.duration_s = spec.duration_s.min(0.1);
        if let Ok(mut sim) = SimSource::new(spec) {
            let ch = sim.channels().max(1);
            let want = (buf.len() / ch).min(4096) * ch;
            let _ = sim.read(&mut buf[..want]);
        }
        true
    });
}
