//! The batched Kalman filter bank on the GPU (`kernels/kf.cu`, one thread per filter, one
//! kernel per model size): the states and covariances stay resident on the device in the CPU
//! twin's structure-of-arrays layout ([`crate::track::kalman::bank`]); each stage is one
//! launch, and only the measurements go up and the estimates and the count of singular updates
//! come back.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::{Gpu, err};
use crate::error::BackendError;
use crate::track::kalman::bank::{BankError, BankModel, FilterBank, length, tdoa_ready};
use crate::track::kalman::tdoa::{TdoaGeometry, Unscented, UtWeights};

/// The stages of one launch (`kernels/kf.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Predict = 1,
    Update = 2,
    Both = 3,
}

/// M filters resident on the GPU.
pub struct CudaKalmanBank {
    /// Keeps the GPU (context and kernels) for as long as the bank lives.
    gpu: Arc<Gpu>,
    /// The bank's own stream.
    stream: Arc<CudaStream>,
    kernel: CudaFunction,
    n: usize,
    m: usize,
    filters: usize,
    model: CudaSlice<f32>,
    x: CudaSlice<f32>,
    p: CudaSlice<f32>,
    z: CudaSlice<f32>,
    singular: CudaSlice<u32>,
    /// Threads per block.
    block: u32,
    /// Bytes copied between host and device so far.
    moved: u64,
    /// The extended filter's geometry on the device, uploaded at its first step and again only
    /// when it changes.
    tdoa: Option<TdoaOnDevice>,
}

/// A TDOA geometry on the device, with its measurement buffer.
struct TdoaOnDevice {
    geo: TdoaGeometry,
    kernel: CudaFunction,
    /// The unscented step's kernel.
    unscented: CudaFunction,
    sensors: CudaSlice<f32>,
    pairs: CudaSlice<u32>,
    z: CudaSlice<f32>,
}

impl From<BackendError> for BankError {
    fn from(e: BackendError) -> Self {
        BankError::Backend(e.what)
    }
}

impl CudaKalmanBank {
    /// A bank of `filters` filters of `model`, each starting at `x0` (n) and `p0` (n×n).
    pub fn new(
        gpu: Arc<Gpu>,
        model: &BankModel,
        filters: usize,
        x0: &[f32],
        p0: &[f32],
    ) -> Result<Self, BankError> {
        model.check()?;
        let (n, m) = (model.n, model.m);
        length("x0", x0.len(), n)?;
        length("p0", p0.len(), n * n)?;
        if filters == 0 || filters > u32::MAX as usize {
            return Err(BankError::Model(format!(
                "{filters} filters (use 1 to {})",
                u32::MAX
            )));
        }
        let s = gpu
            .stream
            .fork()
            .map_err(err("creating the bank's stream"))?;
        let kernel = gpu.function(&format!("kf_bank_{n}_{m}"))?;
        let alloc = |len: usize| {
            s.alloc_zeros::<f32>(len)
                .map_err(err("allocating the bank"))
        };
        let mut bank = Self {
            kernel,
            n,
            m,
            filters,
            model: s
                .clone_htod(&model.packed())
                .map_err(err("copying the model"))?,
            x: alloc(n * filters)?,
            p: alloc(n * n * filters)?,
            z: alloc(m * filters)?,
            singular: s
                .alloc_zeros::<u32>(1)
                .map_err(err("allocating the bank"))?,
            block: crate::gpu::KF_BLOCK,
            stream: s,
            moved: 0,
            tdoa: None,
            gpu,
        };
        let (x, p) = crate::track::kalman::bank::replicated(x0, p0, filters);
        bank.load(&x, &p)?;
        Ok(bank)
    }

    /// The largest block the kernel can run with (its registers decide) and its registers per
    /// thread.
    pub fn limits(&self) -> Result<(u32, u32), BankError> {
        use cudarc::driver::sys::CUfunction_attribute_enum as A;
        let max = self
            .kernel
            .get_attribute(A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
            .map_err(err("reading kf_bank's limits"))?;
        let regs = self
            .kernel
            .num_regs()
            .map_err(err("reading kf_bank's registers"))?;
        Ok((max.max(0) as u32, regs.max(0) as u32))
    }

    /// Threads per block: a multiple of 32 up to [`CudaKalmanBank::limits`]' largest.
    pub fn set_block(&mut self, block: u32) -> Result<(), BankError> {
        let (max, regs) = self.limits()?;
        if block == 0 || block % 32 != 0 || block > max {
            return Err(BankError::Model(format!(
                "block of {block} threads (use a multiple of 32 up to {max}: kf_bank uses {regs} \
                 registers a thread)"
            )));
        }
        self.block = block;
        Ok(())
    }

    /// Upload the measurements (m × M) for the next update.
    pub fn put_measurements(&mut self, z: &[f32]) -> Result<(), BankError> {
        length("z", z.len(), self.m * self.filters)?;
        self.stream
            .memcpy_htod(z, &mut self.z)
            .map_err(err("copying the measurements"))?;
        self.moved += 4 * z.len() as u64;
        Ok(())
    }

    /// Queue one launch of `stage` on the GPU's stream (the measurements already uploaded),
    /// without waiting.
    pub fn enqueue(&mut self, stage: Stage) -> Result<(), BankError> {
        let s = self.stream.clone();
        let cfg = self.launch_config();
        let (filters, stage) = (self.filters as u32, stage as i32);
        let mut b = s.launch_builder(&self.kernel);
        b.arg(&self.model)
            .arg(&filters)
            .arg(&stage)
            .arg(&mut self.x)
            .arg(&mut self.p)
            .arg(&self.z)
            .arg(&mut self.singular);
        // SAFETY: the arguments match kf_bank_N_M's signature (this bank's n and m); x, p and z
        // hold n, n·n and m values per filter and the grid covers `filters` threads (the rest
        // return at once).
        unsafe { b.launch(cfg) }.map_err(err("kf_bank"))?;
        Ok(())
    }

    /// One thread per filter, in blocks of `self.block`.
    fn launch_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: ((self.filters as u32).div_ceil(self.block), 1, 1),
            block_dim: (self.block, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Launch `stage`, wait, and return the count of singular updates.
    fn run(&mut self, stage: Stage) -> Result<usize, BankError> {
        self.counted(|bank| bank.enqueue(stage))
    }

    /// Clear the singular count, queue `launch`, wait, and return the count.
    fn counted(
        &mut self,
        launch: impl FnOnce(&mut Self) -> Result<(), BankError>,
    ) -> Result<usize, BankError> {
        let s = self.stream.clone();
        s.memset_zeros(&mut self.singular)
            .map_err(err("clearing the count"))?;
        launch(self)?;
        let mut count = [0u32];
        s.memcpy_dtoh(&self.singular, &mut count)
            .map_err(err("reading the count"))?;
        s.synchronize().map_err(err("kf_bank"))?;
        self.moved += 4;
        Ok(count[0] as usize)
    }

    /// The geometry on the device (uploaded when it differs from the last step's).
    fn tdoa_on_device(&mut self, geo: &TdoaGeometry) -> Result<(), BankError> {
        if self.tdoa.as_ref().is_some_and(|t| t.geo == *geo) {
            return Ok(());
        }
        let s = self.stream.clone();
        let sensors = s
            .clone_htod(&geo.packed_sensors())
            .map_err(err("copying the sensors"))?;
        let pairs = s
            .clone_htod(&geo.packed_pairs())
            .map_err(err("copying the pairs"))?;
        let z = s
            .alloc_zeros::<f32>(geo.pairs.len() * self.filters)
            .map_err(err("allocating the range differences"))?;
        self.moved += 4 * (3 * geo.sensors.len() + 2 * geo.pairs.len()) as u64;
        self.tdoa = Some(TdoaOnDevice {
            geo: geo.clone(),
            kernel: self.gpu.function("kf_tdoa_6")?,
            unscented: self.gpu.function("kf_tdoa_ukf_6")?,
            sensors,
            pairs,
            z,
        });
        Ok(())
    }

    /// Queue one TDOA launch with the geometry and range differences on the device:
    /// `kf_tdoa_6` (extended) or, given the sigma-point weights, `kf_tdoa_ukf_6`.
    fn enqueue_tdoa(&mut self, ut: Option<UtWeights>) -> Result<(), BankError> {
        let cfg = self.launch_config();
        let s = self.stream.clone();
        let Some(t) = self.tdoa.as_ref() else {
            return Err(BankError::Backend(
                "the TDOA geometry is not on the device".into(),
            ));
        };
        let (filters, n_pairs, r) = (self.filters as u32, t.geo.pairs.len() as u32, t.geo.r);
        let mut b = s.launch_builder(match ut {
            None => &t.kernel,
            Some(_) => &t.unscented,
        });
        b.arg(&self.model)
            .arg(&filters)
            .arg(&t.sensors)
            .arg(&t.pairs)
            .arg(&n_pairs)
            .arg(&r);
        if let Some(w) = ut.as_ref() {
            b.arg(&w.gamma).arg(&w.w0m).arg(&w.w0c).arg(&w.wi);
        }
        b.arg(&mut self.x)
            .arg(&mut self.p)
            .arg(&t.z)
            .arg(&mut self.singular);
        // SAFETY: the arguments match kf_tdoa_6's signature, or kf_tdoa_ukf_6's (four more
        // floats after r) when `ut` is given; the bank has 6 states (checked by `tdoa_ready`),
        // so x and p hold 6 and 36 values per filter; z holds n_pairs values per filter, and
        // the pairs index the uploaded sensors (checked by `TdoaGeometry::check`).
        unsafe { b.launch(cfg) }.map_err(err(if ut.is_some() {
            "kf_tdoa_ukf_6"
        } else {
            "kf_tdoa_6"
        }))?;
        Ok(())
    }

    /// A TDOA step: the geometry and the range differences up, one launch, the count back.
    fn tdoa_step(
        &mut self,
        geo: &TdoaGeometry,
        ut: Option<UtWeights>,
        z: &[f32],
    ) -> Result<usize, BankError> {
        tdoa_ready(self.n, geo)?;
        length("z", z.len(), geo.pairs.len() * self.filters)?;
        self.tdoa_on_device(geo)?;
        let s = self.stream.clone();
        let Some(t) = self.tdoa.as_mut() else {
            return Err(BankError::Backend(
                "the TDOA geometry is not on the device".into(),
            ));
        };
        s.memcpy_htod(z, &mut t.z)
            .map_err(err("copying the range differences"))?;
        self.moved += 4 * z.len() as u64;
        self.counted(|bank| bank.enqueue_tdoa(ut))
    }

    /// The stream the bank's work is queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Wait for everything queued.
    pub fn synchronize(&self) -> Result<(), BankError> {
        self.stream.synchronize().map_err(err("kf_bank"))?;
        Ok(())
    }
}

impl FilterBank for CudaKalmanBank {
    fn backend(&self) -> &'static str {
        "cuda"
    }

    fn filters(&self) -> usize {
        self.filters
    }

    fn load(&mut self, x: &[f32], p: &[f32]) -> Result<(), BankError> {
        length("x", x.len(), self.n * self.filters)?;
        length("p", p.len(), self.n * self.n * self.filters)?;
        let s = self.stream.clone();
        s.memcpy_htod(x, &mut self.x)
            .map_err(err("copying the states"))?;
        s.memcpy_htod(p, &mut self.p)
            .map_err(err("copying the covariances"))?;
        self.moved += 4 * (x.len() + p.len()) as u64;
        self.synchronize()
    }

    fn read(&mut self) -> Result<(Vec<f32>, Vec<f32>), BankError> {
        let s = self.stream.clone();
        let mut x = vec![0.0f32; self.n * self.filters];
        let mut p = vec![0.0f32; self.n * self.n * self.filters];
        s.memcpy_dtoh(&self.x, &mut x)
            .map_err(err("reading the states"))?;
        s.memcpy_dtoh(&self.p, &mut p)
            .map_err(err("reading the covariances"))?;
        self.synchronize()?;
        self.moved += 4 * (x.len() + p.len()) as u64;
        Ok((x, p))
    }

    fn states(&mut self) -> Result<Vec<f32>, BankError> {
        let mut x = vec![0.0f32; self.n * self.filters];
        self.stream
            .memcpy_dtoh(&self.x, &mut x)
            .map_err(err("reading the states"))?;
        self.synchronize()?;
        self.moved += 4 * x.len() as u64;
        Ok(x)
    }

    fn bytes_moved(&self) -> u64 {
        self.moved
    }

    fn predict(&mut self) -> Result<(), BankError> {
        self.run(Stage::Predict).map(|_| ())
    }

    fn update(&mut self, z: &[f32]) -> Result<usize, BankError> {
        self.put_measurements(z)?;
        self.run(Stage::Update)
    }

    fn step(&mut self, z: &[f32]) -> Result<usize, BankError> {
        self.put_measurements(z)?;
        self.run(Stage::Both)
    }

    fn step_tdoa(&mut self, geo: &TdoaGeometry, z: &[f32]) -> Result<usize, BankError> {
        self.tdoa_step(geo, None, z)
    }

    fn step_tdoa_unscented(
        &mut self,
        geo: &TdoaGeometry,
        ut: &Unscented,
        z: &[f32],
    ) -> Result<usize, BankError> {
        let w = ut.weights(self.n)?;
        self.tdoa_step(geo, Some(w), z)
    }
}
