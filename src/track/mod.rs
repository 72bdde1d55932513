//! Tracking, built from parts that each do one job (the vocabulary of Stone Soup; DESIGN.md,
//! "Tracker"), one folder per kind of part:
//!
//! - [`motion`]: the motion models a particle or a mode moves by;
//! - [`measure`]: what a frame says of a track's state: the TDOA peaks
//!   ([`measure::peaks`]) and the GCC curves ([`measure::curves`]), behind
//!   [`measure::MeasurementModel`];
//! - [`filter`]: the filters over all tracks at once, behind [`filter::FilterBank`]: the
//!   particle filter (CPU here, CUDA in [`crate::gpu`]), the IMM, and the Bernoulli filters of
//!   the curves;
//! - [`gate`]: each track's predicted TDOAs and their spread, which select the peaks it may take;
//! - [`associate`]: peaks to tracks, pair by pair (GNN, or multi-frame assignment);
//! - [`initiate`]: births from what no confirmed track explains (multilateration of peak sets,
//!   the curves search, mirror twins of a turning line array);
//! - [`logic`]: confirmation and deletion (M-of-N over scans, the miss window, the search
//!   volume's edge, duplicates, existence);
//! - [`smooth`]: tracks smoothed after the fact or at a fixed lag;
//!
//! and [`manager::TrackManager`], which sequences them frame by frame, with [`report`] turning
//! each track into what the outputs send.

pub mod associate;

pub mod filter;
pub mod gate;
pub mod initiate;
pub mod logic;
pub mod manager;
pub mod measure;
pub mod motion;
pub mod report;
pub mod smooth;
pub mod state;

pub use filter::{
    Estimate, FilterBank, FilterParams, LiveSource, Particles, ROUGHEN_H, ROUGHEN_RESAMPLE_H,
    TEMPER_GRID, TEMPER_MIN_ESS, TrackInit, TrackStep,
};
pub use measure::peaks::TdoaMeasurement;
pub use motion::{MAX_MODELS, ModelKind, ModelSelection, MotionModel, STATE_DIM};

use serde::{Deserialize, Serialize};

/// Tracking mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TrackMode {
    /// Position and velocity in 3-D (needs four or more non-coplanar sensors).
    #[default]
    #[serde(rename = "3d")]
    ThreeD,
    /// Direction only (azimuth, elevation), for compact arrays whose range is unobservable.
    #[serde(rename = "direction")]
    Direction,
    /// A line array: the angle between the source and the array's axis (a cone of directions)
    /// and, near enough, the range. Tracked as a direction held in one half-plane through the
    /// axis (see [`LineAxes`]).
    #[serde(rename = "line")]
    Line,
}

impl TrackMode {
    /// Direction or line mode: particles hold a direction scaled by 1 + the inverse range.
    pub fn angular(self) -> bool {
        self != Self::ThreeD
    }
}

/// Line mode: the array's axis and the half-plane through it that the filter keeps its
/// directions in (`side`, a unit vector perpendicular to the axis). A line array's delays
/// depend only on a source's distance along the axis and from it, so every direction on the
/// cone about the axis fits equally; each particle is turned about the axis into this
/// half-plane after every step (see `models::fold_to_half_plane`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineAxes {
    pub axis: [f32; 3],
    pub side: [f32; 3],
    /// The sources lie in the plane of the axis and the side (`array.plane_normal`): the
    /// mirror point across the axis is then the one other place a source can be.
    pub plane: bool,
    /// A turning array (a towed line with a heading input): each particle stays on its own
    /// side of the axis (the half-plane of `side` or of `-side`) instead of being folded onto
    /// `side`, so that a track and its mirror twin can be told apart once the array turns.
    pub keep_side: bool,
}
