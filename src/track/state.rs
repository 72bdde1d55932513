//! One track: its id and filter slot, its estimate, this frame's gates and assigned peaks, and
//! the state of its confirmation and deletion logic.

use crate::track::Estimate;
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
}

impl Track {
    pub fn confirmed(&self) -> bool {
        self.logic.history.confirmed
    }

    /// Its estimate's position (a direction, scaled by 1 + the inverse range, in the angular
    /// modes).
    pub fn position(&self) -> [f64; 3] {
        [self.est.mean[0], self.est.mean[1], self.est.mean[2]]
    }
}
