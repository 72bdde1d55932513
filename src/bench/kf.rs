//! The batched Kalman filter bank ([`crate::track::kalman::bank`]): one constant-velocity 3-D
//! predict + update (n = 6, m = 3) of M filters, time per filter-step, on the CPU and on the GPU
//! (`kernels/kf.cu`: device time of the one-pass launch, the thread-block sweep, the CV-2D
//! model beside it, the host's wall time per step and the measured CPU/GPU crossover); and the
//! IMM estimator ([`crate::track::kalman::imm`], f64, one track at a time) with three 2-D models
//! (constant velocity, a left and a right coordinated turn) over 1,024 tracks, time per
//! track-step.

use super::{BenchOptions, Row, pick, time_median};
use crate::error::{Error, Result};
use crate::track::kalman::bank::{BankModel, KalmanBank};

/// Bank sizes timed (the seed's sweep from 64 filters; `--quick` stops at 16,384).
const SIZES: [usize; 5] = [64, 1024, 16_384, 262_144, 1_048_576];

pub fn rows(opts: &BenchOptions, backends: &[&str]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    if backends.contains(&"cuda") {
        rows.extend(cuda_rows(opts)?);
        rows.push(tdoa_row(opts, "cuda", TDOA_FILTERS, false)?);
        rows.push(tdoa_row(opts, "cuda", TDOA_FILTERS, true)?);
    }
    if !backends.contains(&"cpu") {
        return Ok(rows);
    }
    let sizes = if opts.quick { &SIZES[..3] } else { &SIZES[..] };
    for m in pick(sizes, &[]) {
        let mut bank = cv_bank(m)?;
        let z: Vec<f32> = (0..3 * m).map(|i| (i % 7) as f32 * 0.1).collect();
        let (s, reps) = time_median(opts.budget_s, 3, || {
            let t = std::time::Instant::now();
            bank.predict();
            bank.update(&z).map_err(|e| Error::Usage(e.to_string()))?;
            Ok(t.elapsed().as_secs_f64())
        })?;
        rows.push(Row::per_ns(
            "kf",
            "cpu",
            format!(
                "{m} filters, CV-3D predict+update, {} threads",
                rayon::current_num_threads()
            ),
            s,
            m,
            "ns/filter-step",
            reps,
        ));
    }
    let tdoa_filters = if opts.quick { 4096 } else { TDOA_FILTERS };
    rows.push(tdoa_row(opts, "cpu", tdoa_filters, false)?);
    rows.push(tdoa_row(opts, "cpu", tdoa_filters, true)?);
    rows.push(imm_row(opts)?);
    rows.push(imm_filter_row(opts)?);
    Ok(rows)
}

/// Filters in the extended (TDOA) row.
const TDOA_FILTERS: usize = 262_144;

/// The extended filter's step ([`FilterBank::step_tdoa`]: CV-3D predict, then one scalar
/// update per pair of a five-sensor array, 10 pairs), or the unscented one's
/// ([`FilterBank::step_tdoa_unscented`], 13 sigma points a pair), of `filters` filters, wall
/// time per step as a caller sees it (the range differences up, the count back).
fn tdoa_row(opts: &BenchOptions, backend: &str, filters: usize, unscented: bool) -> Result<Row> {
    use crate::track::kalman::bank::FilterBank;
    let w = crate::testing::kalman_tdoa::workload(5, filters, 1);
    let mut bank: Box<dyn FilterBank> = match backend {
        "cuda" => crate::gpu::kalman_bank(&w.bank_model, filters, &[0.0; 6], &[0.0; 36])?,
        _ => Box::new(
            KalmanBank::new(w.bank_model.clone(), filters, &[0.0; 6], &[0.0; 36])
                .map_err(|e| Error::Usage(e.to_string()))?,
        ),
    };
    let bank_err = |e: crate::track::kalman::bank::BankError| Error::Usage(e.to_string());
    let (s, reps) = time_median(opts.budget_s, 3, || {
        // Every repetition restarts from the prior, so that each times the same first step.
        bank.load(&w.x0, &w.p0).map_err(bank_err)?;
        let t = std::time::Instant::now();
        if unscented {
            let ut = crate::track::kalman::tdoa::Unscented::default();
            bank.step_tdoa_unscented(&w.geo, &ut, &w.z[0])
                .map_err(bank_err)?;
        } else {
            bank.step_tdoa(&w.geo, &w.z[0]).map_err(bank_err)?;
        }
        Ok(t.elapsed().as_secs_f64())
    })?;
    Ok(Row::per_ns(
        if unscented { "kf-tdoa-ukf" } else { "kf-tdoa" },
        backend,
        format!(
            "{filters} filters, CV-3D + 10 TDOA pairs ({}, one scalar update a pair), wall{}",
            if unscented {
                "unscented, 13 sigma points"
            } else {
                "extended"
            },
            if backend == "cpu" {
                format!(", {} threads", rayon::current_num_threads())
            } else {
                String::new()
            }
        ),
        s,
        filters,
        "ns/filter-step",
        reps,
    ))
}

/// The tracker's IMM filter ([`crate::track::kalman::imm_filter`]: three cubature filters
/// with data association over each pair's peaks) on the five-hydrophone pier array (10 pairs,
/// 4 peaks each), [`IMM_TRACKS`] tracks in one step (spread over the cores).
fn imm_filter_row(opts: &BenchOptions) -> Result<Row> {
    use crate::testing::fixtures::{pf_init, pf_measurement, pf_params};
    use crate::track::{Estimate, ParticleFilter, TrackStep};
    let mut p = pf_params(16, 3);
    p.slots = IMM_TRACKS;
    let mut f = crate::track::kalman::imm_filter::ImmFilter::new(p.clone());
    let steps: Vec<TrackStep> = (0..IMM_TRACKS as u32)
        .map(|slot| TrackStep::fixed(slot, 0.05, 0.01))
        .collect();
    for t in &steps {
        f.init_track(&crate::track::TrackInit {
            slot: t.slot,
            ..pf_init()
        })?;
    }
    let mut out = vec![Estimate::new(3); IMM_TRACKS];
    let mut frame = 0u64;
    let (s, reps) = time_median(opts.budget_s, 3, || {
        frame += 1;
        let m = pf_measurement(&p, frame);
        let t = std::time::Instant::now();
        f.step(&m, &steps, &mut out)?;
        Ok(t.elapsed().as_secs_f64())
    })?;
    Ok(Row::per_ns(
        "imm-filter",
        "cpu",
        format!(
            "{IMM_TRACKS} tracks, the tracker's 3 models (cubature, 7 states), 5 sensors, 10 pairs x 4 peaks, f64, {} threads",
            rayon::current_num_threads()
        ),
        s,
        IMM_TRACKS,
        "ns/track-step",
        reps,
    ))
}

/// Tracks in the IMM row (the Kalman issue's figure: 3 models, 1,024 tracks per frame).
const IMM_TRACKS: usize = 1024;

/// One IMM step (mix, three mode-matched predict + updates, weigh, combine) of each of
/// [`IMM_TRACKS`] tracks, on the cores.
fn imm_row(opts: &BenchOptions) -> Result<Row> {
    use crate::track::kalman::imm::{Imm, coordinated_turn};
    use crate::track::smooth::kalman::LinearModel;
    use nalgebra::{DMatrix, DVector};
    use rayon::prelude::*;
    let (dt, q, r) = (0.05, 0.1, 0.1);
    let imm = Imm::new(
        vec![
            LinearModel::constant_velocity(2, dt, q, r),
            coordinated_turn(dt, 0.2, q, r),
            coordinated_turn(dt, -0.2, q, r),
        ],
        Imm::sojourn_matrix(&[10.0; 3], dt),
    )
    .map_err(|e| Error::Usage(e.to_string()))?;
    let p0 = DMatrix::from_diagonal(&DVector::from_vec(vec![1.0, 1.0, 4.0, 4.0]));
    let mut states: Vec<_> = (0..IMM_TRACKS)
        .map(|i| {
            let x0 = DVector::from_vec(vec![i as f64, 0.0, 1.0, 0.5]);
            imm.init(&x0, &p0, &[0.8, 0.1, 0.1])
        })
        .collect();
    let mut step = 0u32;
    let (s, reps) = time_median(opts.budget_s, 3, || {
        step += 1;
        let t = std::time::Instant::now();
        let ok = states.par_iter_mut().enumerate().all(|(i, st)| {
            let z = DVector::from_vec(vec![i as f64 + 0.05 * f64::from(step), 0.0]);
            imm.step(st, &z).is_some()
        });
        let took = t.elapsed().as_secs_f64();
        if ok {
            Ok(took)
        } else {
            Err(Error::Usage(
                "an IMM step found no positive-definite innovation".into(),
            ))
        }
    })?;
    Ok(Row::per_ns(
        "imm",
        "cpu",
        format!(
            "{IMM_TRACKS} tracks, 3 models (CV, CT ±0.2 rad/s) 2-D, f64, {} threads",
            rayon::current_num_threads()
        ),
        s,
        IMM_TRACKS,
        "ns/track-step",
        reps,
    ))
}

/// A constant-velocity model in `axes` dimensions (step 0.05 s, positions measured with 0.1 m²
/// variance).
fn cv_model(axes: usize) -> BankModel {
    let lm = crate::track::smooth::kalman::LinearModel::constant_velocity(axes, 0.05, 0.1, 0.1);
    crate::testing::kalman::bank_model(&lm)
}

/// M constant-velocity 3-D filters.
fn cv_bank(m: usize) -> Result<KalmanBank> {
    let p0 = crate::testing::kalman::to_f32(&nalgebra::DMatrix::identity(6, 6));
    KalmanBank::new(cv_model(3), m, &[0.0; 6], &p0).map_err(|e| Error::Usage(e.to_string()))
}

/// GPU bank sizes: the seed's sweep up to its 16M-filter target (`--quick` stops at 262,144).
const GPU_SIZES: [usize; 6] = [64, 1024, 16_384, 262_144, 1_048_576, 16_777_216];
/// Thread-block sizes swept at the two target sizes.
const BLOCKS: [u32; 6] = [32, 64, 128, 256, 512, 1024];

/// The GPU rows: device time per one-pass launch over the sizes (CV-3D and CV-2D) at the
/// default block, the block sweep at 262,144 and 16M filters, the wall time per step as a
/// caller sees it, and the measured crossover.
fn cuda_rows(opts: &BenchOptions) -> Result<Vec<Row>> {
    let block = crate::gpu::KF_BLOCK;
    let sizes = if opts.quick {
        &GPU_SIZES[..4]
    } else {
        &GPU_SIZES[..]
    };
    let mut rows = Vec::new();
    let row = |params: String, s: f64, filters: usize, model: &BankModel, wall: bool| Row {
        stage: "kf".into(),
        backend: "cuda".into(),
        params,
        median_us: s * 1e6,
        per_unit: s * 1e9 / filters as f64,
        unit: "ns/filter-step".into(),
        // Bytes moved per filter: x, P's upper triangle and z read; x and the whole P written.
        gb_s: (!wall).then(|| {
            let (n, m) = (model.n, model.m);
            (4 * filters * (n + n * (n + 1) / 2 + m + n + n * n)) as f64 / s / 1e9
        }),
        wall_us: None,
        reps: 11,
    };
    for (axes, name) in [(3, "CV-3D"), (2, "CV-2D")] {
        let model = cv_model(axes);
        for &m in &pick(sizes, &[]) {
            let Some(s) = crate::gpu::kalman_kernel_time(&model, m, block, true)? else {
                continue;
            };
            rows.push(row(
                format!("{m} filters, {name} predict+update, block {block}"),
                s,
                m,
                &model,
                false,
            ));
        }
    }
    let model = cv_model(3);
    for &m in sizes.iter().filter(|m| [262_144, 16_777_216].contains(*m)) {
        for block in BLOCKS {
            let Some(s) = crate::gpu::kalman_kernel_time(&model, m, block, true)? else {
                eprintln!("kf: blocks of {block} threads need more registers than a block has");
                continue;
            };
            rows.push(row(
                format!("{m} filters, CV-3D predict+update, block sweep {block}"),
                s,
                m,
                &model,
                false,
            ));
        }
    }
    rows.push(scan_row()?);
    let c = crate::gpu::kalman_crossover(&model)?;
    for p in &c.points {
        rows.push(row(
            format!(
                "{} filters, CV-3D step wall time (upload, launch, count back); CPU {:.1} us",
                p.filters,
                p.cpu_s * 1e6
            ),
            p.gpu_s,
            p.filters,
            &model,
            true,
        ));
    }
    Ok(rows)
}

/// Tracks and steps of the scan smoother's row (the Kalman issue's figure).
const SCAN_TRACKS: usize = 1024;
const SCAN_STEPS: usize = 4096;

/// The GPU's parallel-in-time smoother over [`SCAN_TRACKS`] tracks of [`SCAN_STEPS`] steps
/// (the seed's 2-D constant-velocity scenario, n = 4, means and covariances), device time of
/// the scan with the elements on the device.
fn scan_row() -> Result<Row> {
    let (_, recs) = crate::testing::kalman::seed_records(1, SCAN_STEPS);
    let s = crate::gpu::smooth_scan_time(&recs, SCAN_TRACKS)?;
    let count = SCAN_TRACKS * SCAN_STEPS;
    Ok(Row {
        stage: "smooth-scan".into(),
        backend: "cuda".into(),
        params: format!(
            "{SCAN_TRACKS} tracks x {SCAN_STEPS} steps, CV-2D (n = 4), f64, means and covariances"
        ),
        median_us: s * 1e6,
        per_unit: s * 1e9 / count as f64,
        unit: "ns/step".into(),
        gb_s: None,
        wall_us: None,
        reps: 10,
    })
}
