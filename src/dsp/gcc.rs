//! GCC-PHAT: one cross-correlation curve per sensor pair and the top peaks of each, restricted to
//! physically possible lags, with sub-sample positions and a quality figure.
//!
//! [`Correlator`] is the trait both backends implement; [`CpuCorrelator`] is the CPU one, built on
//! realfft. The functions [`weight_pair`] and [`find_peaks`] are the reference the CUDA kernels are
//! tested against.
//!
//! Normalisation: a curve is `irfft(G') / sum_k mult_k |G'_k|`, where `G'` is the weighted
//! cross-spectrum and `mult_k` counts each bin of the half spectrum as it appears in the full one.
//! A curve value is therefore at most 1 (perfect coherence at that lag) whatever the weighting.

use std::sync::Arc;

use realfft::num_complex::Complex32;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};

use serde::{Deserialize, Serialize};

use crate::audio::frame::Frame;
use crate::dsp::geometry::Pair;
use crate::error::BackendError;
use crate::math::interp::{SincKernel, SincTable};

/// The window applied to each frame before its transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Window {
    #[default]
    Hann,
    Hamming,
    Blackman,
    Rect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Weighting {
    /// Phase transform: X_a X_b* / (|X_a X_b*|^beta + regulariser).
    #[default]
    Phat,
    /// Plain cross-correlation (no whitening).
    None,
}

/// Half-width (samples) of the band-limited interpolator used to refine peaks.
pub const PEAK_INTERP_HALF_WIDTH: usize = 16;
/// Kaiser beta of that interpolator.
pub const PEAK_INTERP_BETA: f64 = 8.0;
/// Refinement grid: offsets -0.5..=0.5 in steps of 1/PEAK_GRID around the integer peak.
pub const PEAK_GRID: usize = 16;
/// Most peaks per pair any backend supports.
pub const MAX_PEAKS: usize = 16;
/// Local maxima considered per pair before refinement and separation (4 per kept peak + 8).
pub const MAX_CANDIDATES: usize = 72;

/// One peak of a GCC curve.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct Peak {
    /// Lag in samples (sub-sample), within the pair's physical bound. TDOA = lag / fs.
    pub lag_samples: f32,
    /// Curve value at the peak: normalised coherence, at most 1.
    pub value: f32,
    /// How far the peak stands above the rest of the curve: (value - mean) / std over the
    /// pair's physical lags. Above ~5 is a clear peak; around 3 is noise.
    pub quality: f32,
}

impl Peak {
    /// An empty slot (fewer peaks than asked for).
    pub const NONE: Peak = Peak {
        lag_samples: 0.0,
        value: f32::NEG_INFINITY,
        quality: 0.0,
    };

    pub fn is_some(&self) -> bool {
        self.value.is_finite()
    }
}

/// One sensor pair as the correlator sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairSpec {
    pub a: usize,
    pub b: usize,
    /// Physical bound on |lag|, samples.
    pub max_lag_samples: f32,
}

/// Everything a correlator needs, resolved from the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct GccParams {
    pub sample_rate_hz: f64,
    pub channels: usize,
    pub frame_len: usize,
    /// FFT length: the frame, or the frame zero-padded so the correlation over physical lags is
    /// linear rather than circular.
    pub fft_len: usize,
    pub window: Window,
    /// First and last rfft bin inside the band (inclusive).
    pub band_bins: (usize, usize),
    pub weighting: Weighting,
    pub beta: f32,
    pub regularisation: f32,
    pub peaks_per_pair: usize,
    pub min_separation_samples: f32,
    /// Per-bin weight over the band: 1 inside, a raised-cosine taper over the outer 10% at
    /// each edge, 0 outside. Soft edges keep the curve's sidelobes low and keep band-limited
    /// sub-sample interpolation unbiased even when the band reaches the Nyquist frequency.
    pub band_taper: Vec<f32>,
    pub pairs: Vec<PairSpec>,
    /// Curves are stored for lags -curve_half..=curve_half: the largest physical lag plus the
    /// interpolator's reach.
    pub curve_half: usize,
}

impl GccParams {
    /// Whether `frames` fit these parameters (channels and length) and `outputs` results were
    /// given for them: every backend's first check of a call.
    pub fn check_call(
        &self,
        backend: &'static str,
        frames: &[&Frame],
        outputs: usize,
    ) -> Result<(), BackendError> {
        if frames.len() != outputs {
            return Err(BackendError::new(
                backend,
                "frames and outputs differ in number",
            ));
        }
        self.check_frames(backend, frames)
    }

    /// Whether every frame has these parameters' channels and length.
    pub fn check_frames(
        &self,
        backend: &'static str,
        frames: &[&Frame],
    ) -> Result<(), BackendError> {
        let (c, len) = (self.channels, self.frame_len);
        match frames
            .iter()
            .find(|f| f.channels != c || f.len != len || f.data.len() != c * len)
        {
            Some(f) => Err(BackendError::new(
                backend,
                format!(
                    "frame of {} x {} does not match the plan's {} x {}",
                    f.channels, f.len, c, len
                ),
            )),
            None => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        sample_rate_hz: f64,
        channels: usize,
        frame_len: usize,
        zero_pad: bool,
        window: Window,
        band_hz: [f64; 2],
        weighting: Weighting,
        beta: f32,
        regularisation: f32,
        peaks_per_pair: usize,
        min_separation_samples: f32,
        taper: bool,
        pairs: &[Pair],
    ) -> Self {
        let pairs: Vec<PairSpec> = pairs
            .iter()
            .map(|p| PairSpec {
                a: p.a,
                b: p.b,
                max_lag_samples: (p.max_tdoa_s * sample_rate_hz) as f32,
            })
            .collect();
        let max_lag = pairs
            .iter()
            .map(|p| p.max_lag_samples.ceil() as usize)
            .max()
            .unwrap_or(0);
        let curve_half = max_lag + PEAK_INTERP_HALF_WIDTH + 1;
        let fft_len = if zero_pad {
            (frame_len + curve_half).next_power_of_two()
        } else {
            frame_len
        };
        let bin_hz = sample_rate_hz / fft_len as f64;
        let nbins = fft_len / 2 + 1;
        let lo = ((band_hz[0] / bin_hz).ceil() as usize).min(nbins - 1);
        let hi = ((band_hz[1] / bin_hz).floor() as usize)
            .min(nbins - 1)
            .max(lo);
        let band_taper = band_taper(nbins, lo, hi, taper);
        Self {
            sample_rate_hz,
            channels,
            frame_len,
            fft_len,
            window,
            band_bins: (lo, hi),
            weighting,
            beta,
            regularisation,
            peaks_per_pair: peaks_per_pair.clamp(1, MAX_PEAKS),
            min_separation_samples,
            band_taper,
            pairs,
            curve_half,
        }
    }

    pub fn n_bins(&self) -> usize {
        self.fft_len / 2 + 1
    }

    pub fn curve_len(&self) -> usize {
        2 * self.curve_half + 1
    }

    /// The analysis window, `frame_len` long (periodic form).
    pub fn window_coefficients(&self) -> Vec<f32> {
        window(self.window, self.frame_len)
    }
}

/// Band weights. With `taper`, the outer 10% of the band (at least 2 bins) at each end rises
/// from near 0 to 1 as a raised cosine; without, the band is a hard 0/1 mask.
pub fn band_taper(nbins: usize, lo: usize, hi: usize, taper: bool) -> Vec<f32> {
    let width = ((hi - lo + 1) / 10).max(2);
    (0..nbins)
        .map(|k| {
            if k < lo || k > hi {
                return 0.0;
            }
            if !taper {
                return 1.0;
            }
            let d = (k - lo).min(hi - k);
            if d >= width {
                1.0
            } else {
                let x = (d as f64 + 0.5) / width as f64;
                (0.5 - 0.5 * (std::f64::consts::PI * x).cos()) as f32
            }
        })
        .collect()
}

/// The spread (standard deviation) of a PHAT curve's value at one lag when the two channels
/// hold independent noise: the level against which a peak's height says "signal". For unit
/// phasors weighted by the band taper t it is `sqrt(Σt² / 2) / Σt`, widened by the correlation
/// between neighbouring bins that the window and the zero padding bring (`fft_len / frame_len`
/// times a per-window factor, measured by simulation: Hann 1.63, Hamming 1.54, Blackman 1.94,
/// rectangular 0.9). Unlike a z-score over the physical lags, it does not depend on how many
/// lags a pair has, so a compact array's pairs (a handful of lags) are judged like a wide one's.
/// `None` without PHAT weighting (plain correlation has no fixed noise level).
pub fn phat_noise_level(p: &GccParams) -> Option<f32> {
    if p.weighting != Weighting::Phat {
        return None;
    }
    let (lo, hi) = p.band_bins;
    let t = p.band_taper.get(lo..=hi)?;
    let s1: f64 = t.iter().map(|&x| f64::from(x)).sum();
    let s2: f64 = t.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    if !(s1 > 0.0) {
        return None;
    }
    let kappa = match p.window {
        Window::Hann => 1.63,
        Window::Hamming => 1.54,
        Window::Blackman => 1.94,
        Window::Rect => 0.9,
    };
    let spread = p.fft_len as f64 / p.frame_len as f64;
    Some((kappa * spread * s2 / (2.0 * s1 * s1)).sqrt() as f32)
}

/// Periodic (DFT-even) analysis windows.
pub fn window(kind: Window, n: usize) -> Vec<f32> {
    let tau = std::f64::consts::TAU;
    (0..n)
        .map(|i| {
            let x = tau * i as f64 / n as f64;
            (match kind {
                Window::Rect => 1.0,
                Window::Hann => 0.5 - 0.5 * x.cos(),
                Window::Hamming => 0.54 - 0.46 * x.cos(),
                Window::Blackman => 0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos(),
            }) as f32
        })
        .collect()
}

/// The result of correlating one frame.
#[derive(Debug, Clone, PartialEq)]
pub struct GccFrame {
    pub seq: u64,
    /// `pairs × peaks_per_pair`, each pair's peaks best first, empty slots [`Peak::NONE`].
    pub peaks: Vec<Peak>,
    /// `pairs × curve_len` when curves were asked for, else empty.
    pub curves: Vec<f32>,
}

impl GccFrame {
    pub fn new(params: &GccParams) -> Self {
        Self {
            seq: 0,
            peaks: vec![Peak::NONE; params.pairs.len() * params.peaks_per_pair],
            curves: Vec::new(),
        }
    }

    pub fn pair_peaks(&self, pair: usize, k: usize) -> &[Peak] {
        &self.peaks[pair * k..(pair + 1) * k]
    }
}

/// A started one-frame correlation's peaks on the device (see [`Correlator::device_peaks`]):
/// per pair and peak (lag in samples, value, quality), as [`Peak`] holds them, at device
/// address `peaks`; the device's counter at `done` (of blocks whose peaks are written) reaches
/// `expect` once they are all written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePeaks {
    pub peaks: u64,
    pub done: u64,
    pub expect: u32,
}

/// Turns frames into GCC curves and peaks. Implemented by the CPU and CUDA backends.
pub trait Correlator: Send {
    /// "cpu" or "cuda".
    fn backend(&self) -> &'static str;
    fn params(&self) -> &GccParams;
    /// Correlate a batch of frames (`out.len() == frames.len()`); fills peaks, and curves when
    /// `want_curves`. A batch lets the GPU transform many frames in one call during replay.
    fn correlate(
        &mut self,
        frames: &[&Frame],
        out: &mut [GccFrame],
        want_curves: bool,
    ) -> Result<(), BackendError>;
    /// Start correlating `frames` without waiting for the result (a GPU stages them and
    /// queues its work); [`Self::finish`] waits for it and fills the results. Returns false when
    /// the backend does not work ahead (the CPU) or not for this many frames: the caller then
    /// correlates as usual. The backend has taken its copy of the samples when this returns, so
    /// the caller may change `frames` before `finish` (the input checks zero non-finite
    /// samples meanwhile, and correlate again if they found any).
    fn start(&mut self, _frames: &[&Frame], _want_curves: bool) -> Result<bool, BackendError> {
        Ok(false)
    }
    /// Wait for the work [`Self::start`] queued for `frames` (the same frames, in number) and
    /// fill `out` as [`Self::correlate`] would have.
    fn finish(
        &mut self,
        _frames: &[&Frame],
        _out: &mut [GccFrame],
        _want_curves: bool,
    ) -> Result<(), BackendError> {
        Err(BackendError::new(
            self.backend(),
            "finish called without a started correlation",
        ))
    }
    /// Where the device writes the peaks of the one frame [`Self::start`] just queued, for a
    /// filter step on the same device to read them without the host (None: not on a device,
    /// or not one frame).
    fn device_peaks(&self) -> Option<DevicePeaks> {
        None
    }
    /// Memory for frames that this correlator's device reads where it lies (a live frame then
    /// goes to the device without a copy), for the frame assembler; None: frames on the heap.
    fn frame_allocator(&self) -> Option<crate::audio::frame::FrameAlloc> {
        None
    }
    /// How many frames a call should carry in replay (1: no gain from batching).
    fn preferred_batch(&self) -> usize {
        1
    }
    /// Make ready now for calls of these batch sizes (a GPU builds its transform plans and
    /// graphs), so that the first such call does not pay for it. Host backends have nothing
    /// to prepare.
    fn prepare_batches(&mut self, _sizes: &[usize]) -> Result<(), BackendError> {
        Ok(())
    }
    /// Time each call with device events from now on (`on`), or not. Recording and reading
    /// the events costs host time on every call, so it is off until asked for (`bench`).
    fn set_device_timing(&mut self, _on: bool) {}
    /// Device time of the last `correlate` (GPU event timing, when turned on); None for host
    /// backends.
    fn last_device_time_s(&self) -> Option<f64> {
        None
    }
    /// Bytes the last call moved through device memory (for achieved-bandwidth figures).
    fn bytes_per_call(&self) -> Option<u64> {
        None
    }
}

/// Weight one pair's cross-spectrum in place of `out` (half spectrum, `n_bins` long) and return
/// the normalisation `sum_k mult_k |G'_k|` (0 when the pair carries no signal).
///
/// `mag_a`/`mag_b` are `|X|^beta` per bin for the two channels.
/// Σ f(v[i]) in four interleaved running totals (the additions then overlap instead of
/// waiting on each other).
#[inline(always)]
fn sum4<T>(v: &[T], f: impl Fn(&T) -> f64) -> f64 {
    let mut acc = [0.0f64; 4];
    let mut quads = v.chunks_exact(4);
    for q in &mut quads {
        for i in 0..4 {
            acc[i] += f(&q[i]);
        }
    }
    for (i, x) in quads.remainder().iter().enumerate() {
        acc[i] += f(x);
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

pub fn weight_pair(
    p: &GccParams,
    xa: &[Complex32],
    xb: &[Complex32],
    mag_a: &[f32],
    mag_b: &[f32],
    out: &mut [Complex32],
) -> f32 {
    let (lo, hi) = p.band_bins;
    let n_half = p.fft_len / 2;
    out[..lo].fill(Complex32::new(0.0, 0.0));
    out[hi + 1..].fill(Complex32::new(0.0, 0.0));
    let phat = p.weighting == Weighting::Phat;
    let (ma, mb) = (&mag_a[lo..=hi], &mag_b[lo..=hi]);
    let (xa, xb) = (&xa[lo..=hi], &xb[lo..=hi]);
    let taper = &p.band_taper[lo..=hi];
    let band = &mut out[lo..=hi];
    if phat {
        // Mean weight magnitude over the band sets the regulariser's scale.
        let mut acc = [0.0f64; 4];
        let mut qa = ma.chunks_exact(4);
        let mut qb = mb.chunks_exact(4);
        for (a, b) in (&mut qa).zip(&mut qb) {
            for i in 0..4 {
                acc[i] += f64::from(a[i] * b[i]);
            }
        }
        for (i, (a, b)) in qa.remainder().iter().zip(qb.remainder()).enumerate() {
            acc[i] += f64::from(a * b);
        }
        let mean = ((acc[0] + acc[1]) + (acc[2] + acc[3])) / band.len() as f64;
        let reg = (f64::from(p.regularisation) * mean) as f32 + f32::MIN_POSITIVE;
        for (((((o, a), b), t), m), n) in band.iter_mut().zip(xa).zip(xb).zip(taper).zip(ma).zip(mb)
        {
            *o = (a * b.conj()) * (t / (m * n + reg));
        }
    } else {
        for (((o, a), b), t) in band.iter_mut().zip(xa).zip(xb).zip(taper) {
            *o = (a * b.conj()) * *t;
        }
    }
    // Every bin counts twice (its mirror image) except the two one-sided ends.
    let mag = |g: &Complex32| f64::from((g.re * g.re + g.im * g.im).sqrt());
    let mut norm = 2.0 * sum4(band, mag);
    if lo == 0 {
        norm -= mag(&out[0]);
    }
    if hi == n_half {
        norm -= mag(&out[n_half]);
    }
    norm as f32
}

/// Find up to `k` peaks of one pair's curve within its physical bound, refine each to a fraction
/// of a sample, and write them best first into `out` (unused slots [`Peak::NONE`]).
///
/// `curve[i]` is the correlation at lag `i - curve_half`.
pub fn find_peaks(
    curve: &[f32],
    curve_half: usize,
    max_lag: f32,
    min_sep: f32,
    interp: &SincTable,
    out: &mut [Peak],
) {
    out.fill(Peak::NONE);
    let c = curve_half as i64;
    let bound = (max_lag.floor() as i64).min(c);
    if bound < 0 {
        return;
    }
    // Mean and spread over the physical lags, for the quality figure (four running sums, so
    // the additions do not wait on each other).
    let phys = &curve[(c - bound) as usize..=(c + bound) as usize];
    let s = sum4(phys, |&v| f64::from(v));
    let s2 = sum4(phys, |&v| f64::from(v) * f64::from(v));
    let n = (2 * bound + 1) as f64;
    let mean = s / n;
    let var = s2 / n - mean * mean;
    if !(var > 1e-18) {
        // A flat curve (silent channel, or a pair weighted to nothing) has no peaks.
        return;
    }
    let std = var.sqrt();

    // Local maxima within the bound; an end of the bound counts if it rises towards the end.
    // Candidates are kept sorted (best first) in a small array: a noisy curve has hundreds of
    // local maxima, and most are rejected by one comparison with the current worst.
    let cap = (4 * out.len() + 8).min(MAX_CANDIDATES);
    let mut cand = [(f32::NEG_INFINITY, 0i64); MAX_CANDIDATES];
    let mut n_cand = 0usize;
    // In blocks: first the local maxima are gathered without a data-dependent branch (a noisy
    // curve has a maximum at every third lag, which no predictor guesses), then each goes
    // through the insertion, which rejects most with one well-predicted comparison.
    const BLK: usize = 256;
    let mut buf = [(0.0f32, 0i64); BLK];
    let len = phys.len();
    let mut start = 0usize;
    while start < len {
        let end = (start + BLK).min(len);
        let mut m = 0usize;
        // Indices into `phys` (lag = index - bound), so the compiler can drop the bounds checks.
        for idx in start..end {
            let v = phys[idx];
            let left = if idx > 0 {
                phys[idx - 1]
            } else {
                f32::NEG_INFINITY
            };
            let right = if idx + 1 < len {
                phys[idx + 1]
            } else {
                f32::NEG_INFINITY
            };
            buf[m] = (v, idx as i64 - bound);
            m += usize::from((v >= left) & (v > right) & v.is_finite());
        }
        for &(v, lag) in &buf[..m] {
            if n_cand == cap && v <= cand[cap - 1].0 {
                continue;
            }
            // Insertion: shift the worse ones down by one (dropping the last when full).
            let mut i = n_cand.min(cap - 1);
            while i > 0 && cand[i - 1].0 < v {
                cand[i] = cand[i - 1];
                i -= 1;
            }
            cand[i] = (v, lag);
            n_cand = (n_cand + 1).min(cap);
        }
        start = end;
    }
    let cand = &cand[..n_cand];
    let mut kept = 0usize;
    for &(_, lag) in cand {
        if kept == out.len() {
            break;
        }
        if out[..kept]
            .iter()
            .any(|p| (p.lag_samples - lag as f32).abs() < min_sep)
        {
            continue;
        }
        let (frac, value) = refine_peak(curve, curve_half, lag, interp);
        let lag_f = (lag as f32 + frac).clamp(-max_lag, max_lag);
        out[kept] = Peak {
            lag_samples: lag_f,
            value,
            quality: ((f64::from(value) - mean) / std) as f32,
        };
        kept += 1;
    }
    // Refinement can reorder close contenders: best first by refined value.
    out[..kept].sort_unstable_by(|x, y| y.value.total_cmp(&x.value));
}

/// Sub-sample refinement of an integer peak: evaluate the band-limited interpolant on a grid of
/// offsets -0.5..=0.5 (step 1/PEAK_GRID), take the best grid point, and fit a parabola through it
/// and its neighbours. Returns (offset, interpolated value).
pub fn refine_peak(curve: &[f32], curve_half: usize, lag: i64, interp: &SincTable) -> (f32, f32) {
    let m = interp.half_width as i64;
    let centre = lag + curve_half as i64;
    let eval = |offset: f64| -> f64 {
        let t = centre as f64 + offset;
        let i0 = t.floor();
        let frac = t - i0;
        let taps = interp.taps(frac);
        let first = i0 as i64 - m + 1;
        let mut acc = 0.0f64;
        for (k, w) in taps.iter().enumerate() {
            let j = first + k as i64;
            if j >= 0 && (j as usize) < curve.len() {
                acc += f64::from(curve[j as usize]) * f64::from(*w);
            }
        }
        acc
    };
    let g = PEAK_GRID as i64;
    let mut vals = [0.0f64; PEAK_GRID + 1];
    let mut best = 0usize;
    for (i, v) in vals.iter_mut().enumerate() {
        *v = eval((i as i64 - g / 2) as f64 / g as f64);
    }
    for i in 1..vals.len() {
        if vals[i] > vals[best] {
            best = i;
        }
    }
    let h = 1.0 / g as f64;
    let mut offset = (best as i64 - g / 2) as f64 * h;
    let mut value = vals[best];
    if best > 0 && best < PEAK_GRID {
        let (a, b, c) = (vals[best - 1], vals[best], vals[best + 1]);
        let den = a - 2.0 * b + c;
        if den < 0.0 {
            let d = 0.5 * (a - c) / den;
            offset += d * h;
            value = b - 0.25 * (a - c) * d;
        }
    }
    (offset as f32, value as f32)
}

/// The interpolator every backend uses to refine peaks.
pub fn peak_interpolator() -> SincTable {
    SincTable::new(
        &SincKernel::new(PEAK_INTERP_HALF_WIDTH, PEAK_INTERP_BETA),
        PEAK_GRID,
    )
}

/// Per-worker buffers of the CPU correlator.
struct Scratch {
    time: Vec<f32>,
    cross: Vec<Complex32>,
    corr: Vec<f32>,
    curve: Vec<f32>,
    fwd: Vec<Complex32>,
    inv: Vec<Complex32>,
}

/// GCC-PHAT on the CPU with realfft. Channels, then pairs, are spread over the rayon pool in
/// fixed groups; each pair's result does not depend on the grouping.
pub struct CpuCorrelator {
    params: GccParams,
    window: Vec<f32>,
    fwd: Arc<dyn RealToComplex<f32>>,
    inv: Arc<dyn ComplexToReal<f32>>,
    interp: SincTable,
    spectra: Vec<Complex32>,
    mags: Vec<f32>,
    scratch: Vec<Scratch>,
}

impl CpuCorrelator {
    pub fn new(params: GccParams) -> Self {
        let mut planner = RealFftPlanner::<f32>::new();
        let fwd = planner.plan_fft_forward(params.fft_len);
        let inv = planner.plan_fft_inverse(params.fft_len);
        let nb = params.n_bins();
        let workers = rayon::current_num_threads().clamp(1, 16);
        let scratch = (0..workers)
            .map(|_| Scratch {
                time: vec![0.0; params.fft_len],
                cross: vec![Complex32::new(0.0, 0.0); nb],
                corr: vec![0.0; params.fft_len],
                curve: vec![0.0; params.curve_len()],
                fwd: fwd.make_scratch_vec(),
                inv: inv.make_scratch_vec(),
            })
            .collect();
        Self {
            window: params.window_coefficients(),
            interp: peak_interpolator(),
            spectra: vec![Complex32::new(0.0, 0.0); params.channels * nb],
            mags: vec![0.0; params.channels * nb],
            scratch,
            fwd,
            inv,
            params,
        }
    }

    fn correlate_one(
        &mut self,
        frame: &Frame,
        out: &mut GccFrame,
        want_curves: bool,
    ) -> Result<(), BackendError> {
        use rayon::prelude::*;
        let p = &self.params;
        let nb = p.n_bins();
        let beta = p.beta;
        let groups = self.scratch.len();
        // Forward transforms, channels in groups.
        let per = p.channels.div_ceil(groups);
        let (window, fwd) = (&self.window, &self.fwd);
        self.spectra
            .par_chunks_mut(per * nb)
            .zip(self.mags.par_chunks_mut(per * nb))
            .zip(self.scratch.par_iter_mut())
            .enumerate()
            .try_for_each(|(g, ((spec_g, mags_g), sc))| -> Result<(), BackendError> {
                for (j, (spec, mags)) in
                    spec_g.chunks_mut(nb).zip(mags_g.chunks_mut(nb)).enumerate()
                {
                    let x = frame.channel(g * per + j);
                    for (t, (s, w)) in sc.time.iter_mut().zip(x.iter().zip(window)) {
                        *t = s * w;
                    }
                    sc.time[p.frame_len..].fill(0.0);
                    fwd.process_with_scratch(&mut sc.time, spec, &mut sc.fwd)
                        .map_err(|e| BackendError::new("cpu", format!("forward FFT: {e}")))?;
                    // sqrt(re² + im²), not hypot: magnitudes here can neither overflow nor
                    // underflow harmfully, and hypot is several times slower.
                    for (m, x) in mags.iter_mut().zip(spec.iter()) {
                        *m = (x.re * x.re + x.im * x.im).sqrt();
                    }
                    // A separate loop: inside one, the compiler would evaluate powf for every
                    // bin to vectorise the select.
                    if beta != 1.0 {
                        for m in mags.iter_mut() {
                            *m = m.powf(beta);
                        }
                    }
                }
                Ok(())
            })?;
        let k = p.peaks_per_pair;
        out.seq = frame.seq;
        let cl = p.curve_len();
        if want_curves {
            out.curves.resize(p.pairs.len() * cl, 0.0);
        } else {
            out.curves.clear();
        }
        out.peaks.resize(p.pairs.len() * k, Peak::NONE);
        // Pairs in groups, each group with its own scratch.
        let per = p.pairs.len().div_ceil(groups).max(1);
        let mut curve_slots: Vec<&mut [f32]> = if want_curves {
            out.curves.chunks_mut(per * cl).collect()
        } else {
            (0..groups).map(|_| &mut [][..]).collect()
        };
        curve_slots.resize_with(groups, || &mut [][..]);
        let (spectra, mags, inv, interp) = (&self.spectra, &self.mags, &self.inv, &self.interp);
        out.peaks
            .par_chunks_mut(per * k)
            .zip(curve_slots.into_par_iter())
            .zip(self.scratch.par_iter_mut())
            .enumerate()
            .try_for_each(
                |(g, ((peaks_g, curves_g), sc))| -> Result<(), BackendError> {
                    for (j, peaks) in peaks_g.chunks_mut(k).enumerate() {
                        let pi = g * per + j;
                        let pair = &p.pairs[pi];
                        correlate_pair(p, spectra, mags, inv.as_ref(), pair, sc)?;
                        find_peaks(
                            &sc.curve,
                            p.curve_half,
                            pair.max_lag_samples,
                            p.min_separation_samples,
                            interp,
                            peaks,
                        );
                        if want_curves {
                            curves_g[j * cl..(j + 1) * cl].copy_from_slice(&sc.curve);
                        }
                    }
                    Ok(())
                },
            )?;
        Ok(())
    }
}

/// One pair's curve into `sc.curve` (lags -curve_half..=curve_half).
fn correlate_pair(
    p: &GccParams,
    spectra: &[Complex32],
    mags: &[f32],
    inv: &dyn ComplexToReal<f32>,
    pair: &PairSpec,
    sc: &mut Scratch,
) -> Result<(), BackendError> {
    let nb = p.n_bins();
    let norm = weight_pair(
        p,
        &spectra[pair.a * nb..(pair.a + 1) * nb],
        &spectra[pair.b * nb..(pair.b + 1) * nb],
        &mags[pair.a * nb..(pair.a + 1) * nb],
        &mags[pair.b * nb..(pair.b + 1) * nb],
        &mut sc.cross,
    );
    if !(norm > 0.0 && norm.is_finite()) {
        sc.curve.fill(0.0);
        return Ok(());
    }
    // realfft's inverse wants purely real end bins.
    sc.cross[0].im = 0.0;
    sc.cross[nb - 1].im = 0.0;
    inv.process_with_scratch(&mut sc.cross, &mut sc.corr, &mut sc.inv)
        .map_err(|e| BackendError::new("cpu", format!("inverse FFT: {e}")))?;
    let inv_norm = 1.0 / norm;
    let n = p.fft_len;
    let ch = p.curve_half;
    // Negative lags wrap to the end of the circular correlation.
    let (neg, pos) = sc.curve.split_at_mut(ch);
    for (i, v) in neg.iter_mut().enumerate() {
        *v = sc.corr[n - ch + i] * inv_norm;
    }
    for (v, c) in pos.iter_mut().zip(&sc.corr) {
        *v = c * inv_norm;
    }
    Ok(())
}

impl Correlator for CpuCorrelator {
    fn backend(&self) -> &'static str {
        "cpu"
    }

    fn params(&self) -> &GccParams {
        &self.params
    }

    fn correlate(
        &mut self,
        frames: &[&Frame],
        out: &mut [GccFrame],
        want_curves: bool,
    ) -> Result<(), BackendError> {
        self.params.check_call("cpu", frames, out.len())?;
        for (f, o) in frames.iter().zip(out.iter_mut()) {
            self.correlate_one(f, o, want_curves)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsp::geometry::{ArrayGeometry, PairMode};
    use crate::rng::philox::{PhiloxStream, Stream};

    #[allow(clippy::too_many_arguments)]
    fn params(
        fs: f64,
        n: usize,
        weighting: Weighting,
        window: Window,
        zero_pad: bool,
        taper: bool,
        max_tdoa_s: f64,
    ) -> GccParams {
        let pairs = vec![Pair {
            a: 0,
            b: 1,
            max_tdoa_s,
        }];
        GccParams::new(
            fs,
            2,
            n,
            zero_pad,
            window,
            [0.0, fs * 0.5],
            weighting,
            1.0,
            0.0,
            4,
            3.0,
            taper,
            &pairs,
        )
    }

    fn noise(seed: u64, n: usize) -> Vec<f32> {
        let mut r = PhiloxStream::new(seed, 0, Stream::Simulate);
        (0..n).map(|_| r.normal_f64() as f32).collect()
    }

    /// The stated noise level of a PHAT curve matches the spread of curves of independent
    /// noise, for every window, with and without zero padding and band taper.
    #[test]
    fn phat_noise_level_matches_noise_curves() {
        let fs = 16_000.0;
        let n = 1024;
        for window in [
            Window::Hann,
            Window::Hamming,
            Window::Blackman,
            Window::Rect,
        ] {
            for (zero_pad, taper) in [(true, true), (false, false), (true, false)] {
                let p = params(fs, n, Weighting::Phat, window, zero_pad, taper, 20.0 / fs);
                let level = f64::from(phat_noise_level(&p).expect("PHAT has a level"));
                let mut cor = CpuCorrelator::new(p.clone());
                let mut out = GccFrame::new(&p);
                let (mut s, mut s2, mut m) = (0.0f64, 0.0f64, 0usize);
                for seed in 0..150u64 {
                    let mut frame = Frame::new(2, n, fs);
                    frame
                        .channel_mut(0)
                        .copy_from_slice(&noise(1000 + 2 * seed, n));
                    frame
                        .channel_mut(1)
                        .copy_from_slice(&noise(1001 + 2 * seed, n));
                    cor.correlate(&[&frame], std::slice::from_mut(&mut out), true)
                        .unwrap();
                    for &v in &out.curves {
                        s += f64::from(v);
                        s2 += f64::from(v) * f64::from(v);
                        m += 1;
                    }
                }
                let sd = (s2 / m as f64 - (s / m as f64).powi(2)).sqrt();
                let ratio = sd / level;
                assert!(
                    (0.85..1.15).contains(&ratio),
                    "{window:?} pad {zero_pad} taper {taper}: spread {sd} against level {level}"
                );
            }
        }
        let plain = params(fs, n, Weighting::None, Window::Hann, true, true, 20.0 / fs);
        assert!(phat_noise_level(&plain).is_none());
    }

    /// With no weighting and a rectangular window, the curve is the plain time-domain
    /// cross-correlation (linear with zero padding), divided by the normalisation.
    #[test]
    fn plain_correlation_matches_time_domain_oracle() {
        let n = 256;
        let p = params(1000.0, n, Weighting::None, Window::Rect, true, false, 0.040);
        let a = noise(1, n);
        let b = noise(2, n);
        let mut frame = Frame::new(2, n, 1000.0);
        frame.channel_mut(0).copy_from_slice(&a);
        frame.channel_mut(1).copy_from_slice(&b);
        let mut cor = CpuCorrelator::new(p.clone());
        let mut out = GccFrame::new(&p);
        cor.correlate(&[&frame], std::slice::from_mut(&mut out), true)
            .unwrap();
        // Oracle: r[l] = sum_n a[n + l] b[n]  (peaks at l = d when a is b delayed by d).
        let oracle = |l: i64| -> f64 {
            (0..n as i64)
                .filter(|&i| i + l >= 0 && i + l < n as i64)
                .map(|i| f64::from(a[(i + l) as usize]) * f64::from(b[i as usize]))
                .sum()
        };
        let ch = p.curve_half as i64;
        // Recover the normalisation from lag 0 and check every lag's ratio.
        let scale = oracle(0) / f64::from(out.curves[ch as usize]);
        for i in 0..p.curve_len() {
            let l = i as i64 - ch;
            let want = oracle(l);
            let got = f64::from(out.curves[i]) * scale;
            assert!(
                (want - got).abs() < 1e-3 * (1.0 + want.abs()),
                "lag {l}: {got} vs {want}"
            );
        }
    }

    /// PHAT against a float64 DFT oracle: X_a X_b* / |X_a X_b*|, inverse DFT, normalised.
    #[test]
    fn phat_matches_dft_oracle() {
        let n = 128;
        let p = params(1000.0, n, Weighting::Phat, Window::Hann, false, true, 0.030);
        let a = noise(3, n);
        let b = noise(4, n);
        let mut frame = Frame::new(2, n, 1000.0);
        // Junk first: nothing may rely on zeroed buffers.
        frame.data.fill(f32::NAN);
        frame.channel_mut(0).copy_from_slice(&a);
        frame.channel_mut(1).copy_from_slice(&b);
        let mut cor = CpuCorrelator::new(p.clone());
        let mut out = GccFrame::new(&p);
        out.peaks.fill(Peak {
            lag_samples: 99.0,
            value: 9.0,
            quality: 9.0,
        });
        cor.correlate(&[&frame], std::slice::from_mut(&mut out), true)
            .unwrap();
        let w = window(Window::Hann, n);
        let dft = |x: &[f32]| -> Vec<(f64, f64)> {
            (0..n)
                .map(|k| {
                    let mut re = 0.0;
                    let mut im = 0.0;
                    for (t, v) in x.iter().enumerate() {
                        let ang = -std::f64::consts::TAU * (k * t) as f64 / n as f64;
                        let s = f64::from(*v) * f64::from(w[t]);
                        re += s * ang.cos();
                        im += s * ang.sin();
                    }
                    (re, im)
                })
                .collect()
        };
        let (xa, xb) = (dft(&a), dft(&b));
        let g: Vec<(f64, f64)> = (0..n)
            .map(|k| {
                let (ar, ai) = xa[k];
                let (br, bi) = (xb[k].0, -xb[k].1);
                let (re, im) = (ar * br - ai * bi, ar * bi + ai * br);
                let m = (re * re + im * im).sqrt();
                // The band weights of the half spectrum, mirrored onto the upper half.
                let t = f64::from(p.band_taper[k.min(n - k)]);
                (t * re / m, t * im / m)
            })
            .collect();
        let norm: f64 = g.iter().map(|(re, im)| (re * re + im * im).sqrt()).sum();
        let ch = p.curve_half as i64;
        for i in 0..p.curve_len() {
            let l = i as i64 - ch;
            let mut acc = 0.0;
            for (k, (re, im)) in g.iter().enumerate() {
                let ang = std::f64::consts::TAU * (k as i64 * l) as f64 / n as f64;
                acc += re * ang.cos() - im * ang.sin();
            }
            let want = acc / norm;
            let got = f64::from(out.curves[i]);
            assert!((want - got).abs() < 1e-4, "lag {l}: {got} vs {want}");
        }
        assert!(out.peaks.iter().all(|p| p.lag_samples != 99.0));
    }

    /// Broadband noise delayed by a fractional number of samples (band-limited interpolation):
    /// the top peak recovers the delay within 0.05 samples, and no peak leaves the bound.
    #[test]
    fn fractional_delays_are_recovered() {
        let fs = 48_000.0;
        let n = 4096;
        let max_lag = 40.0f64;
        let p = params(
            fs,
            n,
            Weighting::Phat,
            Window::Hann,
            false,
            true,
            max_lag / fs,
        );
        let kernel = SincKernel::new(32, 9.0);
        let src = noise(5, n + 200);
        let mut cor = CpuCorrelator::new(p.clone());
        let mut out = GccFrame::new(&p);
        let mut worst = 0.0f64;
        for (i, d) in [-31.73, -7.5, -0.25, 0.0, 0.1, 3.33, 12.9, 25.61, 37.02]
            .iter()
            .enumerate()
        {
            // a(t) = s(t - d) and b(t) = s(t): a lags b by d, so tau_ab = d.
            let mut frame = Frame::new(2, n, fs);
            for t in 0..n {
                frame.channel_mut(0)[t] = kernel.interpolate(&src, t as f64 + 100.0 - d) as f32;
                frame.channel_mut(1)[t] = src[t + 100];
            }
            // Tiny independent noise (60 dB SNR).
            let e0 = noise(100 + i as u64, n);
            let e1 = noise(200 + i as u64, n);
            for t in 0..n {
                frame.channel_mut(0)[t] += 1e-3 * e0[t];
                frame.channel_mut(1)[t] += 1e-3 * e1[t];
            }
            cor.correlate(&[&frame], std::slice::from_mut(&mut out), false)
                .unwrap();
            let best = out.peaks[0];
            let err = (f64::from(best.lag_samples) - d).abs();
            worst = worst.max(err);
            // The requirement is 0.05 samples; the refiner does ~0.01 even with the band reaching
            // Nyquist, so a tighter bound catches regressions.
            assert!(
                err < 0.02,
                "delay {d}: got {} (err {err})",
                best.lag_samples
            );
            assert!(best.quality > 5.0, "quality {}", best.quality);
            for pk in out.peaks.iter().filter(|p| p.is_some()) {
                assert!(pk.lag_samples.abs() <= max_lag as f32);
            }
        }
        assert!(worst < 0.05);
    }

    #[test]
    fn peaks_never_leave_the_physical_bound() {
        // Random curves with their largest values outside the bound.
        let interp = peak_interpolator();
        for seed in 0..200u64 {
            let half = 60usize;
            let mut curve = noise(seed, 2 * half + 1);
            curve[0] = 50.0;
            curve[2 * half] = 50.0;
            let max_lag = 10.0 + (seed % 37) as f32 * 0.77;
            let mut out = [Peak::NONE; 6];
            find_peaks(&curve, half, max_lag, 2.0, &interp, &mut out);
            assert!(out[0].is_some());
            for p in out.iter().filter(|p| p.is_some()) {
                assert!(
                    p.lag_samples.abs() <= max_lag,
                    "{} > {max_lag}",
                    p.lag_samples
                );
            }
            for w in out.windows(2) {
                if w[1].is_some() {
                    assert!(w[0].value >= w[1].value - 1e-6);
                }
            }
        }
    }

    #[test]
    fn silent_pair_gives_no_peaks_and_no_nan() {
        let g = ArrayGeometry::new(vec![[0.0; 3], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], 343.0);
        let pairs = g.pairs(PairMode::All, 0);
        let p = GccParams::new(
            16_000.0,
            3,
            1024,
            false,
            Window::Hann,
            [100.0, 7000.0],
            Weighting::Phat,
            1.0,
            1e-3,
            3,
            3.0,
            true,
            &pairs,
        );
        let mut frame = Frame::new(3, 1024, 16_000.0);
        let x = noise(9, 1024);
        frame.channel_mut(0).copy_from_slice(&x);
        frame.channel_mut(1).copy_from_slice(&x);
        // Channel 2 silent.
        let mut cor = CpuCorrelator::new(p.clone());
        let mut out = GccFrame::new(&p);
        cor.correlate(&[&frame], std::slice::from_mut(&mut out), true)
            .unwrap();
        assert!(out.curves.iter().all(|v| v.is_finite()));
        assert!(out.pair_peaks(0, 3)[0].lag_samples.abs() < 0.05);
        assert!(out.pair_peaks(0, 3)[0].value > 0.9);
        // Pairs with the silent channel have a flat zero curve: its "peaks" have zero quality.
        for pk in out.pair_peaks(1, 3).iter().chain(out.pair_peaks(2, 3)) {
            assert!(!pk.is_some() || pk.quality.abs() < 1e-3, "{pk:?}");
        }
    }
}
