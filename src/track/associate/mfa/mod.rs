//! Multi-frame assignment (MFA) for `tracker.association = "mfa"`: the candidate cost
//! ([`cost`]), each track's candidate tree over a window of frames ([`tree`]), the S-D
//! assignment of the trees' first list ([`window`], over the solver in
//! [`crate::math::sd_assign`]) and the window of one sensor pair's peaks that the tracker solves
//! ([`pair_window`]).

pub mod cost;
pub mod lookahead;
pub mod pair_window;
pub mod tree;
pub mod window;
