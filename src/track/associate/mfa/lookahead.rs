//! Multi-frame assignment in the track manager (`tracker.association = "mfa"`): the frames
//! held back so that each frame's peaks are given to the tracks with the next S - 2 frames in
//! view, and the per-pair assignment over them ([`crate::track::associate::mfa::pair_window`]).
//!
//! The manager measures each frame as it comes and holds it; once S - 1 frames are held it
//! commits the oldest (assigns, steps the filters, births, reports), so its reports run S - 2
//! frames behind the newest frame, and the held frames are committed at the end of the stream
//! ([`Lookahead::drain_one`]).

use std::collections::VecDeque;

use crate::track::TdoaMeasurement;
use crate::track::associate::gnn::assign_pair;
use crate::track::associate::mfa::cost::ListModel;
use crate::track::associate::mfa::pair_window::{
    PairList, PairTrack, PairWindow, assign_over_window,
};
use crate::track::associate::{HeldFrame, PairSettings, Row};
use crate::track::gate::Gates;

/// The frames held.
#[derive(Debug, Clone)]
pub struct Lookahead {
    /// S - 1: frames in the window, the committed one included.
    depth: usize,
    held: VecDeque<HeldFrame>,
    /// The newest frame held (a frame stepped again after a failure is not held twice).
    newest: Option<u64>,
    /// Pair assignments decided over the window, and those that fell back to the single frame
    /// (the S-D problem had no solution).
    pub solved: u64,
    pub fallbacks: u64,
    /// Pair assignments where the window chose otherwise than the frame alone would have.
    pub changed: u64,
}

impl Lookahead {
    /// A window of `lists` = S lists (the tracks and S - 1 frames; S >= 2).
    pub fn new(lists: usize) -> Self {
        let depth = lists.max(2) - 1;
        Self {
            depth,
            held: VecDeque::with_capacity(depth),
            newest: None,
            solved: 0,
            fallbacks: 0,
            changed: 0,
        }
    }

    /// Frames the reports run behind the newest (S - 2).
    pub fn latency_frames(&self) -> usize {
        self.depth - 1
    }

    /// Hold a frame; once the window is full, the oldest comes back to be committed. The same
    /// frame again (its commit failed and is redone) is not held twice.
    pub fn push(&mut self, f: HeldFrame) -> Option<HeldFrame> {
        if self.newest != Some(f.seq) {
            self.newest = Some(f.seq);
            self.held.push_back(f);
        }
        if self.held.len() < self.depth {
            return None;
        }
        self.held.pop_front()
    }

    /// A frame whose commit failed, back at the front (the oldest again).
    pub fn put_back(&mut self, f: HeldFrame) {
        self.held.push_front(f);
    }

    /// The end of the stream: the oldest frame still held (committed with fewer frames after
    /// it), until none is left.
    pub fn drain_one(&mut self) -> Option<HeldFrame> {
        self.held.pop_front()
    }

    /// The frames after the one being committed.
    pub fn later(&self) -> impl Iterator<Item = &TdoaMeasurement> {
        self.held.iter().map(|f| &f.frame.meas)
    }
}

/// Pair `c.index`'s peaks of the committed frame `now` (`peaks`: its TDOAs, None where a
/// peak is not usable, as [`assign_pair`] takes them) to the tracks, with the `later` frames in
/// view: the confirmed tracks by multi-frame assignment, then the tentative ones frame by frame
/// on what is left (as [`assign_pair`] does). Returns each track's peak index, and whether the
/// window was solved (false: the single frame decided) and whether its choice differs from the
/// single frame's.
pub fn assign_pair_over_window<'a>(
    c: &PairSettings,
    rows: &[Row],
    now: &TdoaMeasurement,
    peaks: &[Option<f32>],
    later: impl Iterator<Item = &'a TdoaMeasurement>,
) -> (Vec<Option<usize>>, bool, bool) {
    let k = now.peaks_per_pair;
    let pi = c.index;
    let fs = c.sample_rate_hz;
    let usable = |m: &TdoaMeasurement| -> Vec<usize> {
        if m.floor[pi] > 0.5 {
            return Vec::new();
        }
        (0..k).filter(|&j| m.amp[pi * k + j] > 0.0).collect()
    };
    let lags = 2.0 * c.pair.max_tdoa_s * fs + 1.0;
    let list = |m: &TdoaMeasurement, js: &[usize]| PairList {
        peaks: js
            .iter()
            .map(|&j| f64::from(m.tdoa_s[pi * k + j]) * fs)
            .collect(),
        model: ListModel {
            pd: f64::from(1.0 - m.floor[pi]).clamp(0.05, 0.95),
            clutter_density: (js.len().max(1) as f64) / lags,
        },
    };
    let first = usable(now);
    let mut lists = vec![list(now, &first)];
    lists.extend(later.map(|m| list(m, &usable(m))));
    let sigma = f64::from(now.sigma_s) * fs;
    let confirmed: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].confirmed).collect();
    let tracks: Vec<PairTrack> = confirmed
        .iter()
        .map(|&i| {
            let (g, r) = (rows[i].gates, rows[i].rates);
            let spread = f64::from(g.spread_s[pi]) * fs;
            PairTrack {
                tdoa: f64::from(g.predicted_s[pi]) * fs,
                tdoa_var: (spread * spread - sigma * sigma).max(1e-6),
                rate: r.rate[pi] * fs,
                rate_var: r.rate_var[pi] * fs * fs,
                accel_psd: r.accel_psd[pi] * fs * fs,
            }
        })
        .collect();
    let w = PairWindow {
        hop_s: c.hop_s,
        noise_var: sigma * sigma,
        gate_chi2: f64::from(c.gate_sigmas * c.gate_sigmas),
    };
    let all_finite = tracks.iter().all(|t| {
        [t.tdoa, t.tdoa_var, t.rate, t.rate_var, t.accel_psd]
            .iter()
            .all(|v| v.is_finite())
    });
    let solved = all_finite
        .then(|| assign_over_window(&w, &tracks, &lists))
        .flatten();
    let gated: Vec<(bool, &Gates)> = rows.iter().map(|r| (r.confirmed, r.gates)).collect();
    let alone = assign_pair(&gated, pi, peaks, c.gate_sigmas);
    let Some(taken) = solved else {
        return (alone, false, false);
    };
    let mut out = vec![None; rows.len()];
    let mut left = peaks.to_vec();
    for (&i, got) in confirmed.iter().zip(taken) {
        let j = got.map(|l| first[l]);
        if let Some(j) = j {
            left[j] = None;
        }
        out[i] = j;
    }
    // The tentative tracks share what the confirmed ones left, frame by frame.
    let tentative: Vec<usize> = (0..rows.len()).filter(|&i| !rows[i].confirmed).collect();
    if !tentative.is_empty() {
        let sub: Vec<(bool, &Gates)> = tentative.iter().map(|&i| (false, rows[i].gates)).collect();
        for (&i, j) in tentative
            .iter()
            .zip(assign_pair(&sub, pi, &left, c.gate_sigmas))
        {
            out[i] = j;
        }
    }
    let changed = out != alone;
    (out, true, changed)
}
