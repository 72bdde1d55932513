//! The `sonotrack` command line: one file per command, each with its arguments and the function
//! that runs it.

mod bench;
mod check;
mod demo;
mod devices;
mod evaluate;
mod fuse;
mod plan;
mod replay;
mod run;
mod simulate;
mod trial;
mod values;

use clap::{Parser, Subcommand};

use sonotrack::audio::sim::PRESETS;
use sonotrack::error::{Error, Result};
use sonotrack::gpu::BackendChoice;
use sonotrack::track::report::EstimateKind;

/// The version line, saying whether this build has live capture (`scripts/make-deb.sh` refuses
/// to package a board binary without it).
#[cfg(feature = "capture")]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (live capture: yes)");
#[cfg(not(feature = "capture"))]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (live capture: no)");

#[derive(Parser)]
#[command(
    name = "sonotrack",
    version = VERSION,
    about = "Acoustic source tracking: GCC-PHAT TDOAs and a multi-model particle filter, on the GPU or the CPU"
)]
pub struct Cli {
    /// More log output (-v: debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Simulate a short scene in memory, track it, and print the track and its error against
    /// truth. Needs no files, GPU or audio hardware.
    Demo(demo::Args),
    /// Run the live daemon: capture from the configured ALSA device, track, and send positions to
    /// the configured outputs until SIGTERM. Under systemd it reports readiness, status and a
    /// watchdog; SIGHUP re-reads the outputs.
    Run(run::Args),
    /// List capture devices (ALSA names, channel counts, rates, formats) and serial ports.
    Devices,
    /// Map how well an array can locate a source (the Cramér–Rao bound over the search volume)
    /// and where its delays are ambiguous, before deploying it.
    Plan(plan::Args),
    /// Score a position stream (JSON Lines from `replay --out` or a live sink) against truth:
    /// RMSE and percentiles per target, OSPA and ID switches, direction errors, and, given the
    /// recording, the ratio to the Cramér–Rao bound.
    Evaluate(evaluate::Args),
    /// Replay a scene directory (audio*.wav + array.json [+ truth.csv]) or a WAV file with
    /// --config, and print a summary (with accuracy when truth is available).
    Replay(replay::Args),
    /// Write a simulated scene directory (audio, array.json, truth.csv) for planning or tests.
    Simulate(simulate::Args),
    /// Time each stage (GCC-PHAT, particle-filter step) on synthetic input, for every backend
    /// that is available.
    Bench(bench::Args),
    /// Validate a configuration and explain what it will do.
    Check(check::Args),
    /// Draw random scenes of a family (arrays, paths, signals, SNR, rooms, faults), track each
    /// in memory and score it: accuracy, OSPA, ID switches, time to the first track, false
    /// tracks, consistency, per scene and over the family.
    Trial(trial::Args),
    /// Fuse the tracks of several arrays (nodes publishing to an MQTT broker) into one
    /// georeferenced picture, and publish it like a node.
    Fuse(fuse::Args),
}

/// `--backend`: which compute backend.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum BackendArg {
    Auto,
    Cpu,
    Cuda,
}

impl From<BackendArg> for BackendChoice {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Auto => BackendChoice::Auto,
            BackendArg::Cpu => BackendChoice::Cpu,
            BackendArg::Cuda => BackendChoice::Cuda,
        }
    }
}

/// `--estimate`: which estimate of the tracks to score.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EstimateArg {
    Filtered,
    Smoothed,
    Lagged,
}

impl From<EstimateArg> for EstimateKind {
    fn from(e: EstimateArg) -> Self {
        match e {
            EstimateArg::Filtered => EstimateKind::Filtered,
            EstimateArg::Smoothed => EstimateKind::Smoothed,
            EstimateArg::Lagged => EstimateKind::Lagged,
        }
    }
}

impl EstimateArg {
    /// What messages carry this estimate.
    pub fn messages(self) -> &'static str {
        match self {
            EstimateArg::Filtered => "track messages",
            EstimateArg::Smoothed => "smoothed messages (`\"estimate\": \"smoothed\"`)",
            EstimateArg::Lagged => "lagged messages (`\"estimate\": \"lagged\"`)",
        }
    }

    /// How to get a stream with them (empty for the filtered ones).
    pub fn how_to_get(self) -> &'static str {
        match self {
            EstimateArg::Filtered => "",
            EstimateArg::Smoothed => {
                "; write the stream with `sonotrack replay --smooth --out FILE`"
            }
            EstimateArg::Lagged => {
                "; write the stream with `--set smoothing.lag_s=SECONDS` (replay or run)"
            }
        }
    }
}

/// Run one command.
/// `-q`: only warnings and errors, and no summary (a command still writes what it was asked for:
/// files, `--out -`, `--json`, a printed scene file).
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_quiet(q: bool) {
    QUIET.store(q, std::sync::atomic::Ordering::Relaxed);
}

/// Whether summaries are to be left out (`-q`).
pub(crate) fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn dispatch(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Demo(a) => demo::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Devices => {
            devices::run();
            Ok(())
        }
        Cmd::Plan(a) => plan::run(a),
        Cmd::Evaluate(a) => evaluate::run(a),
        Cmd::Replay(a) => replay::run(a),
        Cmd::Simulate(a) => simulate::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Check(a) => check::run(a),
        Cmd::Trial(a) => trial::run(a),
        Cmd::Fuse(a) => fuse::run(a),
    }
}

/// The error for a preset name that does not exist.
fn unknown_preset(name: &str) -> Error {
    Error::Usage(format!(
        "no preset `{name}`; presets: {}",
        PRESETS.join(", ")
    ))
}

/// Write `value` as pretty JSON to `path`.
fn write_json(path: &std::path::Path, value: &impl serde::Serialize) -> Result<()> {
    std::fs::write(
        path,
        serde_json::to_string_pretty(value).unwrap_or_default(),
    )
    .map_err(|e| Error::Io {
        path: path.into(),
        source: e,
    })
}

#[cfg(test)]
mod fuzz_options {
    //! The options target of the fuzz harness (`tests/fuzz.rs` has the parsers'): mutated
    //! command lines from `fuzz/corpus/options/` are parsed, and the `--set` overrides applied
    //! to a configuration; every case returns (an error is fine) and none panics.

    use super::{Cli, Cmd};
    use clap::Parser;
    use sonotrack::testing::fuzz::run_cases;

    fn sets(cmd: &Cmd) -> &[String] {
        match cmd {
            Cmd::Replay(a) => &a.sets,
            Cmd::Run(a) => &a.sets,
            Cmd::Check(a) => &a.sets,
            Cmd::Plan(a) => &a.sets,
            Cmd::Trial(a) => &a.sets,
            _ => &[],
        }
    }

    #[test]
    fn fuzz_command_line_options() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/options");
        let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        seeds.sort();
        let base = sonotrack::bench::workload::harbour_config();
        let cases = std::env::var("FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3000);
        let rep = run_cases(&seeds, true, cases, 11, |d| {
            let line = String::from_utf8_lossy(d);
            let Ok(cli) = Cli::try_parse_from(line.split_whitespace()) else {
                return false;
            };
            base.with_overrides(sets(&cli.cmd)).is_ok()
        });
        eprintln!(
            "fuzz options: {} cases, {} accepted, {} panics, slowest {:.1} ms",
            rep.cases,
            rep.accepted,
            rep.panics.len(),
            rep.slowest.as_secs_f64() * 1e3
        );
        let crashes: Vec<String> = rep
            .panics
            .iter()
            .map(|(m, d)| format!("{m}: {}", String::from_utf8_lossy(d)))
            .collect();
        assert!(crashes.is_empty(), "{}", crashes.join("\n"));
        assert!(rep.accepted > 0);
    }
}

#[cfg(test)]
mod help_tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument and option of every command says what it is (field-ready issue).
    #[test]
    fn every_option_has_help() {
        let cli = Cli::command();
        let mut missing = Vec::new();
        for sub in cli.get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{} {id}", sub.get_name()));
                }
            }
        }
        assert!(missing.is_empty(), "options without help: {missing:?}");
    }
}
