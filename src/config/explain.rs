//! `sonotrack check`'s explanation of what a configuration will do.

use super::Config;
use crate::output::SinkConfig;
use crate::output::serial::reports_per_s;
use crate::track::TrackMode;

/// IMM filter cost per track and step, seconds (three models, five sensors and 10 pairs × 4
/// peaks on one x86 core: `sonotrack bench --what kf`, the `imm-filter` row, 19-21 µs on
/// dev-cpu; BENCHMARKS.md "Particle filter or IMM").
pub const CPU_S_PER_IMM_TRACK_STEP: f64 = 20e-6;
/// CPU filter cost per particle and step, seconds (one x86 core, `sonotrack bench --backend cpu`
/// on the development machine, BENCHMARKS.md "CPU processing time").
const CPU_S_PER_PARTICLE_STEP: f64 = 22e-9;

/// Fixed-lag smoothing cost per track, frame and second of lag, seconds (`pier_five`,
/// BENCHMARKS.md "Smoothing").
const LAG_S_PER_TRACK_FRAME_SECOND: f64 = 0.33e-3;

impl Config {
    /// A human explanation of what this configuration will do (for `sonotrack check`), with
    /// the particles' memory and CPU cost.
    pub fn explain(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let geo = self.geometry();
        let fs = self.sample_rate_hz();
        let c = self.array.speed_of_sound_m_s;
        if let Some(b) = &self.board {
            let _ = writeln!(
                s,
                "board: {} (GPU {}, JetPack {})",
                b.name,
                if b.gpu_arch.is_empty() {
                    "none"
                } else {
                    &b.gpu_arch
                },
                b.jetpack
            );
        }
        let spread = geo.spread_m();
        let _ = writeln!(
            s,
            "array: {} sensors, aperture {:.3} m, spread {:.3}/{:.3}/{:.3} m ({:?}), c = {c} m/s, mode {}",
            geo.len(),
            geo.aperture_m(),
            spread[0],
            spread[1],
            spread[2],
            geo.span(),
            match self.array.mode {
                TrackMode::ThreeD => "3-D position",
                TrackMode::Direction => "direction only",
                TrackMode::Line => "line: angle to the axis, range where near",
            }
        );
        if let (Some(lo), Some(hi)) = (self.array.bounds_min_m, self.array.bounds_max_m) {
            let _ = writeln!(s, "search volume: {lo:?} .. {hi:?} m");
        }
        if let Some((axis, side)) = self.line_axes() {
            let v = |u: nalgebra::Vector3<f64>| format!("[{:.3}, {:.3}, {:.3}]", u.x, u.y, u.z);
            let _ = match self.array.plane_normal {
                Some(_) if self.turning() => writeln!(
                    s,
                    "turning line array along {}: it measures the angle to its axis; with the sources in the plane given (array.plane_normal) each track keeps a mirror twin across the axis until the array's turn (array.heading_input) shows which side fits, and bearings are reported in the world frame by the heading",
                    v(axis),
                ),
                Some(_) => writeln!(
                    s,
                    "line array along {}: it measures the angle to its axis (a cone of directions); with the sources in the plane given (array.plane_normal) positions are reported on the side {} with the mirror point across the axis, ambiguous unless the search volume excludes it",
                    v(axis),
                    v(side)
                ),
                None => writeln!(
                    s,
                    "line array along {}: it measures the angle to its axis (a cone of directions; the turn about the axis is unobservable): directions are reported in the half-plane towards {} (set array.plane_normal for positions in a known plane)",
                    v(axis),
                    v(side)
                ),
            };
        }
        if self.array.mode.angular() {
            let (r, curvature, noise) = self.direction_curvature();
            let _ = if self.direction_inv_range_max() > 0.0 {
                writeln!(
                    s,
                    "directions allow for the wavefront's curvature: a new track's ranges start from {r:.2} m out (array.min_range_m), where the curvature ({:.1} mm) exceeds the TDOA noise floor ({:.1} mm)",
                    curvature * 1e3,
                    noise * 1e3
                )
            } else {
                writeln!(
                    s,
                    "directions assume plane waves: the curvature at {r:.2} m (array.min_range_m) is {:.2} mm, below the TDOA noise floor ({:.1} mm)",
                    curvature * 1e3,
                    noise * 1e3
                )
            };
        }
        let _ = writeln!(
            s,
            "audio: {} Hz, {} input channels, sensor i <- channel {:?}",
            self.audio.sample_rate_hz,
            self.input_channels(),
            self.channel_map()
        );
        let frame = self.frame_samples();
        let hop = self.hop_samples();
        let band = self.band_hz();
        let pairs = self.pairs();
        let _ = writeln!(
            s,
            "gcc: frame {frame} samples ({:.1} ms), hop {hop} ({:.1} ms, {:.1} frames/s), {:?} window, {:?} beta {} band {:.0}-{:.0} Hz, {} pairs ({:?}), {} peaks each",
            frame as f64 / fs * 1e3,
            hop as f64 / fs * 1e3,
            fs / hop as f64,
            self.gcc.window,
            self.gcc.weighting,
            self.gcc.beta,
            band[0],
            band[1],
            pairs.len(),
            self.gcc.pairs,
            self.gcc.peaks_per_pair
        );
        let _ = writeln!(
            s,
            "  one sample of TDOA = {:.4} m of range difference; largest pair lag {:.1} samples",
            c / fs,
            pairs.iter().map(|p| p.max_tdoa_s).fold(0.0, f64::max) * fs
        );
        let _ = if self.gcc.crosstalk_window_s > 0.0 {
            let judged = pairs
                .iter()
                .filter(|p| p.max_tdoa_s * fs >= crate::dsp::crosstalk::MIN_JUDGED_LAG_SAMPLES)
                .count();
            writeln!(
                s,
                "  crosstalk check over {} s: {judged} of {} pairs long enough to judge alone (largest lag {} samples or more); the shorter ones are flagged only with their device's",
                self.gcc.crosstalk_window_s,
                pairs.len(),
                crate::dsp::crosstalk::MIN_JUDGED_LAG_SAMPLES
            )
        } else {
            writeln!(s, "  crosstalk check off (gcc.crosstalk_window_s = 0)")
        };
        let t = &self.tracker;
        let names: Vec<_> = t
            .models
            .iter()
            .map(|m| format!("{}({:?})", m.name, m.kind))
            .collect();
        if t.filter == super::FilterKind::Imm {
            let share = t.max_tracks as f64 * CPU_S_PER_IMM_TRACK_STEP / (hop as f64 / fs);
            let _ = writeln!(
                s,
                "tracker: IMM filter (one cubature Kalman filter per model, data association over each pair's peaks; on the CPU whatever the backend), models {}, TDOA std {} samples, Pd {}, max speed {} m/s\n  a full set of {} tracks costs about {:.1} % of real time (at {:.0} us per track and step)",
                names.join(", "),
                t.tdoa_std_samples,
                t.detection_probability,
                t.max_speed_m_s,
                t.max_tracks,
                share * 100.0,
                CPU_S_PER_IMM_TRACK_STEP * 1e6
            );
        } else {
            let _ = writeln!(
                s,
                "tracker: backend {:?}, {} particles, models {} ({:?} selection), TDOA std {} samples, Pd {}, max speed {} m/s, seed {}",
                t.backend,
                t.particles,
                names.join(", "),
                t.model_selection,
                t.tdoa_std_samples,
                t.detection_probability,
                t.max_speed_m_s,
                t.seed
            );
            let bytes = self.particle_memory_bytes();
            let steps_s = t.particles as f64 * t.max_tracks as f64 * CPU_S_PER_PARTICLE_STEP;
            let share = steps_s / (hop as f64 / fs);
            let _ = writeln!(
                s,
                "  particles hold {:.1} MiB ({} x {} track slots); on the CPU backend a full set of tracks costs about {:.0} % of real time (at {:.0} ns per particle and step; `sonotrack bench` measures this machine){}",
                bytes as f64 / (1u64 << 20) as f64,
                t.particles,
                t.max_tracks,
                share * 100.0,
                CPU_S_PER_PARTICLE_STEP * 1e9,
                if share > 1.0 {
                    ": too slow for live audio on the CPU, use fewer particles or the GPU"
                } else {
                    ""
                }
            );
        }
        if t.association == super::Association::Mfa {
            let _ = writeln!(
                s,
                "  association: multi-frame assignment over {} lists (each pair's peaks given to the tracks with the next {} frames in view); reports run {} frame(s), {:.0} ms, behind the newest frame",
                t.mfa_lists,
                t.mfa_lists - 2,
                t.mfa_lists - 2,
                (t.mfa_lists - 2) as f64 * hop as f64 / fs * 1e3
            );
        }
        if let Some(frames) = self.lag_frames() {
            let per_frame =
                self.smoothing.lag_s * LAG_S_PER_TRACK_FRAME_SECOND * t.max_tracks as f64;
            let _ = writeln!(
                s,
                "smoothing: each track's state again {:.2} s later ({frames} frames), smoothed; with {} tracks about {:.0} % of real time on a desktop core",
                self.smoothing.lag_s,
                t.max_tracks,
                100.0 * per_frame / (hop as f64 / fs)
            );
        }
        match self.tracker.measurement {
            super::Measurement::Peaks => {}
            m => {
                let c = &self.tracker.curves;
                let _ = writeln!(
                    s,
                    "measurement: {} (GCC-PHAT curves: {} particles a track{}, confirmed at existence {} and deleted below {}){}",
                    if m == super::Measurement::Auto {
                        "auto, the peaks start tracks and the curves carry them when their peaks fade"
                    } else {
                        "curves, track-before-detect alone (experimental)"
                    },
                    c.particles,
                    if m == super::Measurement::Curves {
                        format!(", {} births a frame", c.birth_particles)
                    } else {
                        String::new()
                    },
                    c.confirm,
                    c.delete,
                    if !self.curves_usable() {
                        ": not used here, the curves need 3-D tracking and a search volume"
                    } else {
                        ""
                    }
                );
            }
        }
        if self.output.sinks.is_empty() {
            let _ = writeln!(s, "outputs: none configured");
        }
        for sink in &self.output.sinks {
            let _ = writeln!(s, "output: {}", sink.name());
            if let Some(line) = self.serial_capacity(sink) {
                let _ = writeln!(s, "  {line}");
            }
        }
        s
    }

    /// What a serial output's line carries against what the configuration asks of it (None for
    /// other outputs).
    fn serial_capacity(&self, sink: &SinkConfig) -> Option<String> {
        let SinkConfig::Serial { baud, format, .. } = sink else {
            return None;
        };
        let capacity = reports_per_s(*baud, *format, sink.nmea_sentences());
        let frame_rate = self.sample_rate_hz() / self.hop_samples() as f64;
        let tracks = self.tracker.max_tracks.max(1) as f64;
        let share = capacity / tracks;
        Some(match sink.max_rate_hz() {
            Some(r) if r.min(frame_rate) * tracks > capacity => format!(
                "{baud} baud carries {capacity:.1} reports/s; max_rate_hz = {r} x {tracks} tracks asks more: the line drops (and counts) what does not fit; set max_rate_hz <= {share:.2} or raise the baud rate"
            ),
            Some(r) => format!(
                "{baud} baud carries {capacity:.1} reports/s; max_rate_hz = {r} per track x {tracks} tracks fits"
            ),
            None if frame_rate * tracks > capacity => format!(
                "{baud} baud carries {capacity:.1} reports/s: each track is sent at most {share:.2} times a second (its share among {tracks} track slots; set max_rate_hz to choose)"
            ),
            None => format!(
                "{baud} baud carries {capacity:.1} reports/s: every frame's reports fit ({frame_rate:.1} Hz x {tracks} tracks)"
            ),
        })
    }
}
