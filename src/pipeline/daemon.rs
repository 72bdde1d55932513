//! `sonotrack run`: the live daemon. Capture → frames → tracker → outputs, until SIGTERM.
//!
//! systemd (`Type=notify`): READY=1 once the pipeline runs (backend chosen, GPU kernels compiled
//! or loaded from the cache, capture started); a STATUS= line with frames, drops and backend
//! every status interval; WATCHDOG=1 only while frames actually flow, so a stalled capture gets
//! the service restarted; STOPPING=1 on the way out. SIGTERM (or SIGINT) drains what is already
//! captured and exits 0 within 2 s; SIGHUP re-reads the output section of the configuration and
//! swaps the outputs without touching capture (the old outputs finish on a background thread).

use sd_notify::NotifyState;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::audio::assembler::FrameAssembler;
use crate::audio::wav::WavSource;
use crate::audio::{AudioSource, ReadResult};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::gpu::BackendChoice;
use crate::output::SinkSet;
use crate::pipeline::backend;
use crate::pipeline::{Pipeline, PipelineOptions};

/// How to run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub config: PathBuf,
    pub sets: Vec<String>,
    pub backend: Option<BackendChoice>,
    /// Read this WAV file, paced like a live device, instead of capturing (soak tests, demos).
    pub input: Option<PathBuf>,
    /// Or simulate this built-in scene, paced like a live device, for as long as the daemon
    /// runs (the configuration's array must be the preset's).
    pub simulate: Option<String>,
    /// Pace factor for `input` (1 = real time).
    pub speed: f64,
    /// Stop after this many seconds of wall time.
    pub max_seconds: Option<f64>,
}

/// What a run did (printed at exit, and returned to tests).
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub frames_in: u64,
    pub frames_processed: u64,
    pub frames_dropped: u64,
    pub dropped: std::collections::BTreeMap<String, u64>,
    pub sink_drops: std::collections::BTreeMap<String, u64>,
    pub latency_ms: Vec<(String, Option<f64>, Option<f64>)>,
    /// Processing time per frame: median and 99th percentile, milliseconds.
    pub processing_ms: (Option<f64>, Option<f64>),
    pub reloads: u64,
    pub seconds: f64,
}

/// Service-manager notifications (the `sd-notify` crate; nothing when not run by systemd).
/// Notifications are datagrams the manager reads at once; one that fails is logged at debug
/// level and never retried or waited for.
pub struct Notifier {
    /// Ping interval: half what systemd expects (`WatchdogSec`), None without a watchdog.
    pub watchdog: Option<Duration>,
}

impl Notifier {
    pub fn from_env() -> Self {
        Self {
            watchdog: sd_notify::watchdog_enabled().map(|d| d / 2),
        }
    }

    pub fn notify(&self, states: &[sd_notify::NotifyState]) {
        if let Err(e) = sd_notify::notify(states) {
            log::debug!("sd_notify: {e}");
        }
    }
}

/// The configuration must describe the simulated preset's array (the same sensors, in the same
/// order, sample rate and speed of sound): a tracker told another array gives positions metres
/// off without any other sign.
fn check_preset_array(
    cfg: &Config,
    spec: &crate::audio::sim::SceneSpec,
    preset: &str,
) -> Result<()> {
    let (told, c) = spec.told_array();
    let ours = &cfg.array.sensors_m;
    let off = ours
        .iter()
        .zip(&told)
        .map(|(a, b)| (0..3).map(|k| (a[k] - b[k]).abs()).fold(0.0, f64::max))
        .fold(0.0, f64::max);
    let same = ours.len() == told.len()
        && off <= 0.01
        && cfg.audio.sample_rate_hz == spec.sample_rate_hz
        && (cfg.array.speed_of_sound_m_s - c).abs() <= 0.01 * c;
    if same {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "the configuration's array ({} sensors, {} Hz, c = {} m/s) is not the `{preset}` preset's ({} sensors {:?}, {} Hz, c = {c} m/s){}: tracking it would give wrong positions; use boards/examples/sim-{preset}.toml (or copy its [array] and sample rate)",
        ours.len(),
        cfg.audio.sample_rate_hz,
        cfg.array.speed_of_sound_m_s,
        told.len(),
        told,
        spec.sample_rate_hz,
        if ours.len() == told.len() {
            format!(", sensors up to {off:.2} m apart")
        } else {
            String::new()
        }
    )))
}

/// Longest simulated scene the daemon generates before starting the next.
const SIM_SCENE_S: f64 = 3600.0;

/// A simulated scene played again and again (each time with the next seed), so that
/// `run --simulate` runs for as long as the daemon does.
struct Endless {
    spec: crate::audio::sim::SceneSpec,
    /// The scene playing (None only while the next is made).
    sim: Option<crate::audio::sim::SimSource>,
    rate: u32,
    channels: usize,
    rounds: u64,
}

impl Endless {
    fn new(spec: crate::audio::sim::SceneSpec) -> Result<Self> {
        let sim = crate::audio::sim::SimSource::new(spec.clone())?;
        Ok(Self {
            rate: sim.sample_rate_hz(),
            channels: sim.channels(),
            spec,
            sim: Some(sim),
            rounds: 0,
        })
    }
}

impl AudioSource for Endless {
    fn describe(&self) -> String {
        format!("simulated scene `{}`", self.spec.description)
    }
    fn sample_rate_hz(&self) -> u32 {
        self.rate
    }
    fn channels(&self) -> usize {
        self.channels
    }
    fn total_frames(&self) -> Option<u64> {
        None
    }
    fn read(&mut self, out: &mut [f32]) -> Result<ReadResult> {
        let Some(sim) = self.sim.as_mut() else {
            return Ok(ReadResult::End);
        };
        match sim.read(out)? {
            ReadResult::End => {
                self.rounds += 1;
                let mut spec = self.spec.clone();
                spec.seed = spec.seed.wrapping_add(self.rounds);
                // The finished scene's buffers go before the next one's are made, so that the
                // next reuses their memory (built first, both would be held at once and the
                // resident memory would step up at the first change).
                let (fs, ch) = (self.rate, self.channels);
                self.sim = None;
                let sim = self.sim.insert(crate::audio::sim::SimSource::new(spec)?);
                debug_assert_eq!((sim.sample_rate_hz(), sim.channels()), (fs, ch));
                log::info!("simulation: scene {} begins", self.rounds + 1);
                sim.read(out)
            }
            r => Ok(r),
        }
    }
}

/// A file or a simulation read at the pace of a live device.
struct Paced {
    src: Box<dyn AudioSource>,
    start: Instant,
    read: u64,
    speed: f64,
}

impl AudioSource for Paced {
    fn describe(&self) -> String {
        format!("{} (paced)", self.src.describe())
    }
    fn sample_rate_hz(&self) -> u32 {
        self.src.sample_rate_hz()
    }
    fn channels(&self) -> usize {
        self.src.channels()
    }
    fn total_frames(&self) -> Option<u64> {
        self.src.total_frames()
    }
    fn read(&mut self, out: &mut [f32]) -> Result<ReadResult> {
        let due = Duration::from_secs_f64(
            self.read as f64 / f64::from(self.sample_rate_hz()) / self.speed.max(1e-6),
        );
        if self.start.elapsed() < due {
            return Ok(ReadResult::Idle);
        }
        // One period (~10 ms) at a time, like a device.
        let ch = self.channels();
        let period = (self.sample_rate_hz() as usize / 100).max(1);
        let n = (period * ch).min(out.len());
        let r = self.src.read(&mut out[..n])?;
        if let ReadResult::Samples(f) = r {
            self.read += f as u64;
        }
        Ok(r)
    }
    fn is_live(&self) -> bool {
        true
    }
}

fn open_source(cfg: &Config, o: &RunOptions) -> Result<Box<dyn AudioSource>> {
    let paced: Option<Box<dyn AudioSource>> = match (&o.input, &o.simulate) {
        (Some(path), _) => Some(Box::new(WavSource::open(path)?)),
        (None, Some(preset)) => {
            let mut spec = crate::audio::sim::SceneSpec::preset(preset).ok_or_else(|| {
                Error::Usage(format!(
                    "no preset `{preset}` (harbour, tetra, room, two-boats)"
                ))
            })?;
            check_preset_array(cfg, &spec, preset)?;
            // Scenes of at most an hour, one after another for as long as the daemon runs
            // (generated on the fly, constant memory).
            let wanted = o.max_seconds.unwrap_or(f64::INFINITY) * o.speed.max(1.0) + 10.0;
            spec.duration_s = wanted.min(SIM_SCENE_S);
            Some(Box::new(Endless::new(spec)?))
        }
        (None, None) => None,
    };
    if let Some(src) = paced {
        return Ok(Box::new(Paced {
            src,
            start: Instant::now(),
            read: 0,
            speed: if o.speed > 0.0 { o.speed } else { 1.0 },
        }));
    }
    Ok(Box::new(crate::audio::capture::CaptureSource::open(
        &cfg.capture_settings(),
    )?))
}

/// Reload the output section of the configuration (SIGHUP).
fn reload_outputs(o: &RunOptions, pipe: &mut Pipeline) -> Result<()> {
    let cfg = Config::load(&o.config)?.with_overrides(&o.sets)?;
    let mut fresh = SinkSet::open(
        &cfg.output.sinks,
        &cfg.output.nmea,
        cfg.tracker.max_tracks,
        false,
    )?;
    fresh.carry_counts_from(&pipe.sinks);
    let old = std::mem::replace(&mut pipe.sinks, fresh);
    // Old outputs finish (and may block on a slow device) away from the pipeline.
    std::thread::spawn(move || {
        old.flush(Duration::from_millis(500));
        drop(old);
    });
    log::info!(
        "SIGHUP: outputs reloaded from {} ({} outputs)",
        o.config.display(),
        cfg.output.sinks.len()
    );
    Ok(())
}

/// Run the daemon until SIGTERM/SIGINT (or `max_seconds`, or the end of `input`).
pub fn run(o: &RunOptions) -> Result<RunSummary> {
    let (stop, hup) = install_signals()?;
    let cfg = Config::load(&o.config)?.with_overrides(&o.sets)?;
    let notifier = Notifier::from_env();
    let mut live = Live::start(&cfg, o)?;
    let started = Instant::now();
    let what = format!("{} on {}", live.src.describe(), live.pipe.backend());
    let status = format!("running: {what}");
    notifier.notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
    log::info!(
        "running: {} on the {} backend",
        live.src.describe(),
        live.pipe.backend()
    );
    let mut beat = Heartbeat::new(notifier, cfg.output.status_interval_s);
    let mut reloads = 0u64;
    let mut failure: Option<Error> = None;
    loop {
        if stop.load(Ordering::Relaxed) {
            log::info!("stopping: draining what was captured");
            break;
        }
        if o.max_seconds
            .is_some_and(|m| started.elapsed().as_secs_f64() >= m)
        {
            break;
        }
        if hup.swap(false, Ordering::Relaxed) {
            match reload_outputs(o, &mut live.pipe) {
                Ok(()) => reloads += 1,
                Err(e) => log::error!("SIGHUP: keeping the old outputs: {e}"),
            }
        }
        match live.turn() {
            Ok(true) => beat.tick(&live.pipe),
            Ok(false) => break,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    beat.notifier.notify(&[NotifyState::Stopping]);
    if failure.is_none() {
        live.drain(Duration::from_secs(1));
    }
    let mut pipe = live.pipe;
    // The fixed-lag estimates of the frames not yet given out, from the data there is.
    pipe.finish_smoothing();
    pipe.emit_status(started.elapsed().as_secs_f64());
    pipe.sinks.flush(Duration::from_millis(500));
    let summary = summary_of(&pipe, reloads, started.elapsed().as_secs_f64());
    // Outputs that are stuck (a serial port mid-write) must not hold the exit.
    let sinks = std::mem::take(&mut pipe.sinks);
    std::thread::spawn(move || drop(sinks));
    match failure {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

/// Flags raised by SIGTERM or SIGINT (stop) and SIGHUP (reload the outputs).
fn install_signals() -> Result<(Arc<AtomicBool>, Arc<AtomicBool>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    let handler_error =
        |e: std::io::Error| Error::Usage(format!("cannot install a signal handler: {e}"));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).map_err(handler_error)?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone()).map_err(handler_error)?;
    Ok((stop, hup))
}

/// The live loop's state: the pipeline, its source and the frames being assembled.
struct Live {
    pipe: Pipeline,
    src: Box<dyn AudioSource>,
    asm: FrameAssembler,
    buf: Vec<f32>,
}

/// A turning array's headings for a live run: NMEA sentences over UDP
/// (`array.heading_input.udp_listen`), else the heading file's rows by the stream's time.
fn live_heading(cfg: &Config) -> Result<Option<crate::audio::heading::HeadingFeed>> {
    use crate::audio::heading::{HeadingFeed, HeadingListener, HeadingTable};
    let Some(h) = &cfg.array.heading_input else {
        return Ok(None);
    };
    Ok(Some(match (&h.udp_listen, &h.file) {
        (Some(addr), _) => HeadingFeed::Live(HeadingListener::start(addr, h.stale_s)?),
        (None, Some(file)) => HeadingFeed::Table(HeadingTable::load(file)?),
        (None, None) => return Ok(None),
    }))
}

impl Live {
    /// Choose the backend, open the outputs and the source, and check the source against the
    /// configuration.
    fn start(cfg: &Config, o: &RunOptions) -> Result<Self> {
        let choice = o.backend.unwrap_or(cfg.tracker.backend);
        let backends = backend::select(cfg, choice)?;
        log::info!("{}", backends.reason);
        let sinks = SinkSet::open(
            &cfg.output.sinks,
            &cfg.output.nmea,
            cfg.tracker.max_tracks,
            false,
        )?;
        let mut pipe = Pipeline::new(
            cfg,
            backends,
            sinks,
            PipelineOptions {
                live: true,
                ..Default::default()
            },
        );
        if let Some(feed) = live_heading(cfg)? {
            pipe.set_heading_feed(feed);
        }
        let src = open_source(cfg, o)?;
        cfg.check_input(&src.describe(), src.channels(), src.sample_rate_hz())
            .map_err(Error::Config)?;
        let mut asm = cfg.frame_assembler(0);
        // Frames in memory the GPU reads where it lies, where the backend has it: a live frame
        // then goes to the device without a copy.
        asm.set_allocator(pipe.frame_allocator());
        let buf = vec![0.0f32; src.channels() * 4096];
        Ok(Self {
            pipe,
            src,
            asm,
            buf,
        })
    }

    /// One read from the source and every frame it completes; false at the source's end.
    fn turn(&mut self) -> Result<bool> {
        let ch = self.src.channels();
        match self.src.read(&mut self.buf)? {
            ReadResult::Samples(n) => self.asm.push(&self.buf[..n * ch]),
            ReadResult::Gap(lost) => {
                let frames = self.asm.gap(lost);
                log::warn!("capture lost {lost} sample frames; {frames} frame(s) dropped");
                self.pipe.counters.drop_frames("capture_gap", frames);
            }
            ReadResult::Idle => std::thread::sleep(Duration::from_millis(1)),
            ReadResult::End => return Ok(false),
        }
        while let Some(mut f) = self.asm.pop() {
            self.pipe.frame_ready = Some(Instant::now());
            let done = self.pipe.process(&mut f).map(|_| ());
            self.asm.recycle(f);
            done?;
        }
        // Between frames: the filter's resampling left by the last step is launched, and what
        // the frames being filled hold so far goes to the GPU, so that a frame's correlation
        // reads only its last samples over the bus.
        self.pipe.between_frames();
        self.asm.send_ahead();
        Ok(true)
    }

    /// Process the frames already captured, for at most `limit`.
    fn drain(&mut self, limit: Duration) {
        let ch = self.src.channels();
        let until = Instant::now() + limit;
        while Instant::now() < until {
            match self.src.read(&mut self.buf) {
                Ok(ReadResult::Samples(n)) => self.asm.push(&self.buf[..n * ch]),
                _ => break,
            }
            while let Some(mut f) = self.asm.pop() {
                self.pipe.frame_ready = Some(Instant::now());
                let _ = self.pipe.process(&mut f);
                self.asm.recycle(f);
            }
        }
    }
}

/// systemd's STATUS= line every status interval, and its watchdog pinged only while frames
/// flow.
struct Heartbeat {
    notifier: Notifier,
    interval: Duration,
    next_status: Instant,
    next_ping: Instant,
    frames_at_ping: u64,
}

impl Heartbeat {
    fn new(notifier: Notifier, status_interval_s: f64) -> Self {
        let interval = Duration::from_secs_f64(status_interval_s.max(0.1));
        Self {
            notifier,
            interval,
            next_status: Instant::now() + interval,
            next_ping: Instant::now(),
            frames_at_ping: 0,
        }
    }

    fn tick(&mut self, pipe: &Pipeline) {
        let now = Instant::now();
        if now >= self.next_status {
            let c = &pipe.counters;
            let status = format!(
                "frames {} in, {} processed, {} dropped; {} tracks; backend {}",
                c.frames_in,
                c.frames_processed,
                c.frames_dropped(),
                pipe.tracker().active_tracks(),
                pipe.backend()
            );
            self.notifier.notify(&[NotifyState::Status(&status)]);
            self.next_status = now + self.interval;
        }
        if let Some(w) = self.notifier.watchdog {
            // Ping only while frames flow: a stalled capture stops the pings and systemd
            // restarts the service.
            if now >= self.next_ping && pipe.counters.frames_in > self.frames_at_ping {
                self.notifier.notify(&[NotifyState::Watchdog]);
                self.frames_at_ping = pipe.counters.frames_in;
                self.next_ping = now + w;
            }
        }
    }
}

/// What the run did, from the pipeline's counters and its outputs' statistics.
fn summary_of(pipe: &Pipeline, reloads: u64, seconds: f64) -> RunSummary {
    let c = &pipe.counters;
    RunSummary {
        frames_in: c.frames_in,
        frames_processed: c.frames_processed,
        frames_dropped: c.frames_dropped(),
        dropped: c.dropped.clone(),
        sink_drops: pipe.sinks.drops(),
        latency_ms: pipe
            .sinks
            .runners
            .iter()
            .map(|r| {
                (
                    r.name.clone(),
                    r.stats.latency.quantile_ms(0.5),
                    r.stats.latency.quantile_ms(0.99),
                )
            })
            .collect(),
        processing_ms: (
            pipe.proc_time.quantile_ms(0.5),
            pipe.proc_time.quantile_ms(0.99),
        ),
        reloads,
        seconds,
    }
}

impl std::fmt::Display for RunSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "ran {:.1} s: {} frames in, {} processed, {} dropped {:?}; output drops {:?}; {} reloads",
            self.seconds,
            self.frames_in,
            self.frames_processed,
            self.frames_dropped,
            self.dropped,
            self.sink_drops,
            self.reloads
        )?;
        if let (Some(a), Some(b)) = self.processing_ms {
            writeln!(f, "processing per frame: median {a:.2} ms, p99 {b:.2} ms")?;
        }
        for (name, p50, p99) in &self.latency_ms {
            if let (Some(a), Some(b)) = (p50, p99) {
                writeln!(
                    f,
                    "latency frame complete -> sent, {name}: median {a:.2} ms, p99 {b:.2} ms"
                )?;
            }
        }
        Ok(())
    }
}
