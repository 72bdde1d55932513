//! Kalman filters over many tracks at once (the Kalman issue): [`bank`], a batched linear
//! filter bank in structure-of-arrays f32 (the CPU twin of `kernels/kf.cu`, and the
//! [`bank::FilterBank`] both backends implement); [`crossover`], the measured bank size from
//! which the GPU serves a bank; [`imm`], the interacting multiple model estimator over linear
//! models (f64, one track).

pub mod bank;
pub mod crossover;
pub mod imm;
