//! The Cramér–Rao bound along a recording: per frame, the bound on the position (or
//! direction) of a source at its true position, with the signal and noise spectra estimated
//! from the recording itself (see `crate::analysis::crlb` for the model).
//!
//! Spectra. Each frame is windowed and transformed per channel; each channel's spectrum is
//! turned by the true arrival times (from the truth track) so that the source is aligned across
//! channels and frames; then, per frequency band and sensor pair, the magnitude-squared
//! coherence is averaged over the band's bins and over the frames within ±`span` of the frame
//! (its bias for pure noise, 1 / (bins × frames), is removed), and the per-sensor SNRs follow
//! from the pairwise coherences (`crlb::snr_from_coherence`). The information is counted per
//! bin and divided by the window's equivalent noise bandwidth (1.5 bins for Hann), since
//! neighbouring bins of a windowed frame are not independent.
//!
//! A direction's bound takes the range as unknown, as the tracker does: the direction block of
//! the bound on (azimuth, elevation, inverse range) at the true position
//! (`crlb::direction_cov_unknown_range`). The spectra are aligned on the exact spherical
//! arrival times in either mode.
//!
//! The bound is for one frame (a snapshot). A tracker that follows the source over many frames
//! can beat it; a ratio of RMSE to bound below 1 says how much the filter gains from that.

use std::collections::VecDeque;
use std::sync::Arc;

use nalgebra::{DMatrix, Vector3};
use realfft::RealFftPlanner;
use realfft::num_complex::Complex32;
use serde::Serialize;

use crate::analysis::crlb;
use crate::analysis::truth::Truth;
use crate::audio::frame::Frame;
use crate::audio::{AudioSource, ReadResult};
use crate::config::Config;
use crate::error::Result;

/// Frequency bands the SNR is estimated in.
pub const BANDS: usize = 32;
/// Frames on each side averaged into a frame's coherence estimate.
pub const SPAN: usize = 4;

/// The bound at one frame.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FrameBound {
    /// Frame centre (arrival at the array), seconds from the start.
    pub t_frame: f64,
    /// √trace of the position bound, metres (None: unobservable there, or no truth).
    pub position_m: Option<f64>,
    /// Standard deviations of azimuth and elevation, degrees (compact arrays, direction mode).
    pub azimuth_deg: Option<f64>,
    pub elevation_deg: Option<f64>,
    /// Line arrays: the standard deviation of the angle to the axis, degrees.
    pub cone_deg: Option<f64>,
}

/// Per-frame sums for the coherence estimate: per band, per pair Σ Y_a Y_b*, per sensor Σ|Y|².
struct FrameSums {
    t_frame: f64,
    /// The truth (emission-time position) used for the alignment and the bound.
    truth: Option<[f64; 3]>,
    cross: Vec<Complex32>,
    power: Vec<f32>,
}

/// Computes frame bounds for a source, streaming through the recording.
pub struct BoundTracker {
    sensors: Vec<[f64; 3]>,
    c: f64,
    fs: f64,
    n: usize,
    window: Vec<f32>,
    enbw: f64,
    bands: Vec<(usize, usize)>,
    /// Σ 2ω² over each band's bins (rad²/s²).
    band_w2: Vec<f64>,
    pairs: Vec<(usize, usize)>,
    fft: Arc<dyn realfft::RealToComplex<f32>>,
    scratch_in: Vec<f32>,
    spec: Vec<Vec<Complex32>>,
    queue: VecDeque<FrameSums>,
    /// Frame index of queue[0], of the next frame to emit, and of the next frame to arrive.
    base: usize,
    next: usize,
    pushed: usize,
    direction: bool,
    /// Line arrays: the axis (the bound is on the angle to it).
    line_axis: Option<Vector3<f64>>,
    centroid: Vector3<f64>,
    /// The sensors relative to the centroid (for directions).
    sensors_from_centroid: Vec<[f64; 3]>,
    target: u32,
    out: Vec<FrameBound>,
}

/// A frame's analysis window and band as the bound sees them.
pub(crate) struct FrameBand {
    pub window: Vec<f32>,
    /// The window's equivalent noise bandwidth, in bins.
    pub enbw: f64,
    /// First and last bin of the processing band (DC and Nyquist left out).
    pub lo: usize,
    pub hi: usize,
}

pub(crate) fn frame_band(cfg: &Config) -> FrameBand {
    let fs = cfg.sample_rate_hz();
    let n = cfg.frame_samples();
    let window = cfg.gcc_params().window_coefficients();
    let (s1, s2) = window.iter().fold((0.0f64, 0.0f64), |(a, b), &w| {
        (a + f64::from(w), b + f64::from(w) * f64::from(w))
    });
    let enbw = if s1 > 0.0 {
        n as f64 * s2 / (s1 * s1)
    } else {
        1.0
    };
    let band = cfg.band_hz();
    let lo = ((band[0] * n as f64 / fs).ceil() as usize).max(1);
    let hi = ((band[1] * n as f64 / fs).floor() as usize).min(n / 2 - 1);
    FrameBand {
        window,
        enbw,
        lo,
        hi,
    }
}

impl BoundTracker {
    pub fn new(cfg: &Config, target: u32) -> Self {
        let fs = cfg.sample_rate_hz();
        let n = cfg.frame_samples();
        let FrameBand {
            window,
            enbw,
            lo,
            hi,
        } = frame_band(cfg);
        let bands = crlb::bands(lo, hi, BANDS);
        let band_w2 = bands
            .iter()
            .map(|&(a, b)| {
                (a..=b)
                    .map(|k| {
                        let w = 2.0 * std::f64::consts::PI * k as f64 * fs / n as f64;
                        2.0 * w * w
                    })
                    .sum()
            })
            .collect();
        let m = cfg.array.sensors_m.len();
        let pairs = (0..m)
            .flat_map(|a| (a + 1..m).map(move |b| (a, b)))
            .collect();
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(n);
        let geo = cfg.geometry();
        Self {
            sensors: cfg.array.sensors_m.clone(),
            c: cfg.array.speed_of_sound_m_s,
            fs,
            n,
            window,
            enbw,
            bands,
            band_w2,
            pairs,
            scratch_in: vec![0.0; n],
            spec: vec![fft.make_output_vec(); m],
            fft,
            queue: VecDeque::new(),
            base: 0,
            next: 0,
            pushed: 0,
            direction: cfg.array.mode.angular(),
            line_axis: cfg.line_axes().map(|(a, _)| a),
            centroid: geo.centroid(),
            sensors_from_centroid: cfg
                .array
                .sensors_m
                .iter()
                .map(|s| (Vector3::from(*s) - geo.centroid()).into())
                .collect(),
            target,
            out: Vec::new(),
        }
    }

    /// The truth at the emission time of a frame arriving at `t_frame` (two fixed-point steps
    /// on the travel time to the array's centroid).
    fn truth_at(&self, truth: &Truth, t_frame: f64) -> Option<[f64; 3]> {
        let mut t = t_frame;
        let mut p = truth.at(self.target, t)?;
        for _ in 0..2 {
            let r = (Vector3::from(p) - self.centroid).norm();
            t = t_frame - r / self.c;
            p = truth.at(self.target, t)?;
        }
        Some(p)
    }

    pub fn push(&mut self, frame: &Frame, truth: &Truth) {
        let t_frame = frame.centre_time_s();
        let pos = self.truth_at(truth, t_frame);
        let m = self.sensors.len();
        let nb = self.bands.len();
        let mut sums = FrameSums {
            t_frame,
            truth: pos,
            cross: vec![Complex32::new(0.0, 0.0); nb * self.pairs.len()],
            power: vec![0.0; nb * m],
        };
        if let Some(p) = pos {
            // Arrival-time offsets (relative to the centroid) to undo per channel.
            let delays: Vec<f64> = self
                .sensors
                .iter()
                .map(|s| (Vector3::from(p) - Vector3::from(*s)).norm() / self.c)
                .collect();
            for ch in 0..m {
                for (d, (x, w)) in self
                    .scratch_in
                    .iter_mut()
                    .zip(frame.channel(ch).iter().zip(&self.window))
                {
                    *d = if x.is_finite() { x * w } else { 0.0 };
                }
                // The lengths match the plan, so the transform cannot fail.
                let _ = self.fft.process(&mut self.scratch_in, &mut self.spec[ch]);
                let dt = delays[ch];
                for (k, v) in self.spec[ch].iter_mut().enumerate() {
                    let ph = 2.0 * std::f64::consts::PI * k as f64 * self.fs / self.n as f64 * dt;
                    *v *= Complex32::new(ph.cos() as f32, ph.sin() as f32);
                }
            }
            for (b, &(lo, hi)) in self.bands.iter().enumerate() {
                for ch in 0..m {
                    sums.power[b * m + ch] =
                        self.spec[ch][lo..=hi].iter().map(|v| v.norm_sqr()).sum();
                }
                for (pi, &(a, bb)) in self.pairs.iter().enumerate() {
                    sums.cross[b * self.pairs.len() + pi] = self.spec[a][lo..=hi]
                        .iter()
                        .zip(&self.spec[bb][lo..=hi])
                        .map(|(x, y)| x * y.conj())
                        .sum();
                }
            }
        }
        self.queue.push_back(sums);
        self.pushed += 1;
        // A frame is done once SPAN frames after it have arrived.
        while self.next + SPAN < self.pushed {
            self.emit(self.next - self.base);
            self.next += 1;
        }
        while self.base + SPAN < self.next {
            self.queue.pop_front();
            self.base += 1;
        }
    }

    /// The bound for queue entry `i`, from the entries around it.
    fn emit(&mut self, i: usize) {
        let entry = &self.queue[i];
        let mut fb = FrameBound {
            t_frame: entry.t_frame,
            position_m: None,
            azimuth_deg: None,
            elevation_deg: None,
            cone_deg: None,
        };
        if let Some(p) = entry.truth {
            let j = self.information(i);
            if let Some(axis) = self.line_axis {
                let x = Vector3::from(p) - self.centroid;
                let along = x.dot(&axis);
                let away = x - axis * along;
                let side = away
                    .try_normalize(1e-12)
                    .unwrap_or_else(|| axis.cross(&Vector3::z()));
                let theta = away.norm().atan2(along);
                let rho = 1.0 / x.norm().max(1e-9);
                let rel = &self.sensors_from_centroid;
                fb.cone_deg =
                    crlb::cone_var_unknown_range(rel, self.c, theta, rho, &axis, &side, &j)
                        .map(|v| v.max(0.0).sqrt().to_degrees());
            } else if self.direction {
                let x = Vector3::from(p) - self.centroid;
                let (az, el) = crlb::angles(&x);
                let rho = 1.0 / x.norm().max(1e-9);
                let rel = &self.sensors_from_centroid;
                if let Some(cv) = crlb::direction_cov_unknown_range(rel, self.c, az, el, rho, &j) {
                    fb.azimuth_deg = Some(cv[(0, 0)].max(0.0).sqrt().to_degrees());
                    fb.elevation_deg = Some(cv[(1, 1)].max(0.0).sqrt().to_degrees());
                }
            } else {
                fb.position_m = crlb::position_rms(&self.sensors, self.c, p, &j);
            }
        }
        self.out.push(fb);
    }

    /// Arrival-time information of queue entry `i`, from the coherences over its neighbours.
    fn information(&self, i: usize) -> DMatrix<f64> {
        let m = self.sensors.len();
        let np = self.pairs.len();
        let lo = i.saturating_sub(SPAN);
        let hi = (i + SPAN).min(self.queue.len() - 1);
        let used: Vec<&FrameSums> = (lo..=hi)
            .map(|k| &self.queue[k])
            .filter(|e| e.truth.is_some())
            .collect();
        let mut j = DMatrix::<f64>::zeros(m, m);
        for (b, &(blo, bhi)) in self.bands.iter().enumerate() {
            let l = (used.len() * (bhi - blo + 1)) as f64;
            let msc: Vec<f64> = self
                .pairs
                .iter()
                .enumerate()
                .map(|(pi, &(a, bb))| {
                    let cross: Complex32 = used.iter().map(|e| e.cross[b * np + pi]).sum();
                    let pa: f64 = used.iter().map(|e| f64::from(e.power[b * m + a])).sum();
                    let pb: f64 = used.iter().map(|e| f64::from(e.power[b * m + bb])).sum();
                    let raw = if pa > 0.0 && pb > 0.0 {
                        f64::from(cross.norm_sqr()) / (pa * pb)
                    } else {
                        0.0
                    };
                    // Remove the bias of a coherence estimate over l cells.
                    ((raw - 1.0 / l) / (1.0 - 1.0 / l)).clamp(0.0, 1.0)
                })
                .collect();
            let a = if m >= 3 {
                crlb::snr_from_coherence(m, &self.pairs, &msc)
            } else {
                // Two sensors: assume equal SNR, γ² = b².
                let b = msc.first().copied().unwrap_or(0.0).sqrt();
                let b = b.min(crlb::MAX_SNR / (1.0 + crlb::MAX_SNR));
                vec![b / (1.0 - b); m]
            };
            // One representative bin carrying the band's Σ 2ω².
            let mut jb = DMatrix::<f64>::zeros(m, m);
            crlb::add_bin(&mut jb, 1.0, &a);
            j += jb * (self.band_w2[b] / 2.0) / self.enbw;
        }
        j
    }

    /// Flush the frames still waiting for neighbours and return every frame's bound.
    pub fn finish(mut self) -> Vec<FrameBound> {
        while self.next < self.pushed {
            self.emit(self.next - self.base);
            self.next += 1;
        }
        self.out
    }
}

/// The bound for every frame of a recording against target `target` of the truth.
pub fn frame_bounds(
    cfg: &Config,
    src: &mut dyn AudioSource,
    origin: u64,
    truth: &Truth,
    target: u32,
) -> Result<Vec<FrameBound>> {
    let mut asm = cfg.frame_assembler(origin);
    let mut bt = BoundTracker::new(cfg, target);
    let ch = src.channels();
    let mut buf = vec![0.0f32; ch * 4096];
    loop {
        match src.read(&mut buf)? {
            ReadResult::Samples(n) => asm.push(&buf[..n * ch]),
            ReadResult::Gap(lost) => {
                asm.gap(lost);
            }
            ReadResult::Idle => continue,
            ReadResult::End => break,
        }
        while let Some(f) = asm.pop() {
            bt.push(&f, truth);
            asm.recycle(f);
        }
    }
    Ok(bt.finish())
}

/// The bound interpolated at time `t` (nearest frame), for scoring reports.
pub fn nearest(bounds: &[FrameBound], t: f64) -> Option<&FrameBound> {
    if bounds.is_empty() {
        return None;
    }
    let i = bounds.partition_point(|b| b.t_frame < t);
    let cands = [i.saturating_sub(1), i.min(bounds.len() - 1)];
    cands
        .iter()
        .map(|&k| &bounds[k])
        .min_by(|a, b| (a.t_frame - t).abs().total_cmp(&(b.t_frame - t).abs()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audio::sim::{SceneSpec, SimSource};

    /// On a simulated scene the estimated SNRs put the bound in a sensible place: finite every
    /// frame once the truth exists, centimetres for the harbour preset, larger where the SNR is
    /// lower.
    #[test]
    fn bound_along_a_simulated_scene() {
        let mut bounds_at = Vec::new();
        for snr in [20.0, 0.0] {
            let mut spec = SceneSpec::preset("harbour").unwrap();
            spec.duration_s = 3.0;
            spec.snr_db = snr;
            let cfg = Config::for_array(
                spec.sensors_m.clone(),
                spec.speed_of_sound_m_s,
                spec.sample_rate_hz,
            );
            let mut sim = SimSource::new(spec).unwrap();
            let mut csv = String::from("t,target,x,y,z\n");
            for (t, id, p) in sim.truth() {
                csv.push_str(&format!("{t},{id},{},{},{}\n", p[0], p[1], p[2]));
            }
            let truth = Truth::parse(&csv).unwrap();
            let b = frame_bounds(&cfg, &mut sim, 0, &truth, 0).unwrap();
            let frames = (3.0 * cfg.sample_rate_hz() / cfg.hop_samples() as f64) as usize;
            assert!(
                b.len() + 2 >= frames,
                "{} bounds for about {frames} frames",
                b.len()
            );
            let vals: Vec<f64> = b.iter().filter_map(|x| x.position_m).collect();
            assert!(
                vals.len() + 4 >= b.len(),
                "{} of {} finite",
                vals.len(),
                b.len()
            );
            let mut v = vals.clone();
            v.sort_by(f64::total_cmp);
            let med = v[v.len() / 2];
            eprintln!("SNR {snr} dB: median bound {med} m");
            assert!(med > 1e-5 && med < 0.5, "{med}");
            bounds_at.push(med);
        }
        assert!(bounds_at[1] > 2.0 * bounds_at[0], "{bounds_at:?}");
    }
}
