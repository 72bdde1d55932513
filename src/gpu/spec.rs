//! What a GPU can do, for scaling figures measured on one GPU to another.

/// What a GPU can do, for scaling figures from one to another.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSpec {
    pub name: String,
    pub sms: u32,
    /// FP32 lanes per SM.
    pub lanes_per_sm: u32,
    /// Peak GPU clock, GHz.
    pub clock_ghz: f64,
    /// Memory bandwidth by specification, GB/s.
    pub memory_gb_s: f64,
}

impl GpuSpec {
    /// FP32 lane-cycles per nanosecond: SMs × lanes × clock.
    pub fn lane_cycles(&self) -> f64 {
        f64::from(self.sms) * f64::from(self.lanes_per_sm) * self.clock_ghz
    }
}

/// FP32 lanes per SM by compute capability (CUDA programming guide, arithmetic throughput).
pub fn fp32_lanes_per_sm(major: i32, minor: i32) -> u32 {
    match (major, minor) {
        (6, 0) | (7, _) | (8, 0) => 64,
        _ => 128,
    }
}
