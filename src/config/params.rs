//! Each stage's parameters, as the configuration sets them: the correlator's, the filter bank's,
//! the track manager's, the frame assembler's and the capture device's.

use super::Config;
use crate::audio::assembler::FrameAssembler;
use crate::audio::capture::CaptureSettings;
use crate::dsp::gcc::GccParams;
use crate::dsp::geometry::Pair;
use crate::track::logic::judge::LogicSettings;
use crate::track::manager::ManagerSettings;
use crate::track::measure::peaks::PeaksSettings;
use crate::track::{FilterParams, LineAxes, MotionModel, TrackMode};

impl Config {
    /// The sensor pairs correlated and tracked, in the correlator's order: `gcc.pairs`, cut to
    /// the `gcc.max_pairs` with the longest baselines.
    pub fn pairs(&self) -> Vec<Pair> {
        let geo = self.geometry();
        let all = geo.pairs(self.gcc.pairs, self.gcc.reference);
        crate::dsp::geometry::longest_baselines(all, geo.len(), self.gcc.max_pairs)
    }

    /// The correlator's parameters: pairs, frame, window, band, weighting and peaks.
    pub fn gcc_params(&self) -> GccParams {
        let fs = self.sample_rate_hz();
        let pairs: Vec<Pair> = self.pairs();
        GccParams::new(
            fs,
            self.array.sensors_m.len(),
            self.frame_samples(),
            self.gcc.zero_pad,
            self.gcc.window,
            self.band_hz(),
            self.gcc.weighting,
            self.gcc.beta as f32,
            self.gcc.regularisation as f32,
            self.gcc.peaks_per_pair,
            self.gcc.min_peak_separation_samples as f32,
            self.gcc.band_taper,
            &pairs,
        )
    }

    /// The filter bank's parameters: particles, slots, motion models and their transitions,
    /// the array in the frame the filter works in, and the noise floor.
    pub fn filter_params(&self) -> FilterParams {
        let t = &self.tracker;
        let models = t
            .models
            .iter()
            .map(|m| MotionModel {
                kind: m.kind,
                accel_std: m.accel_std_m_s2 as f32,
                turn_rate_std: m.turn_rate_std_rad_s2 as f32,
                velocity_decay_s: m.velocity_decay_s as f32,
            })
            .collect::<Vec<_>>();
        let l = models.len();
        let mut transition_cdf = Vec::with_capacity(l * l);
        for row in self.transition_matrix() {
            let mut acc = 0.0f64;
            for (j, p) in row.iter().enumerate() {
                acc += p;
                // The last entry is exactly 1 so a uniform below 1 always finds a model.
                transition_cdf.push(if j + 1 == l { 1.0 } else { acc as f32 });
            }
        }
        let geo = self.geometry();
        let pairs = self
            .pairs()
            .iter()
            .map(|p| (p.a as u32, p.b as u32))
            .collect();
        let f3 = |v: [f64; 3]| [v[0] as f32, v[1] as f32, v[2] as f32];
        FilterParams {
            particles: t.particles,
            slots: t.max_tracks,
            models,
            model_names: t.models.iter().map(|m| m.name.clone()).collect(),
            transition_cdf,
            selection: t.model_selection,
            mode: self.array.mode,
            tdoa_std_s: (t.tdoa_std_samples / self.sample_rate_hz()) as f32,
            ess_fraction: t.ess_fraction as f32,
            seed: t.seed,
            speed_of_sound_m_s: self.array.speed_of_sound_m_s as f32,
            sensors: {
                // Directions are taken from the centroid, so their sensors are relative to it
                // (a plane wave's delays do not depend on the origin; a curved one's do).
                let c = match self.array.mode {
                    TrackMode::Direction | TrackMode::Line => geo.centroid(),
                    TrackMode::ThreeD => nalgebra::Vector3::zeros(),
                };
                self.array
                    .sensors_m
                    .iter()
                    .map(|s| f3([s[0] - c.x, s[1] - c.y, s[2] - c.z]))
                    .collect()
            },
            pairs,
            bounds: match (self.array.bounds_min_m, self.array.bounds_max_m) {
                (Some(lo), Some(hi)) if self.array.mode == TrackMode::ThreeD => {
                    Some((f3(lo), f3(hi)))
                }
                _ => None,
            },
            inv_range_max: self.direction_inv_range_max() as f32,
            line: self.line_axes().map(|(a, s)| LineAxes {
                axis: f3([a.x, a.y, a.z]),
                side: f3([s.x, s.y, s.z]),
                plane: self.array.plane_normal.is_some(),
                keep_side: self.turning(),
            }),
        }
    }

    /// The track manager's settings: the pairs and peaks it reads, the search volume, and its
    /// births and deletions.
    pub fn manager_settings(&self) -> ManagerSettings {
        let t = &self.tracker;
        let hop_s = self.hop_samples() as f64 / self.sample_rate_hz();
        ManagerSettings {
            geometry: self.geometry(),
            bounds: match (self.array.bounds_min_m, self.array.bounds_max_m) {
                (Some(lo), Some(hi)) => Some((lo, hi)),
                _ => None,
            },
            peaks: PeaksSettings {
                pairs: self.pairs(),
                peaks_per_pair: self.gcc.peaks_per_pair,
                sample_rate_hz: self.sample_rate_hz(),
                detection_probability: t.detection_probability as f32,
                peak_noise: crate::dsp::gcc::phat_noise_level(&self.gcc_params()),
                phat_window: match self.gcc.weighting {
                    crate::dsp::gcc::Weighting::Phat => self.gcc_params().window_coefficients(),
                    _ => Vec::new(),
                },
            },
            hop_s,
            init_frames: t.init_frames,
            max_tracks: t.max_tracks,
            max_speed_m_s: t.max_speed_m_s,
            gate_sigmas: t.gate_sigmas as f32,
            logic: LogicSettings {
                confirm_m: t.confirm_m,
                confirm_n: t.confirm_n,
                confirm_rule: t.confirm_rule,
                scan_s: t.scan_s,
                hop_s,
                delete_rule: t.delete_rule,
                delete_window_s: t.delete_window_s,
                delete_fraction: t.delete_fraction,
                hit_fraction: t.hit_fraction as f32,
                delete_after_s: t.delete_after_s,
            },
            turning: self.turning(),
            mfa_lists: (t.association == super::Association::Mfa).then_some(t.mfa_lists),
        }
    }

    /// The frame assembler this configuration describes (its channel map, input channels,
    /// frame, hop and sample rate); `origin` as for [`FrameAssembler::new`].
    pub fn frame_assembler(&self, origin: u64) -> FrameAssembler {
        FrameAssembler::new(
            self.channel_map(),
            self.input_channels(),
            self.frame_samples(),
            self.hop_samples(),
            self.sample_rate_hz(),
            origin,
        )
    }

    /// What live capture asks of the device.
    pub fn capture_settings(&self) -> CaptureSettings {
        CaptureSettings {
            device: self.audio.device.clone(),
            channels: self.input_channels(),
            sample_rate_hz: self.audio.sample_rate_hz,
            period_frames: self.audio.period_frames,
            ring_seconds: self.audio.ring_seconds,
            sample_format: self.audio.sample_format,
        }
    }
}
