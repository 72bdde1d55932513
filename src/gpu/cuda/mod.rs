//! The CUDA backend: one context per process, shared by the correlators, the particle-filter
//! banks and the curves banks; each of those works on a stream of
//! its own, forked from the context's stream when it is made (a replay correlates the next
//! batch on a second thread while the filter steps, and two filters in one process never queue
//! work into each other's graph capture: on one shared stream that crashed the driver).
//!
//! Loading. cudarc opens libcuda, libnvrtc and libcufft at run time and *panics* when one is
//! missing, or present but lacking a symbol (an older driver than the CUDA version it was built
//! for). Every first touch of the libraries therefore runs under `catch_unwind`, and a panic
//! becomes the reason the CPU is used instead. cudarc is built for CUDA 12.2 (JetPack 6); newer
//! drivers and NVRTCs (CUDA 13 on a workstation) load fine.
//!
//! Kernels. Each `kernels/*.cu` file is a program of its own ([`programs`], the one list of
//! entry points), compiled by NVRTC the first time something needs one of its kernels (so a
//! daemon compiles only what its configuration uses) into a CUBIN for the device's own
//! architecture (sm_XY), with `--fmad=false` so device arithmetic matches the CPU twin. Each CUBIN
//! is cached on disk, keyed by the source, the options, the architecture and the NVRTC and driver
//! versions, so a restart loads it without NVRTC. Cache directory: `$SONOTRACK_CACHE_DIR`, else
//! `$CACHE_DIRECTORY` (set by systemd's `CacheDirectory=`), else `$XDG_CACHE_HOME/sonotrack`,
//! else `~/.cache/sonotrack`.

pub mod gcc;
pub mod host;
pub mod pf;
pub mod programs;
pub mod tbd;

use programs::Program;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;

use crate::error::BackendError;

/// NVRTC options; part of the cache key.
const OPTIONS: &[&str] = &[
    "--fmad=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--std=c++17",
    // Source lines in the CUBIN for profilers (ncu's source view); the code is the same.
    "-lineinfo",
];

/// A program's kernels, loaded.
struct Loaded {
    module: Arc<CudaModule>,
    /// The kernels again, for launches that cudarc's launcher cannot make (launch attributes:
    /// programmatic dependent launch and thread-block clusters, sm_90 and later); None
    /// elsewhere, or with both `SONOTRACK_NO_PDL=1` and `SONOTRACK_NO_CLUSTER=1`.
    ex: Option<DriverModule>,
}

/// A started CUDA device.
pub struct Gpu {
    /// Whether a one-frame correlation launches its kernels after the transforms early
    /// (`launch_early`; off with `SONOTRACK_NO_PDL=1`).
    pub early_launch: bool,
    /// Whether a live filter step whose tiles fit one cluster runs as a thread-block cluster
    /// (`launch_cluster`; off with `SONOTRACK_NO_CLUSTER=1`).
    pub clusters: bool,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// Each program of [`programs::PROGRAMS`], compiled (or read from the cache) and loaded the
    /// first time a kernel of it is asked for.
    programs: [OnceLock<Result<Arc<Loaded>, String>>; 3],
    /// Where compiled programs are kept.
    cache: Option<PathBuf>,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    /// Peak SM clock (kHz), and the memory's clock (kHz) and bus width (bits): for projections.
    pub clock_khz: i32,
    pub memory_clock_khz: i32,
    pub memory_bus_bits: i32,
}

impl Gpu {
    /// Kernel `name` of program `p` (compiled and loaded on first use).
    pub fn function(&self, p: &Program, name: &str) -> Result<CudaFunction, BackendError> {
        let loaded = self.loaded(p, name)?;
        loaded
            .module
            .load_function(name)
            .map_err(|e| BackendError::new("cuda", format!("kernel `{name}`: {e}")))
    }

    /// Kernel `name` of program `p` as the driver API sees it, for launches with attributes
    /// ([`launch_early`], [`launch_cluster`]); None where those are off or the second load
    /// failed.
    pub fn driver_function(
        &self,
        p: &Program,
        name: &str,
    ) -> Result<Option<DriverFunction>, BackendError> {
        match &self.loaded(p, name)?.ex {
            Some(m) => m.function(name).map(Some),
            None => Ok(None),
        }
    }

    /// Program `p`, loaded (once per process), for its kernel `name` (which its table must
    /// list).
    fn loaded(&self, p: &Program, name: &str) -> Result<Arc<Loaded>, BackendError> {
        if !p.entries.contains(&name) {
            return Err(BackendError::new(
                "cuda",
                format!(
                    "kernel `{name}` is not an entry point of kernels/{}.cu in the kernel table",
                    p.name
                ),
            ));
        }
        self.programs[p.index]
            .get_or_init(|| self.load(p).map(Arc::new))
            .clone()
            .map_err(|e| BackendError::new("cuda", e))
    }

    fn load(&self, p: &Program) -> Result<Loaded, String> {
        let (image, how) = kernels_for(p, self.compute_capability, self.cache.as_deref())
            .map_err(|e| format!("{}: kernels/{}.cu: {e}", self.name, p.name))?;
        log::info!("{}: kernels/{}.cu {how}", self.name, p.name);
        let ex = if self.early_launch || self.clusters {
            match DriverModule::load(&self.ctx, &image) {
                Ok(m) => Some(m),
                Err(e) => {
                    log::info!(
                        "{}: kernels/{}.cu launched without early launch or clusters ({e})",
                        self.name,
                        p.name
                    );
                    None
                }
            }
        } else {
            None
        };
        let module = (self.ctx)
            .load_module(Ptx::from_binary(image))
            .map_err(|e| format!("{}: cannot load kernels/{}.cu: {e}", self.name, p.name))?;
        Ok(Loaded { module, ex })
    }

    pub fn describe(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        let cache = self.cache.as_ref().map_or("not cached".into(), |d| {
            format!("cached in {}", d.display())
        });
        format!(
            "CUDA backend: {} (sm_{}{}, {} SMs); kernels compiled on first use ({cache}); early launch {}, live-step clusters {}",
            self.name,
            self.compute_capability.0,
            self.compute_capability.1,
            self.multiprocessors,
            on(self.early_launch),
            on(self.clusters)
        )
    }
}

static GPU: OnceLock<Result<Arc<Gpu>, String>> = OnceLock::new();

/// The process's GPU, started on first use; the error says why there is none.
pub fn gpu() -> Result<Arc<Gpu>, String> {
    GPU.get_or_init(|| std::panic::catch_unwind(start).unwrap_or_else(|p| Err(panic_text(&p))))
        .clone()
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    let msg = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown failure".into());
    format!("the CUDA libraries could not be used ({msg})")
}

fn start() -> Result<Arc<Gpu>, String> {
    // SAFETY: these only try to dlopen the libraries; a missing symbol panics, which the caller
    // catches.
    let (driver, nvrtc, cufft) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
            cudarc::cufft::sys::is_culib_present(),
        )
    };
    let missing: Vec<&str> = [
        (driver, "libcuda (NVIDIA driver)"),
        (nvrtc, "libnvrtc"),
        (cufft, "libcufft"),
    ]
    .iter()
    .filter(|(ok, _)| !ok)
    .map(|(_, n)| *n)
    .collect();
    if !missing.is_empty() {
        return Err(format!("{} not found", missing.join(", ")));
    }
    let ctx = CudaContext::new(0).map_err(|e| format!("no usable CUDA device: {e}"))?;
    let name = ctx.name().unwrap_or_else(|_| "CUDA device".into());
    let cc = ctx
        .compute_capability()
        .map_err(|e| format!("{name}: cannot read the compute capability: {e}"))?;
    let attr = |a| ctx.attribute(a).unwrap_or(0);
    let sms = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    let clock_khz = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    let memory_clock_khz = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    let memory_bus_bits = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    let early_launch = cc.0 >= 9 && !env_is_one("SONOTRACK_NO_PDL");
    let clusters = cc.0 >= 9 && !env_is_one("SONOTRACK_NO_CLUSTER");
    // SAFETY: the filter's device work runs on this one stream and the correlator's on a stream
    // of its own (forked from this one when it is made, so after anything queued here before);
    // the two share no buffers. The correlator's uploads of a batch's later parts run on a
    // third stream, ordered against its own by events it records and waits on itself
    // (src/gpu/cuda/gcc.rs: enqueue). So cudarc's own tracking of uses across streams is not
    // needed.
    unsafe { ctx.disable_event_tracking() };
    // A stream of our own (not the legacy default stream, which cannot be captured into a
    // graph).
    let stream = ctx
        .new_stream()
        .map_err(|e| format!("{name}: cannot create a stream: {e}"))?;
    Ok(Arc::new(Gpu {
        early_launch,
        clusters,
        ctx,
        stream,
        programs: Default::default(),
        cache: cache_dir(),
        name,
        compute_capability: cc,
        multiprocessors: sms,
        clock_khz,
        memory_clock_khz,
        memory_bus_bits,
    }))
}

/// Whether environment variable `k` is set to "1" (the backend's on/off switches, such as
/// `SONOTRACK_NO_GRAPHS`).
pub(crate) fn env_is_one(k: &str) -> bool {
    std::env::var_os(k).is_some_and(|v| v == "1")
}

/// A second instance of the kernel module, loaded through the driver API so that its functions'
/// handles are ours: `launch_early` launches them with programmatic stream serialisation
/// (programmatic dependent launch) and `launch_cluster` as thread-block clusters (both sm_90
/// and later), which cudarc's launcher cannot. The kernels keep no device globals, so the two
/// instances share nothing.
pub struct DriverModule {
    module: cudarc::driver::sys::CUmodule,
    ctx: Arc<CudaContext>,
}

// SAFETY: a CUmodule handle may be used from any thread with its context current (every use
// binds it first); the module is only unloaded by Drop.
unsafe impl Send for DriverModule {}
// SAFETY: as above; &DriverModule only looks functions up, which the driver allows concurrently.
unsafe impl Sync for DriverModule {}

/// A kernel of a [`DriverModule`].
#[derive(Clone, Copy)]
pub struct DriverFunction(cudarc::driver::sys::CUfunction);

// SAFETY: a CUfunction is a handle into a module that outlives its users (the correlator holds
// the Gpu that holds the module); launching from any thread with the context current is allowed.
unsafe impl Send for DriverFunction {}
// SAFETY: as above (copies of the handle are only passed to the driver).
unsafe impl Sync for DriverFunction {}

impl DriverModule {
    fn load(ctx: &Arc<CudaContext>, image: &[u8]) -> Result<Self, String> {
        use cudarc::driver::sys;
        ctx.bind_to_thread().map_err(|e| e.to_string())?;
        // PTX must end with a NUL; a CUBIN ignores what follows its last section.
        let mut bytes = image.to_vec();
        bytes.push(0);
        let mut module = std::ptr::null_mut();
        // SAFETY: `bytes` is a complete image (CUBIN or NUL-terminated PTX) that lives through
        // the call; the driver copies it.
        unsafe { sys::cuModuleLoadData(&mut module, bytes.as_ptr().cast()) }
            .result()
            .map_err(|e| format!("loading the kernels a second time: {e}"))?;
        Ok(Self {
            module,
            ctx: ctx.clone(),
        })
    }

    pub fn function(&self, name: &str) -> Result<DriverFunction, BackendError> {
        let c = CString::new(name).map_err(|e| BackendError::new("cuda", e.to_string()))?;
        let mut f = std::ptr::null_mut();
        // SAFETY: the module is loaded; `c` is a NUL-terminated name that lives through the call.
        unsafe { cudarc::driver::sys::cuModuleGetFunction(&mut f, self.module, c.as_ptr()) }
            .result()
            .map_err(|e| BackendError::new("cuda", format!("kernel `{name}`: {e}")))?;
        Ok(DriverFunction(f))
    }
}

impl Drop for DriverModule {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: loaded by `load`, unloaded once; its users (the correlator) are gone, as they
        // hold the Gpu that holds this.
        unsafe {
            let _ = cudarc::driver::sys::cuModuleUnload(self.module);
        }
    }
}

/// Launch `f` on `stream` allowed to start before the previous kernel on the stream has finished
/// (programmatic stream serialisation): its blocks are scheduled as the previous kernel's blocks
/// finish, and the kernel itself waits for that kernel's results with `griddepcontrol.wait`
/// (kernels/common.cuh: `wait_for_previous_kernel`) before reading them.
///
/// # Safety
/// `args` holds a pointer to each of the kernel's arguments, of the kernel's types and in its
/// order, and every buffer they name is live until the kernel has run; the kernel must wait
/// before it reads anything the previous kernel writes.
pub unsafe fn launch_early(
    f: DriverFunction,
    cfg: cudarc::driver::LaunchConfig,
    stream: &CudaStream,
    args: &mut [*mut std::ffi::c_void],
) -> Result<(), BackendError> {
    use cudarc::driver::sys;
    // SAFETY: an all-zero attribute is a valid value of this plain C struct; its id and value
    // are set next.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    // SAFETY: the caller's contract.
    unsafe { launch_with(f, cfg, stream, args, attr, "launching a kernel early") }
}

/// Launch `f` on `stream` as thread-block clusters of `cluster_x` blocks along x (sm_90 and
/// later; the grid's width a multiple of it, at most 8: the portable size).
///
/// # Safety
/// `args` holds a pointer to each of the kernel's arguments, of the kernel's types and in its
/// order, and every buffer they name is live until the kernel has run.
pub unsafe fn launch_cluster(
    f: DriverFunction,
    cfg: cudarc::driver::LaunchConfig,
    cluster_x: u32,
    stream: &CudaStream,
    args: &mut [*mut std::ffi::c_void],
) -> Result<(), BackendError> {
    use cudarc::driver::sys;
    // SAFETY: as in `launch_early`.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = cluster_x;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
    // SAFETY: the caller's contract.
    unsafe { launch_with(f, cfg, stream, args, attr, "launching a kernel as clusters") }
}

/// `cuLaunchKernelEx` with one launch attribute.
///
/// # Safety
/// As `launch_early`'s.
unsafe fn launch_with(
    f: DriverFunction,
    cfg: cudarc::driver::LaunchConfig,
    stream: &CudaStream,
    args: &mut [*mut std::ffi::c_void],
    mut attr: cudarc::driver::sys::CUlaunchAttribute,
    what: &str,
) -> Result<(), BackendError> {
    use cudarc::driver::sys;
    let lc = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: the caller's contract for `args`; `lc` and `attr` live through the call.
    unsafe { sys::cuLaunchKernelEx(&lc, f.0, args.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .map_err(|e| BackendError::new("cuda", format!("{what}: {e}")))
}

/// Where compiled kernels are kept (None: compile at every start).
pub fn cache_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = env("SONOTRACK_CACHE_DIR") {
        return Some(d);
    }
    if let Some(d) = env("CACHE_DIRECTORY") {
        // systemd may pass several, separated by ':'.
        return d
            .to_str()
            .and_then(|s| s.split(':').next())
            .map(PathBuf::from);
    }
    if let Some(d) = env("XDG_CACHE_HOME") {
        return Some(d.join("sonotrack"));
    }
    env("HOME").map(|h| h.join(".cache").join("sonotrack"))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn versions() -> (i32, i32, i32) {
    let (mut maj, mut min, mut drv) = (0i32, 0i32, 0i32);
    // SAFETY: plain version queries into local integers; the libraries were checked above.
    unsafe {
        let _ = cudarc::nvrtc::sys::nvrtcVersion(&mut maj, &mut min);
        let _ = cudarc::driver::sys::cuDriverGetVersion(&mut drv);
    }
    (maj, min, drv)
}

/// The cache key of program source `src` with this process's libraries, for a device.
pub fn cache_key(src: &str, cc: (i32, i32)) -> String {
    let (maj, min, drv) = versions();
    cache_key_for(src, cc, (maj, min), drv)
}

/// The cache key: everything that changes the compiled kernels.
pub fn cache_key_for(src: &str, cc: (i32, i32), nvrtc: (i32, i32), driver: i32) -> String {
    let (maj, min, drv) = (nvrtc.0, nvrtc.1, driver);
    format!(
        "sonotrack {} | source {:016x} | options {} | sm_{}{} | nvrtc {maj}.{min} | driver {drv}",
        env!("CARGO_PKG_VERSION"),
        fnv1a(src.as_bytes()),
        OPTIONS.join(" "),
        cc.0,
        cc.1
    )
}

const CACHE_MAGIC: &str = "sonotrack-kernel-cache 1\n";

/// Program `p`'s kernel image for a device: from the cache when its key matches, else compiled
/// (and cached). Returns the image and how it was obtained.
pub fn kernels_for(
    p: &Program,
    cc: (i32, i32),
    cache: Option<&Path>,
) -> Result<(Vec<u8>, String), String> {
    let src = programs::expanded(p)?;
    let key = cache_key(&src, cc);
    let name = format!("kernels-{}-{:016x}.bin", p.name, fnv1a(key.as_bytes()));
    let file = cache.map(|d| d.join(name));
    if let Some(f) = &file {
        if let Ok(bytes) = std::fs::read(f) {
            let header = format!("{CACHE_MAGIC}{key}\n");
            if bytes.starts_with(header.as_bytes()) {
                let image = bytes[header.len()..].to_vec();
                return Ok((image, format!("loaded from {}", f.display())));
            }
            log::info!(
                "kernel cache {} is for another build or device; recompiling",
                f.display()
            );
        }
    }
    let start = Instant::now();
    let image = compile(&src, cc)?;
    let took = start.elapsed().as_secs_f64() * 1e3;
    let mut how = format!("compiled by NVRTC in {took:.0} ms");
    if let Some(f) = &file {
        let mut bytes = format!("{CACHE_MAGIC}{key}\n").into_bytes();
        bytes.extend_from_slice(&image);
        let written = f
            .parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .and_then(|_| std::fs::write(f, &bytes));
        match written {
            Ok(()) => how.push_str(&format!(", cached in {}", f.display())),
            Err(e) => log::warn!(
                "cannot write the kernel cache {}: {e}; kernels will be compiled at every start",
                f.display()
            ),
        }
    }
    Ok((image, how))
}

/// Compile a program's source: a CUBIN for sm_XY, or, if this NVRTC does not know the
/// device's architecture, PTX for the newest one it knows (the driver then finishes the job).
fn compile(src: &str, cc: (i32, i32)) -> Result<Vec<u8>, String> {
    let real = format!("--gpu-architecture=sm_{}{}", cc.0, cc.1);
    match compile_with(src, &real, true) {
        Ok(bin) => Ok(bin),
        Err(first) => {
            log::warn!(
                "NVRTC cannot build for sm_{}{} ({first}); trying PTX",
                cc.0,
                cc.1
            );
            for arch in [
                "compute_90",
                "compute_87",
                "compute_80",
                "compute_75",
                "compute_72",
            ] {
                if let Ok(ptx) = compile_with(src, &format!("--gpu-architecture={arch}"), false) {
                    return Ok(ptx);
                }
            }
            Err(first)
        }
    }
}

/// Compile every program for `arch` (e.g. "sm_87") without a device: the compile check for
/// the boards' architectures. Needs only libnvrtc. Returns the CUBINs' sizes.
#[cfg(test)]
fn compile_check(arch: &str) -> Result<Vec<usize>, String> {
    std::panic::catch_unwind(|| {
        let mut sizes = Vec::new();
        for p in programs::PROGRAMS {
            let src = programs::expanded(p)?;
            let bin = compile_with(&src, &format!("--gpu-architecture={arch}"), true)?;
            sizes.push(bin.len());
        }
        Ok(sizes)
    })
    .unwrap_or_else(|p| Err(panic_text(&p)))
}

fn compile_with(src: &str, arch: &str, cubin: bool) -> Result<Vec<u8>, String> {
    use cudarc::nvrtc::{result, sys};
    let src = CString::new(src).map_err(|_| "kernel source holds a NUL byte".to_string())?;
    let prog = result::create_program(&src, None).map_err(|e| format!("NVRTC: {e:?}"))?;
    let mut opts: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    opts.push(arch.to_string());
    // SAFETY: `prog` is a live program until destroy_program below; the buffers passed to the
    // size/get calls are allocated to the sizes NVRTC reported.
    let out = unsafe {
        let compiled = result::compile_program(prog, &opts);
        if let Err(e) = compiled {
            let log = result::get_program_log(prog)
                .map(|l| {
                    String::from_utf8_lossy(&l.iter().map(|c| *c as u8).collect::<Vec<u8>>())
                        .trim_end_matches('\0')
                        .to_string()
                })
                .unwrap_or_default();
            let _ = result::destroy_program(prog);
            log::error!("NVRTC failed with {arch}: {e:?}\n{log}");
            return Err(format!("NVRTC failed ({e:?}); the compiler log is above"));
        }
        let bytes = if cubin {
            let mut size = 0usize;
            let rc = sys::nvrtcGetCUBINSize(prog, &mut size);
            if rc != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
                let _ = result::destroy_program(prog);
                return Err(format!("no CUBIN for {arch} ({rc:?})"));
            }
            let mut buf = vec![0u8; size];
            let rc = sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast());
            if rc != sys::nvrtcResult::NVRTC_SUCCESS {
                let _ = result::destroy_program(prog);
                return Err(format!("reading the CUBIN failed ({rc:?})"));
            }
            buf
        } else {
            result::get_ptx(prog)
                .map(|p| p.iter().map(|c| *c as u8).collect::<Vec<u8>>())
                .map_err(|e| format!("reading the PTX failed: {e:?}"))?
        };
        let _ = result::destroy_program(prog);
        bytes
    };
    Ok(out)
}

/// Median device-to-device copy bandwidth over 256 MiB buffers, counting bytes read and written.
pub fn copy_bandwidth_gb_s() -> Result<f64, BackendError> {
    let g = gpu().map_err(|e| BackendError::new("cuda", e))?;
    let s = g.stream.clone();
    let n = 64 << 20; // floats: 256 MiB
    let src = s.alloc_zeros::<f32>(n).map_err(err("allocating"))?;
    let mut dst = s.alloc_zeros::<f32>(n).map_err(err("allocating"))?;
    let t = median_event_time(&g, &s, || {
        s.memcpy_dtod(&src, &mut dst).map_err(err("copy"))?;
        Ok(())
    })?;
    Ok(2.0 * (n * 4) as f64 / t / 1e9)
}

/// Host-to-device copy bandwidth from page-locked memory (GB/s) for copies of `bytes`, as the
/// correlator uploads its frames.
pub fn upload_bandwidth_gb_s(bytes: usize) -> Result<f64, BackendError> {
    let g = gpu().map_err(|e| BackendError::new("cuda", e))?;
    let s = g.stream.clone();
    let n = bytes.div_ceil(4).max(1);
    let src = host::Pinned::<f32>::new(n)?;
    let dst = s.alloc_zeros::<f32>(n).map_err(err("allocating"))?;
    let to = dptr(&dst, &s);
    let t = median_event_time(&g, &s, || {
        // SAFETY: `dst` holds `n` floats; `src` is not written while the copy runs (the timing
        // synchronises after each copy).
        unsafe { src.copy_to_device(to, n, &s) }
    })?;
    Ok((n * 4) as f64 / t / 1e9)
}

/// Median over ten runs (after one warm-up) of the device time of what `f` enqueues on `s`,
/// timed with events on it.
pub(crate) fn median_event_time(
    g: &Gpu,
    s: &CudaStream,
    mut f: impl FnMut() -> Result<(), BackendError>,
) -> Result<f64, BackendError> {
    let timer = host::DeviceTimer::new(&g.ctx, true)?;
    let mut times = Vec::new();
    for i in 0..11 {
        timer.start(s)?;
        f()?;
        timer.stop(s)?;
        s.synchronize().map_err(err("copy"))?;
        if i > 0 {
            times.push(
                timer
                    .elapsed_s()
                    .ok_or_else(|| BackendError::new("cuda", "reading the timing events failed"))?,
            );
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// The device address of a buffer, for kernel arguments and copies into parts of it.
pub(crate) fn dptr<T>(buf: &cudarc::driver::CudaSlice<T>, stream: &CudaStream) -> u64 {
    use cudarc::driver::DevicePtr;
    // Event tracking is off (see `start`), so the guard that comes with the address does
    // nothing.
    buf.device_ptr(stream).0
}

/// Map a cudarc error to a backend error with context.
pub(crate) fn err<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> BackendError + '_ {
    move |e| BackendError::new("cuda", format!("{what}: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program compiles for every architecture a supported board has (Xavier sm_72,
    /// Orin sm_87) and for Hopper (sm_90). Needs libnvrtc, so it runs where one is
    /// (`cargo test --release --lib kernels_compile -- --ignored` on the GPU machine). CUDA 13's
    /// NVRTC no longer builds for Volta (sm_72; JetPack's own CUDA does): an architecture this
    /// NVRTC refuses as an option is reported, not failed; Orin and Hopper must compile.
    #[test]
    #[ignore = "needs libnvrtc: run with --ignored where it is"]
    fn kernels_compile_for_the_boards() {
        for arch in ["sm_72", "sm_87", "sm_90"] {
            match compile_check(arch) {
                Ok(sizes) => eprintln!("{arch}: CUBINs of {sizes:?} bytes"),
                Err(e) if arch == "sm_72" && e.contains("INVALID_OPTION") => {
                    eprintln!("{arch}: this NVRTC does not build for it ({e})")
                }
                Err(e) => panic!("{arch}: {e}"),
            }
        }
    }

    #[test]
    fn cache_key_names_everything_that_matters() {
        let k = cache_key_for("src", (8, 7), (12, 2), 12020);
        assert!(
            k.contains("sm_87") && k.contains("--fmad=false") && k.contains("source"),
            "{k}"
        );
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
    }
}
