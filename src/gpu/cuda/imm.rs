//! The IMM estimator over the batched bank on the GPU (`kernels/imm.cu`, one thread per track):
//! every mode's state, covariance and probability stay resident on the device in the CPU twin's
//! layout ([`crate::track::kalman::imm_bank`]); a step uploads the measurements, launches once
//! and reads back the count of singular tracks; the combined estimates and mode probabilities
//! come back only when asked for.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::{Gpu, err};
use crate::track::kalman::bank::{BankError, length};
use crate::track::kalman::imm_bank::{ImmArrays, ImmBankModel, ImmFilterBank, start_arrays};

/// The (n, m) sizes `kernels/imm.cu` is built for.
pub const IMM_SIZES: [(usize, usize); 3] = [(2, 1), (4, 2), (6, 3)];

/// T tracks' IMM states resident on the GPU.
pub struct CudaImmBank {
    /// Keeps the GPU (context and kernels) for as long as the bank lives.
    _gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    kernel: CudaFunction,
    n: usize,
    m: usize,
    modes: usize,
    tracks: usize,
    model: CudaSlice<f32>,
    x: CudaSlice<f32>,
    p: CudaSlice<f32>,
    mu: CudaSlice<f32>,
    z: CudaSlice<f32>,
    xc: CudaSlice<f32>,
    pc: CudaSlice<f32>,
    singular: CudaSlice<u32>,
}

impl CudaImmBank {
    /// `tracks` tracks of `model`, every mode at `x0` (n) and `p0` (n×n), probabilities `mu0`.
    pub fn new(
        gpu: Arc<Gpu>,
        model: &ImmBankModel,
        tracks: usize,
        x0: &[f32],
        p0: &[f32],
        mu0: &[f32],
    ) -> Result<Self, BankError> {
        let (x, p, mu) = start_arrays(model, tracks, x0, p0, mu0)?;
        let (n, m, modes) = (model.n(), model.m(), model.modes());
        if !IMM_SIZES.contains(&(n, m)) {
            return Err(BankError::Model(format!(
                "the GPU's IMM bank takes (n, m) of {IMM_SIZES:?}, not ({n}, {m}) (use the CPU \
                 bank)"
            )));
        }
        if tracks == 0 || tracks > u32::MAX as usize {
            return Err(BankError::Model(format!(
                "{tracks} tracks (use 1 to {})",
                u32::MAX
            )));
        }
        let s = gpu
            .stream
            .fork()
            .map_err(err("creating the IMM bank's stream"))?;
        let alloc = |len: usize| {
            s.alloc_zeros::<f32>(len)
                .map_err(err("allocating the IMM bank"))
        };
        let mut bank = Self {
            kernel: gpu.function(&format!("imm_bank_{n}_{m}"))?,
            n,
            m,
            modes,
            tracks,
            model: s
                .clone_htod(&model.packed())
                .map_err(err("copying the IMM models"))?,
            x: alloc(modes * n * tracks)?,
            p: alloc(modes * n * n * tracks)?,
            mu: alloc(modes * tracks)?,
            z: alloc(m * tracks)?,
            xc: alloc(n * tracks)?,
            pc: alloc(n * n * tracks)?,
            singular: s
                .alloc_zeros::<u32>(1)
                .map_err(err("allocating the IMM bank"))?,
            stream: s,
            _gpu: gpu,
        };
        bank.load(&x, &p, &mu)?;
        Ok(bank)
    }

    /// Upload the measurements (m × T) for the next step.
    pub fn put_measurements(&mut self, z: &[f32]) -> Result<(), BankError> {
        length("z", z.len(), self.m * self.tracks)?;
        self.stream
            .memcpy_htod(z, &mut self.z)
            .map_err(err("copying the measurements"))?;
        Ok(())
    }

    /// Queue one step (the measurements already uploaded) without waiting.
    pub fn enqueue(&mut self) -> Result<(), BankError> {
        let s = self.stream.clone();
        let block = crate::gpu::KF_BLOCK;
        let cfg = LaunchConfig {
            grid_dim: ((self.tracks as u32).div_ceil(block), 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        let (modes, tracks) = (self.modes as i32, self.tracks as u32);
        let mut b = s.launch_builder(&self.kernel);
        b.arg(&self.model)
            .arg(&modes)
            .arg(&tracks)
            .arg(&mut self.x)
            .arg(&mut self.p)
            .arg(&mut self.mu)
            .arg(&self.z)
            .arg(&mut self.xc)
            .arg(&mut self.pc)
            .arg(&mut self.singular);
        // SAFETY: the arguments match imm_bank_N_M's signature for this bank's n and m; the
        // model holds `modes` packed models and the r×r Markov matrix (checked by
        // `start_arrays`); x, p, mu, z, xc and pc hold r·n, r·n·n, r, m, n and n·n values per
        // track, and the grid covers `tracks` threads (the rest return at once).
        unsafe { b.launch(cfg) }.map_err(err("imm_bank"))?;
        Ok(())
    }

    /// The stream the bank's work is queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Copy a device array back.
    fn fetch(&self, from: &CudaSlice<f32>, len: usize) -> Result<Vec<f32>, BankError> {
        let mut v = vec![0.0f32; len];
        self.stream
            .memcpy_dtoh(from, &mut v)
            .map_err(err("reading the IMM bank"))?;
        self.stream
            .synchronize()
            .map_err(err("reading the IMM bank"))?;
        Ok(v)
    }
}

impl ImmFilterBank for CudaImmBank {
    fn backend(&self) -> &'static str {
        "cuda"
    }

    fn tracks(&self) -> usize {
        self.tracks
    }

    fn load(&mut self, x: &[f32], p: &[f32], mu: &[f32]) -> Result<(), BankError> {
        let (n, r, t) = (self.n, self.modes, self.tracks);
        length("x", x.len(), r * n * t)?;
        length("p", p.len(), r * n * n * t)?;
        length("mu", mu.len(), r * t)?;
        let s = self.stream.clone();
        s.memcpy_htod(x, &mut self.x)
            .map_err(err("copying the states"))?;
        s.memcpy_htod(p, &mut self.p)
            .map_err(err("copying the covariances"))?;
        s.memcpy_htod(mu, &mut self.mu)
            .map_err(err("copying the mode probabilities"))?;
        s.synchronize().map_err(err("loading the IMM bank"))?;
        Ok(())
    }

    fn read(&mut self) -> Result<ImmArrays, BankError> {
        let (n, r, t) = (self.n, self.modes, self.tracks);
        Ok((
            self.fetch(&self.x, r * n * t)?,
            self.fetch(&self.p, r * n * n * t)?,
            self.fetch(&self.mu, r * t)?,
        ))
    }

    fn step(&mut self, z: &[f32]) -> Result<usize, BankError> {
        self.put_measurements(z)?;
        let s = self.stream.clone();
        s.memset_zeros(&mut self.singular)
            .map_err(err("clearing the count"))?;
        self.enqueue()?;
        let mut count = [0u32];
        s.memcpy_dtoh(&self.singular, &mut count)
            .map_err(err("reading the count"))?;
        s.synchronize().map_err(err("imm_bank"))?;
        Ok(count[0] as usize)
    }

    fn estimates(&mut self) -> Result<(Vec<f32>, Vec<f32>), BankError> {
        let (n, r, t) = (self.n, self.modes, self.tracks);
        Ok((self.fetch(&self.xc, n * t)?, self.fetch(&self.mu, r * t)?))
    }

    fn covariances(&mut self) -> Result<Vec<f32>, BankError> {
        self.fetch(&self.pc, self.n * self.n * self.tracks)
    }
}
