//! Kalman filters over many tracks at once (the Kalman issue): [`bank`], a batched linear
//! filter bank in structure-of-arrays f32 (the CPU twin of `kernels/kf.cu`, and the
//! [`bank::FilterBank`] both backends implement); [`crossover`], the measured bank size from
//! which the GPU serves a bank; [`imm`], the interacting multiple model estimator over linear
//! models (f64, one track); [`imm_bank`], the same estimator over the batched bank (f32, many
//! tracks, the CPU twin of `kernels/imm.cu`); [`imm_filter`], the IMM over the tracker's motion models as the
//! tracker's filter (`tracker.filter = "imm"`), with [`cubature`], its sigma-point rule;
//! [`tdoa`], the range-difference measurement of the bank's extended filter; [`unscented`], the
//! bank's unscented filter over the same measurement.

pub mod bank;
pub mod crossover;
pub mod cubature;
pub mod imm;
pub mod imm_bank;
pub mod imm_filter;
pub mod tdoa;
pub mod unscented;
