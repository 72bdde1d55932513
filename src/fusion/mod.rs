//! Several arrays, one picture (`sonotrack fuse`): node tracks from MQTT brought into one
//! east-north-up frame ([`report`]), associated across nodes with stable fused ids and fused by
//! covariance intersection ([`engine`], [`ci`]). The service that runs it over a broker is
//! [`crate::pipeline::fuse`].

pub mod ci;
pub mod engine;
pub mod report;
