//! Kalman filters over many tracks at once (the Kalman issue): [`bank`], a batched linear
//! filter bank in structure-of-arrays f32, the CPU path of the kernel family a CUDA twin will
//! mirror; [`imm`], the interacting multiple model estimator over linear models (f64, one
//! track).

pub mod bank;
pub mod imm;
