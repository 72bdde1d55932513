//! Multi-frame assignment (MFA): the pieces of the sliding-window S-D assignment of the Kalman
//! issue that stand alone — the candidate cost ([`cost`]), each track's candidate tree over a
//! window of frames ([`tree`]), the batched cost of every (track, measurement) pair of a frame
//! ([`pair_costs`], with a GPU twin) and the sliding window that commits its oldest frame ([`window`],
//! over linear-Gaussian tracks) — over the solver in [`crate::math::sd_assign`] — and the
//! window of one sensor pair's peaks that the particle-filter tracker's `association = "mfa"`
//! solves ([`pair_window`]).

pub mod cost;
pub mod pair_costs;
pub mod pair_window;
pub mod tree;
pub mod window;
