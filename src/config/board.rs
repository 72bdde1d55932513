//! The `[board]` table: what a board file says about the hardware.

use serde::{Deserialize, Serialize};

/// A board description (files in `boards/`): hardware facts only, shown by `check`; it never
/// changes tracking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardConfig {
    pub name: String,
    /// CUDA architecture of the board's GPU, e.g. "sm_87"; empty for a CPU-only board.
    #[serde(default)]
    pub gpu_arch: String,
    /// JetPack release the numbers were chosen for.
    #[serde(default)]
    pub jetpack: String,
    #[serde(default)]
    pub notes: String,
    /// The board's header UART (for a serial output's `port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uart: Option<String>,
}
