//! The interacting multiple model estimator as the tracker's filter (`tracker.filter = "imm"`):
//! [`imm_filter`], one cubature Kalman filter per motion model, with [`cubature`], its
//! sigma-point rule.

pub mod cubature;
pub mod imm_filter;
