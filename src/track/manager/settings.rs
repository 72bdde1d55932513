//! What the track manager is built from and what it counts.

use std::collections::BTreeMap;

use crate::dsp::geometry::{ArrayGeometry, Pair};
use crate::track::logic::judge::LogicSettings;
use crate::track::measure::peaks::PeaksSettings;

/// What the track manager needs to know besides its filter bank: the array, the pairs and
/// peaks of the measurement, the search volume, and its births, confirmation and deletion.
#[derive(Debug, Clone)]
pub struct ManagerSettings {
    pub geometry: ArrayGeometry,
    /// Search volume (lower and upper corners, metres); births outside it are refused.
    pub bounds: Option<([f64; 3], [f64; 3])>,
    /// The peaks: pairs, peaks per pair, sample rate, detection probability, noise level.
    pub peaks: PeaksSettings,
    /// Seconds between frames.
    pub hop_s: f64,
    /// Consecutive agreeing multilateration fixes needed to propose a track.
    pub init_frames: usize,
    pub max_tracks: usize,
    /// Fastest expected source, m/s.
    pub max_speed_m_s: f64,
    /// A gate's half-width, in its spreads.
    pub gate_sigmas: f32,
    /// Confirmation and deletion.
    pub logic: LogicSettings,
    /// A turning array (`array.heading_input`): tracks are turned with it, and in line mode
    /// with a plane each gets a mirror twin ([`crate::track::initiate::mirror`]).
    pub turning: bool,
    /// Multi-frame assignment over this many lists (the tracks and S - 1 frames); None:
    /// global nearest neighbour frame by frame.
    pub mfa_lists: Option<usize>,
}

impl ManagerSettings {
    pub fn pairs(&self) -> &[Pair] {
        &self.peaks.pairs
    }
}

/// The counters the status stream and the replay summary report.
#[derive(Debug, Clone, Default)]
pub struct ManagerCounts {
    /// Frames in which some pair was informative.
    pub informative_frames: u64,
    pub births: u64,
    pub deletions: u64,
    /// Track steps whose likelihood was tempered (β < 1).
    pub tempered_steps: u64,
    /// Filter steps launched ahead of their frame's measurement
    /// ([`crate::track::manager::TrackManager::prepare`]), and of those the ones whose device
    /// built the measurement from the correlator's peaks.
    pub prepared_steps: u64,
    pub device_built_steps: u64,
    /// Frames without a confirmed track, by why.
    pub no_track: BTreeMap<&'static str, u64>,
    /// Frames of a turning array that came without a heading (the last one was kept).
    pub heading_missing_frames: u64,
    /// Wall time spent in the filter bank's steps, for the replay summary's split of the
    /// processing time.
    pub filter_wall: std::time::Duration,
}
