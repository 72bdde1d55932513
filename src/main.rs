//! The `sonotrack` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use sonotrack::audio::sim::{PRESETS, SceneSpec, SimSource, write_scene};
use sonotrack::config::{BackendChoice, Config, TrackMode};
use sonotrack::error::{Error, Result};
use sonotrack::replay::{self, ReplayOptions};
use sonotrack::scene::Truth;

#[derive(Parser)]
#[command(
    name = "sonotrack",
    version,
    about = "Acoustic source tracking: GCC-PHAT TDOAs and a multi-model particle filter, on the GPU or the CPU"
)]
struct Cli {
    /// More log output (-v: debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Simulate a short scene in memory, track it, and print the track and its error against
    /// truth. Needs no files, GPU or audio hardware.
    Demo {
        /// Built-in scene to simulate.
        #[arg(long, default_value = "harbour")]
        preset: String,
        #[arg(long)]
        seed: Option<u64>,
        /// Seconds of audio to simulate.
        #[arg(long)]
        duration: Option<f64>,
        #[arg(long, value_enum, default_value = "auto")]
        backend: BackendArg,
        /// Write plots (tracks, error with the bound, GCC-PHAT heat map, model probabilities)
        /// into this directory.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// Run the live daemon: capture from the configured ALSA device, track, and send positions to
    /// the configured outputs until SIGTERM. Under systemd it reports readiness, status and a
    /// watchdog; SIGHUP re-reads the outputs.
    Run {
        #[arg(long)]
        config: PathBuf,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        #[arg(long, value_enum)]
        backend: Option<BackendArg>,
        /// Read this WAV file paced like a live device instead of capturing.
        #[arg(long)]
        input: Option<PathBuf>,
        /// Or simulate a built-in scene (harbour, tetra, room, two-boats) paced like a live
        /// device; the configuration's array must be the preset's.
        #[arg(long, conflicts_with = "input")]
        simulate: Option<String>,
        /// Pace factor for --input (1 = real time).
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Stop after this many seconds.
        #[arg(long)]
        seconds: Option<f64>,
    },
    /// List capture devices (ALSA names, channel counts, rates, formats) and serial ports.
    Devices,
    /// Map how well an array can locate a source (the Cramér–Rao bound over the search volume)
    /// and where its delays are ambiguous, before deploying it.
    Plan {
        config: PathBuf,
        /// Write the maps (PNG) and plan.json here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Per-channel SNR over the band (dB) when the source is --at metres from a sensor.
        #[arg(long, default_value_t = 10.0)]
        snr_db: f64,
        #[arg(long, default_value_t = 20.0)]
        at: f64,
        #[arg(long, value_enum, default_value = "white")]
        spectrum: sonotrack::plan::SourceSpectrum,
        /// Grid points along each axis.
        #[arg(long, default_value_t = 120)]
        resolution: usize,
        /// Depth (z, m) of the horizontal map (default: the middle of the search volume).
        #[arg(long, allow_hyphen_values = true)]
        depth: Option<f64>,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Score a position stream (JSON Lines from `replay --out` or a live sink) against truth:
    /// RMSE and percentiles per target, OSPA and ID switches, direction errors, and, given the
    /// recording, the ratio to the Cramér–Rao bound.
    Evaluate {
        /// The position stream.
        tracks: PathBuf,
        /// Ground truth (t,target,x,y,z with t the emission time). Default: the scene's.
        #[arg(long)]
        truth: Option<PathBuf>,
        /// Scene directory the stream came from (truth, audio and array for the bound).
        #[arg(long)]
        scene: Option<PathBuf>,
        /// Or: the recording and its configuration (for the bound).
        #[arg(long)]
        audio: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, default_value_t = 2.0)]
        warmup: f64,
        #[arg(long, default_value_t = 2.0)]
        threshold: f64,
        /// OSPA cut-off, metres.
        #[arg(long, default_value_t = 5.0)]
        ospa_c: f64,
        /// OSPA order.
        #[arg(long, default_value_t = 1.0)]
        ospa_p: f64,
        /// Also write the evaluation as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Replay a scene directory (audio*.wav + array.json [+ truth.csv]) or a WAV file with
    /// --config, and print a summary (with accuracy when truth is available).
    Replay {
        /// Scene directory or WAV file.
        input: PathBuf,
        /// Configuration (required for a WAV file; for a scene directory it replaces the
        /// defaults derived from array.json).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Write the position stream (JSON Lines) to this file ("-" for standard output).
        #[arg(long)]
        out: Option<String>,
        #[arg(long, value_enum)]
        backend: Option<BackendArg>,
        /// Override a configuration key, e.g. --set tracker.particles=65536 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Start at this time (seconds into the file).
        #[arg(long)]
        from: Option<f64>,
        /// Stop at this time (seconds into the file).
        #[arg(long)]
        to: Option<f64>,
        /// Pace the replay like live capture (optionally faster: --realtime 2).
        #[arg(long, num_args = 0..=1, default_missing_value = "1.0")]
        realtime: Option<f64>,
        /// No progress bar.
        #[arg(long)]
        no_progress: bool,
        /// Leave measured timings out of the output so runs can be diffed byte for byte.
        #[arg(long)]
        reproducible: bool,
        /// Accuracy ignores the first seconds (track start-up).
        #[arg(long, default_value_t = 2.0)]
        warmup: f64,
        /// Distance for the "% of time within" figure, metres.
        #[arg(long, default_value_t = 2.0)]
        threshold: f64,
        /// Also write the summary (counters, accuracy) as JSON.
        #[arg(long)]
        summary_json: Option<PathBuf>,
        /// Write plots (tracks, error with the bound, GCC-PHAT heat map, model probabilities)
        /// into this directory.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Skip the Cramér–Rao bound (a second pass over the audio when truth is present).
        #[arg(long)]
        no_bound: bool,
        /// OSPA cut-off (m) for scenes with several targets.
        #[arg(long, default_value_t = 5.0)]
        ospa_c: f64,
    },
    /// Write a simulated scene directory (audio, array.json, truth.csv) for planning or tests.
    Simulate {
        /// Output directory.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Built-in scene (harbour, tetra, room, two-boats).
        #[arg(long, default_value = "harbour")]
        preset: String,
        /// Scene file (TOML); see --print-preset for the format.
        #[arg(long)]
        spec: Option<PathBuf>,
        #[arg(long)]
        duration: Option<f64>,
        #[arg(long)]
        snr_db: Option<f64>,
        #[arg(long)]
        seed: Option<u64>,
        /// Write 16-bit PCM (audio_s16.wav) instead of 32-bit float (audio.wav).
        #[arg(long)]
        s16: bool,
        /// Print a preset as a scene file and exit.
        #[arg(long)]
        print_preset: Option<String>,
    },
    /// Time each stage (GCC-PHAT, particle-filter step) on synthetic input, for every backend
    /// that is available.
    Bench {
        /// Which stages: gcc, pf, live (one frame through GCC-PHAT and a small filter, as capture
        /// runs it, and the same frames replayed), all, or none (with --replay).
        #[arg(long, default_value = "all")]
        what: String,
        #[arg(long, value_enum, default_value = "auto")]
        backend: BackendArg,
        /// Smaller grids.
        #[arg(long)]
        quick: bool,
        /// Seconds per measured cell.
        #[arg(long, default_value_t = 0.5)]
        budget: f64,
        /// Also write the rows as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Also replay this scene directory end to end on each backend.
        #[arg(long)]
        replay: Option<PathBuf>,
        /// Particles for the end-to-end replay.
        #[arg(long, default_value_t = 262_144)]
        particles: usize,
        /// Only these channel counts in the GCC grid (e.g. 16 or 4,16).
        #[arg(long, value_delimiter = ',')]
        channels: Vec<usize>,
        /// Only these frame lengths in the GCC grid.
        #[arg(long, value_delimiter = ',')]
        frames: Vec<usize>,
        /// Only these particle counts in the filter grid (e.g. 1048576).
        #[arg(long, value_delimiter = ',')]
        pf_particles: Vec<usize>,
        /// Only these model counts in the filter grid.
        #[arg(long, value_delimiter = ',')]
        models: Vec<usize>,
        /// Sample rate of the live path's scene (48 kHz is the workload; 96 kHz, the
        /// `tetra` preset's own rate, searches twice the lags).
        #[arg(long, default_value_t = 48_000)]
        live_rate: u32,
    },
    /// Validate a configuration and explain what it will do.
    Check {
        config: PathBuf,
        /// Also check it against this WAV file (channels, sample rate).
        #[arg(long)]
        wav: Option<PathBuf>,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BackendArg {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = if cli.quiet {
        log::LevelFilter::Warn
    } else if cli.verbose > 0 {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Info
    };
    // Logging is best effort: a second logger (tests) is not an error.
    let _ = simple_logger::SimpleLogger::new().with_level(level).init();
    // Run the command on a rayon worker: its parallel stages (GCC pairs, filter chunks,
    // resampling blocks) then start on a thread of the pool instead of handing each stage to
    // the pool and sleeping until it comes back, which cost two thread wake-ups per stage
    // (about 13 % of the CPU replay time when it was measured; BENCHMARKS.md, "CPU processing
    // time").
    match rayon::scope(|_| run(cli.cmd)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                Error::Config(_) | Error::Usage(_) | Error::Scene { .. } | Error::Wav { .. } => {
                    ExitCode::from(2)
                }
                _ => ExitCode::from(1),
            }
        }
    }
}

fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Demo {
            preset,
            seed,
            duration,
            backend,
            plot,
        } => demo(&preset, seed, duration, backend.into(), plot),
        Cmd::Run {
            config,
            sets,
            backend,
            input,
            simulate,
            speed,
            seconds,
        } => {
            let summary = sonotrack::daemon::run(&sonotrack::daemon::RunOptions {
                config,
                sets,
                backend: backend.map(Into::into),
                input,
                simulate,
                speed,
                max_seconds: seconds,
            })?;
            eprint!("{summary}");
            Ok(())
        }
        Cmd::Devices => {
            devices();
            Ok(())
        }
        Cmd::Plan {
            config,
            out,
            snr_db,
            at,
            spectrum,
            resolution,
            depth,
            sets,
        } => {
            let cfg = Config::load(&config)?.with_overrides(&sets)?;
            let opts = sonotrack::plan::PlanOptions {
                snr_db,
                at_m: at,
                spectrum,
                resolution: resolution.clamp(8, 1000),
                z_m: depth,
                out,
                ..Default::default()
            };
            let t = std::time::Instant::now();
            let report = sonotrack::plan::plan(&cfg, &opts)?;
            print!("{report}");
            println!("({:.1} s)", t.elapsed().as_secs_f64());
            Ok(())
        }
        Cmd::Evaluate {
            tracks,
            truth,
            scene,
            audio,
            config,
            warmup,
            threshold,
            ospa_c,
            ospa_p,
            json,
        } => evaluate_cmd(EvaluateArgs {
            tracks,
            truth,
            scene,
            audio,
            config,
            warmup,
            threshold,
            ospa_c,
            ospa_p,
            json,
        }),
        Cmd::Replay {
            input,
            config,
            out,
            backend,
            sets,
            from,
            to,
            realtime,
            no_progress,
            reproducible,
            warmup,
            threshold,
            summary_json,
            plot,
            no_bound,
            ospa_c,
        } => {
            let (cfg, wav, truth) = replay::resolve(&input, config.as_deref())?;
            let cfg = cfg.with_overrides(&sets)?;
            let opts = ReplayOptions {
                backend: backend.map(Into::into).unwrap_or(cfg.tracker.backend),
                out,
                from_s: from,
                to_s: to,
                pace: realtime,
                progress: !no_progress,
                reproducible,
                want_curves: false,
                warmup_s: warmup,
                threshold_m: threshold,
                plot,
                bound: !no_bound,
                ospa_c_m: ospa_c,
                ospa_p: 1.0,
            };
            let summary = replay::replay_file(&cfg, &wav, truth.as_ref(), &opts)?;
            eprint!("{summary}");
            if let Some(path) = summary_json {
                let json = serde_json::json!({
                    "input": summary.input,
                    "backend": summary.backend,
                    "audio_s": summary.audio_s,
                    "processing_s": summary.counters.proc_total.as_secs_f64(),
                    "checks_s": summary.counters.check_total.as_secs_f64(),
                    "gcc_s": summary.counters.gcc_total.as_secs_f64(),
                    // Checks and correlation not hidden behind the tracking (all of them unless
                    // "overlapped").
                    "prep_exposed_s": summary.counters.prep_exposed.as_secs_f64(),
                    "overlapped": summary.counters.overlapped,
                    "filter_s": summary.filter_wall.as_secs_f64(),
                    "frames_in": summary.counters.frames_in,
                    "frames_processed": summary.counters.frames_processed,
                    "frames_dropped": summary.counters.frames_dropped(),
                    "births": summary.births,
                    "accuracy": summary.accuracy,
                    "evaluation": summary.evaluation,
                    "plots": summary.plots,
                });
                std::fs::write(
                    &path,
                    serde_json::to_string_pretty(&json).unwrap_or_default(),
                )
                .map_err(|e| Error::Io { path, source: e })?;
            }
            Ok(())
        }
        Cmd::Simulate {
            out,
            preset,
            spec,
            duration,
            snr_db,
            seed,
            s16,
            print_preset,
        } => {
            if let Some(name) = print_preset {
                let s = SceneSpec::preset(&name).ok_or_else(|| unknown_preset(&name))?;
                print!("{}", toml::to_string_pretty(&s).unwrap_or_default());
                return Ok(());
            }
            let Some(out) = out else {
                return Err(Error::Usage(
                    "simulate needs --out DIR (or --print-preset NAME)".into(),
                ));
            };
            let mut s = match spec {
                Some(p) => SceneSpec::load(&p)?,
                None => SceneSpec::preset(&preset).ok_or_else(|| unknown_preset(&preset))?,
            };
            if let Some(d) = duration {
                s.duration_s = d;
            }
            if let Some(x) = snr_db {
                s.snr_db = x;
            }
            if let Some(x) = seed {
                s.seed = x;
            }
            let start = std::time::Instant::now();
            write_scene(&out, &s, s16)?;
            // A track slot per source (the configuration's default is one).
            let slots = match s.sources.len() {
                0 | 1 => String::new(),
                n => format!(" --set tracker.max_tracks={n}"),
            };
            eprintln!(
                "wrote {} ({} s, {} sensors, {} source(s), SNR {} dB) in {:.1} s; replay it with: sonotrack replay {}{slots}",
                out.display(),
                s.duration_s,
                s.sensors_m.len(),
                s.sources.len(),
                s.snr_db,
                start.elapsed().as_secs_f64(),
                out.display()
            );
            Ok(())
        }
        Cmd::Bench {
            what,
            backend,
            quick,
            budget,
            json,
            replay,
            particles,
            channels,
            frames,
            pf_particles,
            models,
            live_rate,
        } => {
            let opts = sonotrack::bench::BenchOptions {
                backend: backend.into(),
                gcc: what == "all" || what == "gcc",
                pf: what == "all" || what == "pf",
                live: what == "all" || what == "live",
                quick,
                budget_s: budget,
                replay,
                replay_particles: particles,
                channels,
                frames,
                pf_particles,
                models,
                live_rate_hz: live_rate,
            };
            if !opts.gcc && !opts.pf && !opts.live && what != "none" {
                return Err(Error::Usage(format!(
                    "--what {what}: use gcc, pf, live, all or none (with --replay)"
                )));
            }
            let mut rows = sonotrack::bench::run(&opts)?;
            sonotrack::bench::print(&rows);
            // The CUDA figures projected to the Jetson boards (printed, and in the JSON).
            if rows.iter().any(|r| r.backend == "cuda") {
                if let Ok(spec) = sonotrack::gpu::device_spec() {
                    let boards = sonotrack::project::jetson_boards();
                    let projected = sonotrack::project::project(&rows, &spec, &boards);
                    sonotrack::project::print(&rows, &projected, &spec, &boards);
                    rows.extend(projected);
                }
            }
            if let Some(path) = json {
                std::fs::write(
                    &path,
                    serde_json::to_string_pretty(&rows).unwrap_or_default(),
                )
                .map_err(|e| Error::Io { path, source: e })?;
            }
            Ok(())
        }
        Cmd::Check { config, wav, sets } => {
            let cfg = Config::load(&config)?.with_overrides(&sets)?;
            if let Some(w) = wav {
                let src = sonotrack::audio::wav::WavSource::open(&w)?;
                use sonotrack::audio::AudioSource;
                cfg.check_input(
                    &w.display().to_string(),
                    src.channels(),
                    src.sample_rate_hz(),
                )?;
                println!(
                    "{}: {} channels at {} Hz, {:.1} s: matches",
                    w.display(),
                    src.channels(),
                    src.sample_rate_hz(),
                    src.total_frames().unwrap_or(0) as f64 / f64::from(src.sample_rate_hz())
                );
            }
            print!("{}: OK\n{}", config.display(), cfg.explain());
            Ok(())
        }
    }
}

fn unknown_preset(name: &str) -> Error {
    Error::Usage(format!(
        "no preset `{name}`; presets: {}",
        PRESETS.join(", ")
    ))
}

fn devices() {
    #[cfg(feature = "capture")]
    {
        let devs = sonotrack::audio::capture::list_devices();
        println!("capture devices (ALSA names for audio.device):");
        if devs.is_empty() {
            println!("  none found");
        }
        for (name, desc) in devs {
            println!("  {name:<32} {desc}");
            for line in sonotrack::audio::capture::describe_device(&name) {
                println!("  {:<32}   {line}", "");
            }
        }
    }
    #[cfg(not(feature = "capture"))]
    println!("capture devices: this build has no live capture (build with --features capture)");
    println!("serial ports (for output.sink port):");
    match serialport::available_ports() {
        Ok(ports) if !ports.is_empty() => {
            for p in ports {
                println!("  {:<32} {:?}", p.port_name, p.port_type);
            }
        }
        Ok(_) => println!("  none found"),
        Err(e) => println!("  cannot list: {e}"),
    }
}

struct EvaluateArgs {
    tracks: PathBuf,
    truth: Option<PathBuf>,
    scene: Option<PathBuf>,
    audio: Option<PathBuf>,
    config: Option<PathBuf>,
    warmup: f64,
    threshold: f64,
    ospa_c: f64,
    ospa_p: f64,
    json: Option<PathBuf>,
}

fn evaluate_cmd(a: EvaluateArgs) -> Result<()> {
    let frames = sonotrack::evaluate::read_stream(&a.tracks)?;
    // Where the truth, the configuration and the audio come from.
    let (mut cfg, wav, scene_truth) = match (&a.scene, &a.audio) {
        (Some(dir), _) => {
            let (c, w, t) = replay::resolve(dir, a.config.as_deref())?;
            (Some(c), Some(w), t)
        }
        (None, Some(w)) => {
            let Some(c) = &a.config else {
                return Err(Error::Usage(
                    "--audio needs --config (the array and frame settings the stream used)".into(),
                ));
            };
            (Some(Config::load(c)?), Some(w.clone()), None)
        }
        (None, None) => (
            a.config.as_deref().map(Config::load).transpose()?,
            None,
            None,
        ),
    };
    let truth = match (&a.truth, scene_truth) {
        (Some(p), _) => Truth::load(p)?,
        (None, Some(t)) => t,
        (None, None) => {
            return Err(Error::Usage(
                "no truth: give --truth truth.csv or --scene DIR holding truth.csv".into(),
            ));
        }
    };
    if frames.is_empty() {
        return Err(Error::Usage(format!(
            "{}: no track messages to evaluate",
            a.tracks.display()
        )));
    }
    // The stream says what it holds: a stream of directions (written with `--set
    // array.mode=direction`, say) is scored as directions whatever the scene's array.json says,
    // and 3-D positions as positions.
    let holds_directions =
        sonotrack::evaluate::stream_holds_directions(&frames).map_err(|problem| Error::Scene {
            path: a.tracks.clone(),
            problem,
            fix: "give one run's stream".into(),
        })?;
    if let (Some(c), Some(directions)) = (cfg.as_mut(), holds_directions) {
        let mode = if directions {
            TrackMode::Direction
        } else {
            TrackMode::ThreeD
        };
        if c.array.mode != mode {
            let name = |m: TrackMode| match m {
                TrackMode::Direction => "directions",
                TrackMode::ThreeD => "3-D positions",
            };
            println!(
                "note: {} holds {}, where the configuration tracks {}: scored as {}",
                a.tracks.display(),
                name(mode),
                name(c.array.mode),
                name(mode)
            );
            c.array.mode = mode;
            c.validate(&a.tracks.display().to_string())?;
        }
    }
    let ropts = ReplayOptions {
        warmup_s: a.warmup,
        threshold_m: a.threshold,
        ospa_c_m: a.ospa_c,
        ospa_p: a.ospa_p,
        ..ReplayOptions::default()
    };
    let (eopts, bounds) = match &cfg {
        Some(c) => {
            let bounds = match &wav {
                Some(w) => {
                    let mut src = sonotrack::audio::wav::WavSource::open(w)?;
                    let k = truth.targets.keys().next().copied().unwrap_or(0);
                    Some(sonotrack::bound::frame_bounds(c, &mut src, 0, &truth, k)?)
                }
                None => None,
            };
            (replay::eval_options(c, &truth, &ropts), bounds)
        }
        None => {
            let direction_only = holds_directions == Some(true);
            if direction_only {
                println!(
                    "note: {} holds directions; without the array (--scene, or --config) they are scored from the origin, and against the truth at the report's own time",
                    a.tracks.display()
                );
            }
            (
                sonotrack::evaluate::EvalOptions {
                    warmup_s: a.warmup,
                    threshold_m: a.threshold,
                    ospa_c_m: a.ospa_c,
                    ospa_p: a.ospa_p,
                    direction_only,
                    ..Default::default()
                },
                None,
            )
        }
    };
    let e = sonotrack::evaluate::evaluate(&frames, &truth, bounds.as_deref(), &eopts);
    println!("{e}");
    if bounds.is_none() {
        println!("  (give --scene DIR, or --audio WAV --config C, for the Cramér–Rao bound)");
    }
    if let Some(path) = a.json {
        std::fs::write(&path, serde_json::to_string_pretty(&e).unwrap_or_default())
            .map_err(|e| Error::Io { path, source: e })?;
    }
    Ok(())
}

fn demo(
    preset: &str,
    seed: Option<u64>,
    duration: Option<f64>,
    backend: BackendChoice,
    plot: Option<PathBuf>,
) -> Result<()> {
    let mut spec = SceneSpec::preset(preset).ok_or_else(|| unknown_preset(preset))?;
    if let Some(s) = seed {
        spec.seed = s;
    }
    if let Some(d) = duration {
        spec.duration_s = d;
    }
    let cfg = spec.config();
    cfg.validate("demo")?;
    println!(
        "demo: {} ({} s at {} Hz, SNR {} dB); simulating and tracking in memory...",
        spec.description, spec.duration_s, spec.sample_rate_hz, spec.snr_db
    );
    let mut sim = SimSource::new(spec.clone())?;
    let mut csv = String::new();
    for (t, id, p) in sim.truth() {
        csv.push_str(&format!("{t},{id},{},{},{}\n", p[0], p[1], p[2]));
    }
    let truth =
        Truth::parse(&csv).map_err(|(l, e)| Error::Usage(format!("truth line {l}: {e}")))?;
    let opts = ReplayOptions {
        backend,
        warmup_s: 2.0,
        threshold_m: 1.0,
        plot,
        ..ReplayOptions::default()
    };
    let mut summary = replay::replay_source(&cfg, &mut sim, 0, Some(&truth), &opts)?;
    // The bound needs the audio again: the simulation is deterministic, so simulate it anew.
    let mut again = SimSource::new(spec.clone())?;
    replay::finish(
        &mut summary,
        &cfg,
        Some((&mut again as &mut dyn sonotrack::audio::AudioSource, 0)),
        Some(&truth),
        &opts,
    )?;
    println!(
        "{:>7} {:>26} {:>26} {:>8}",
        "t (s)", "track x, y, z (m)", "truth x, y, z (m)", "err (m)"
    );
    let mut next = 0.0;
    for f in &summary.frames {
        let t_frame = &f.t_frame;
        if *t_frame < next {
            continue;
        }
        next = t_frame.floor() + 1.0;
        match f.reports.first().map(|r| (&r.t, &r.pos)) {
            Some((t, p)) => {
                let q = truth.at(0, *t).unwrap_or([f64::NAN; 3]);
                let e =
                    ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt();
                println!(
                    "{t:>7.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {e:>8.3}",
                    p[0], p[1], p[2], q[0], q[1], q[2]
                );
            }
            None => println!("{t_frame:>7.2} {:>26} {:>26}", "(no track yet)", ""),
        }
    }
    print!("{summary}");
    Ok(())
}
