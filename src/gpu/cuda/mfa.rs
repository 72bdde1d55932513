//! The batched (track, measurement) costs of multi-frame assignment on the GPU
//! (`kernels/mfa.cu`, one thread per pair, f64), the twin of
//! [`crate::track::mfa::pair_costs::pair_costs`].

use std::sync::Arc;

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{Gpu, err};
use crate::error::BackendError;
use crate::track::mfa::pair_costs::{Consts, PairCostInput};

/// Threads per block of `mfa_pair_costs`.
const BLOCK: u32 = 128;

/// Every pair's cost (`tracks × measurements`, +∞ outside the gate), computed on `gpu`'s own
/// stream; the input is checked first.
pub fn pair_costs(gpu: &Arc<Gpu>, inp: &PairCostInput) -> Result<Vec<f64>, BackendError> {
    inp.check()
        .map_err(|e| BackendError::new("cuda", format!("MFA pair costs: {e}")))?;
    let (tracks, meas) = (inp.tracks(), inp.measurements());
    let pairs = tracks * meas;
    if pairs == 0 {
        return Ok(Vec::new());
    }
    if pairs > (u32::MAX as usize) * (BLOCK as usize)
        || tracks > u32::MAX as usize
        || meas > u32::MAX as usize
    {
        return Err(BackendError::new(
            "cuda",
            format!("MFA pair costs: {tracks} x {meas} pairs is too many for one launch"),
        ));
    }
    let s = gpu
        .stream
        .fork()
        .map_err(err("creating the costs' stream"))?;
    let kernel = gpu.function("mfa_pair_costs")?;
    let up = |v: &[f64]| s.clone_htod(v).map_err(err("copying the MFA inputs"));
    let (x, p, h, r, z) = (
        up(&inp.x)?,
        up(&inp.p)?,
        up(&inp.h)?,
        up(&inp.r)?,
        up(&inp.z)?,
    );
    let mut cost = s
        .alloc_zeros::<f64>(pairs)
        .map_err(err("allocating the MFA costs"))?;
    let k = Consts::of(inp);
    let (n, m) = (inp.n as i32, inp.m as i32);
    let (tracks_u, meas_u) = (tracks as u32, meas as u32);
    let cfg = LaunchConfig {
        grid_dim: ((pairs as u64).div_ceil(u64::from(BLOCK)) as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = s.launch_builder(&kernel);
    b.arg(&x)
        .arg(&p)
        .arg(&h)
        .arg(&r)
        .arg(&z)
        .arg(&n)
        .arg(&m)
        .arg(&tracks_u)
        .arg(&meas_u)
        .arg(&inp.gate_chi2)
        .arg(&k.ln_pd)
        .arg(&k.ln_lambda)
        .arg(&k.ln_two_pi)
        .arg(&mut cost);
    // SAFETY: the arguments match mfa_pair_costs' signature; `check` holds n ≤ 6, m ≤ 3 (the
    // kernel's arrays) and x, P, H, R and z to their sizes; the grid covers tracks × meas
    // threads and the rest return at once.
    unsafe { b.launch(cfg) }.map_err(err("mfa_pair_costs"))?;
    let out = s.clone_dtoh(&cost).map_err(err("reading the MFA costs"))?;
    s.synchronize().map_err(err("mfa_pair_costs"))?;
    Ok(out)
}
