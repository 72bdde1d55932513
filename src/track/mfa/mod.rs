//! Multi-frame assignment (MFA): the pieces of the sliding-window S-D assignment of the Kalman
//! issue that stand alone — the candidate cost ([`cost`]) — over the solver in
//! [`crate::math::sd_assign`]. Its place beside GNN in the tracker is still to come.

pub mod cost;
