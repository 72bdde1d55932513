//! One track: its id, the measurement model that serves it, and each model's part of it. On the
//! peaks: its filter slot, estimate, this frame's gates and assigned peaks and the state of its
//! confirmation and deletion logic. On the curves: its follower (a Bernoulli filter, whose
//! existence confirms and ends the track there).

use crate::track::Estimate;
use crate::track::filter::bernoulli::followers::Follower;
use crate::track::gate::{Gates, Rates};
use crate::track::initiate::mirror::Twin;
use crate::track::logic::judge::LogicState;

#[derive(Debug, Clone)]
pub struct Track {
    pub id: u64,
    /// Its slot in the filter bank.
    pub slot: u32,
    pub born_seq: u64,
    pub t_state_s: f64,
    pub est: Estimate,
    /// This frame's gates (from the estimate predicted to the frame), and per pair the index
    /// of the peak assigned to the track.
    pub gates: Gates,
    /// Multi-frame assignment: how each pair's TDOA moves over the next frames.
    pub rates: Rates,
    pub assigned: Vec<Option<usize>>,
    /// Hits, misses, scans and the clocks that delete it.
    pub logic: LogicState,
    /// A turning array: its heading at the track's state (degrees), which the next step
    /// turns the particles from.
    pub heading_deg: Option<f64>,
    /// A turning line array: the track's mirror hypothesis, until the turn decides.
    pub twin: Option<Twin>,
    /// Whether the twin's verdict is in (without a twin, the mirror stays possible).
    pub side_decided: bool,
    /// Its follower on the curves (`tracker.measurement` "curves" or "auto"), where it has one.
    pub curves: Option<Follower>,
}

/// The slot of a track that holds none in the filter bank (one on the curves alone).
pub const NO_SLOT: u32 = u32::MAX;

/// Which measurement model serves a track.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The peaks path: its particle filter on the TDOA peaks, its M-of-N logic.
    Peaks,
    /// Its follower on the curves: the peaks path holds no filter slot for it (a track the
    /// curves search found, or one the peaks lost that the curves still hold), or, in `auto`,
    /// its peaks have coasted long enough for the curves to report it.
    Curves,
}

impl Track {
    /// Track `id`, born in frame `born_seq`, with every part empty: whoever starts it fills
    /// in the parts of the model that serves it.
    pub fn bare(id: u64, born_seq: u64) -> Self {
        Self {
            id,
            slot: NO_SLOT,
            born_seq,
            t_state_s: 0.0,
            est: Estimate::new(0),
            gates: Gates::default(),
            rates: Rates::default(),
            assigned: Vec::new(),
            logic: LogicState::default(),
            heading_deg: None,
            twin: None,
            side_decided: true,
            curves: None,
        }
    }

    /// A track on the curves alone: follower `f`, no filter slot.
    pub fn on_curves(id: u64, born_seq: u64, f: Follower) -> Self {
        Self {
            curves: Some(f),
            ..Self::bare(id, born_seq)
        }
    }

    /// The model whose view made its last report.
    pub fn served(&self) -> Served {
        match &self.curves {
            Some(f) if self.holds_no_slot() || f.reporting => Served::Curves,
            _ => Served::Peaks,
        }
    }

    /// Confirmed: by its M-of-N logic on the peaks, or by its existence on the curves alone.
    pub fn confirmed(&self) -> bool {
        match &self.curves {
            Some(f) if self.holds_no_slot() => f.confirmed,
            _ => self.logic.history.confirmed,
        }
    }

    /// On the curves alone: the filter bank holds no slot for it.
    fn holds_no_slot(&self) -> bool {
        self.slot == NO_SLOT
    }

    /// Its estimate's position (a direction, scaled by 1 + the inverse range, in the angular
    /// modes).
    pub fn position(&self) -> [f64; 3] {
        [self.est.mean[0], self.est.mean[1], self.est.mean[2]]
    }
}
