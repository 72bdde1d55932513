//! Motion models: the kinds, their parameters and how a particle's model is chosen each step;
//! [`models`] moves one particle (or a slice of them) by a model, as `kernels/pf.cu` does;
//! [`steps`] times each track's step to a frame.

pub mod models;
pub mod steps;

use serde::{Deserialize, Serialize};

/// How a particle's motion model is chosen each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelSelection {
    /// Jump-Markov: every particle carries a model index that switches by the transition matrix.
    #[default]
    Markov,
    /// The source paper's rule: propagate every particle under every model and keep the model
    /// whose mean predicted TDOAs are closest to the measured ones.
    Nearest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// Constant velocity with white acceleration noise.
    Cv,
    /// Coordinated turn in the horizontal plane; turn rate is a random walk.
    Ct,
    /// Near-static: velocity decays to zero, position diffuses slowly.
    Static,
}

/// Most motion models a filter supports (sizes fixed arrays on both backends).
pub const MAX_MODELS: usize = 16;
/// State components per particle: position (3), velocity (3), turn rate (1).
pub const STATE_DIM: usize = 7;

/// One motion model, resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MotionModel {
    pub kind: ModelKind,
    pub accel_std: f32,
    pub turn_rate_std: f32,
    pub velocity_decay_s: f32,
}
