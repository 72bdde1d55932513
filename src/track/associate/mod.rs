//! Association: which track each sensor pair's peaks go to, behind [`Associator`]. [`gnn`]:
//! global nearest neighbour frame by frame (the default); [`mfa`]: multi-frame assignment
//! over a sliding window of frames (`tracker.association = "mfa"`), which holds each frame back
//! until the frames after it are in view.

pub mod gnn;
pub mod mfa;

use serde::{Deserialize, Serialize};

use crate::dsp::geometry::Pair;
use crate::track::TdoaMeasurement;
use crate::track::gate::{Gates, Rates};
use crate::track::measure::MeasurementModel;
use crate::track::measure::peaks::{PeaksModel, ReadFrame};
use crate::track::state::Track;
use mfa::lookahead::{Lookahead, assign_pair_over_window};

/// How each sensor pair's peaks are given to the tracks (`tracker.association`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Association {
    /// Global nearest neighbour, frame by frame (the default).
    #[default]
    Gnn,
    /// Multi-frame assignment over a sliding window of `tracker.mfa_lists` lists (the tracks
    /// and the next S - 1 frames): each frame's choice also weighs the frames after it, so the
    /// tracker runs S - 2 frames behind the newest frame.
    Mfa,
}

/// One frame read and waiting for its commit.
#[derive(Debug, Clone)]
pub struct HeldFrame {
    pub seq: u64,
    pub t_centre_s: f64,
    pub frame: ReadFrame,
    /// A turning array: the frame's heading.
    pub heading_deg: Option<f64>,
}

/// One track as an associator sees it: confirmed or not (confirmed tracks choose first), its
/// gates, and how its TDOAs move over the next frames.
pub struct Row<'a> {
    pub confirmed: bool,
    pub gates: &'a Gates,
    pub rates: &'a Rates,
}

/// What a pair's assignment needs besides the tracks and the frame.
pub struct PairSettings<'a> {
    pub pair: &'a Pair,
    pub index: usize,
    pub sample_rate_hz: f64,
    pub hop_s: f64,
    pub gate_sigmas: f32,
}

/// Gives each pair's peaks to the tracks, frame by frame or over a window of frames. The
/// defaults are those of an associator that decides each frame alone and holds none back.
pub trait Associator: Send {
    /// Whether it holds frames back (then every frame goes through [`Self::hold`]; else the
    /// manager commits each frame as it is read).
    fn holds_frames(&self) -> bool {
        false
    }
    /// Take the newest frame read; returns the frame to commit now (this one, or with a
    /// window the one S - 2 frames back; None while the window fills).
    fn hold(&mut self, f: HeldFrame) -> Option<HeldFrame> {
        Some(f)
    }
    /// The end of the stream: the next frame still held, until none is left.
    fn drain_one(&mut self) -> Option<HeldFrame> {
        None
    }
    /// A frame whose commit failed, to be committed again first.
    fn put_back(&mut self, _f: HeldFrame) {}
    /// Frames the commits run behind the newest frame.
    fn latency_frames(&self) -> usize {
        0
    }
    /// Whether it weighs the tracks' TDOA rates (the gates' [`Rates`]).
    fn needs_rates(&self) -> bool {
        false
    }
    /// Pair `c.index`'s usable peaks of the committed frame `now` (their TDOAs) to the tracks:
    /// each track's peak index.
    fn assign_pair(
        &mut self,
        c: &PairSettings,
        rows: &[Row],
        now: &TdoaMeasurement,
        peaks: &[Option<f32>],
    ) -> Vec<Option<usize>>;
    /// Multi-frame assignment: pair assignments solved over the window, those where it chose
    /// otherwise than the frame alone, and those the single frame decided.
    fn window_counts(&self) -> Option<(u64, u64, u64)> {
        None
    }
}

/// Each informative pair's peaks of the frame `peaks` read, to the tracks (into each track's
/// `assigned`), by `a`; the pair timing `hop_s` and gate half-width `gate_sigmas`.
pub fn assign_frame(
    a: &mut dyn Associator,
    peaks: &PeaksModel,
    tracks: &mut [Track],
    hop_s: f64,
    gate_sigmas: f32,
) {
    let pairs = peaks.pairs();
    for t in tracks.iter_mut() {
        t.assigned = vec![None; pairs.len()];
    }
    for (pi, pair) in pairs.iter().enumerate() {
        if !peaks.informative(pi) {
            continue;
        }
        let c = PairSettings {
            pair,
            index: pi,
            sample_rate_hz: peaks.sample_rate_hz(),
            hop_s,
            gate_sigmas,
        };
        let rows: Vec<Row> = tracks
            .iter()
            .map(|t| Row {
                confirmed: t.confirmed(),
                gates: &t.gates,
                rates: &t.rates,
            })
            .collect();
        let got = a.assign_pair(&c, &rows, peaks.frame(), &peaks.peaks_of(pi));
        for (t, a) in tracks.iter_mut().zip(got) {
            t.assigned[pi] = a;
        }
    }
}

/// The configuration's associator: multi-frame assignment over `mfa_lists` lists, or GNN.
pub fn associator(mfa_lists: Option<usize>) -> Box<dyn Associator> {
    match mfa_lists {
        Some(lists) => Box::new(Mfa(Lookahead::new(lists))),
        None => Box::new(Gnn),
    }
}

/// Global nearest neighbour, frame by frame ([`gnn::assign_pair`]).
pub struct Gnn;

impl Associator for Gnn {
    fn assign_pair(
        &mut self,
        c: &PairSettings,
        rows: &[Row],
        _now: &TdoaMeasurement,
        peaks: &[Option<f32>],
    ) -> Vec<Option<usize>> {
        let rows: Vec<(bool, &Gates)> = rows.iter().map(|r| (r.confirmed, r.gates)).collect();
        gnn::assign_pair(&rows, c.index, peaks, c.gate_sigmas)
    }
}

/// Multi-frame assignment over the frames it holds ([`mfa::lookahead`]).
pub struct Mfa(Lookahead);

impl Associator for Mfa {
    fn holds_frames(&self) -> bool {
        true
    }

    fn hold(&mut self, f: HeldFrame) -> Option<HeldFrame> {
        self.0.push(f)
    }

    fn drain_one(&mut self) -> Option<HeldFrame> {
        self.0.drain_one()
    }

    fn put_back(&mut self, f: HeldFrame) {
        self.0.put_back(f);
    }

    fn latency_frames(&self) -> usize {
        self.0.latency_frames()
    }

    fn needs_rates(&self) -> bool {
        true
    }

    fn assign_pair(
        &mut self,
        c: &PairSettings,
        rows: &[Row],
        now: &TdoaMeasurement,
        peaks: &[Option<f32>],
    ) -> Vec<Option<usize>> {
        let la = &mut self.0;
        let (got, solved, changed) = assign_pair_over_window(c, rows, now, peaks, la.later());
        if solved {
            la.solved += 1;
        } else {
            la.fallbacks += 1;
        }
        la.changed += u64::from(changed);
        got
    }

    fn window_counts(&self) -> Option<(u64, u64, u64)> {
        Some((self.0.solved, self.0.changed, self.0.fallbacks))
    }
}
