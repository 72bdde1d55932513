//! The batched Kalman filter bank ([`crate::track::kalman::bank`]): one constant-velocity 3-D
//! predict + update (n = 6, m = 3) of M filters, time per filter-step; and the IMM estimator
//! ([`crate::track::kalman::imm`], f64, one track at a time) with three 2-D models (constant
//! velocity, a left and a right coordinated turn) over 1,024 tracks, time per track-step. CPU
//! only until the CUDA twins land.

use super::{BenchOptions, Row, pick, time_median};
use crate::error::{Error, Result};
use crate::track::kalman::bank::{BankModel, KalmanBank};

/// Bank sizes timed (the seed's sweep from 64 filters; `--quick` stops at 16,384).
const SIZES: [usize; 5] = [64, 1024, 16_384, 262_144, 1_048_576];

pub fn rows(opts: &BenchOptions, backends: &[&str]) -> Result<Vec<Row>> {
    if !backends.contains(&"cpu") {
        return Ok(Vec::new());
    }
    let sizes = if opts.quick { &SIZES[..3] } else { &SIZES[..] };
    let mut rows = Vec::new();
    for m in pick(sizes, &[]) {
        let mut bank = cv_bank(m)?;
        let z: Vec<f32> = (0..3 * m).map(|i| (i % 7) as f32 * 0.1).collect();
        let (s, reps) = time_median(opts.budget_s, 3, || {
            let t = std::time::Instant::now();
            bank.predict();
            bank.update(&z).map_err(|e| Error::Usage(e.to_string()))?;
            Ok(t.elapsed().as_secs_f64())
        })?;
        rows.push(Row {
            stage: "kf".into(),
            backend: "cpu".into(),
            params: format!(
                "{m} filters, CV-3D predict+update, {} threads",
                rayon::current_num_threads()
            ),
            median_us: s * 1e6,
            per_unit: s * 1e9 / m as f64,
            unit: "ns/filter-step".into(),
            gb_s: None,
            wall_us: None,
            reps,
        });
    }
    rows.push(imm_row(opts)?);
    Ok(rows)
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
    Ok(Row {
        stage: "imm".into(),
        backend: "cpu".into(),
        params: format!(
            "{IMM_TRACKS} tracks, 3 models (CV, CT ±0.2 rad/s) 2-D, f64, {} threads",
            rayon::current_num_threads()
        ),
        median_us: s * 1e6,
        per_unit: s * 1e9 / IMM_TRACKS as f64,
        unit: "ns/track-step".into(),
        gb_s: None,
        wall_us: None,
        reps,
    })
}

/// M constant-velocity 3-D filters (step 0.05 s, positions measured with 0.1 m² variance).
fn cv_bank(m: usize) -> Result<KalmanBank> {
    let lm = crate::track::smooth::kalman::LinearModel::constant_velocity(3, 0.05, 0.1, 0.1);
    let flat = |x: &nalgebra::DMatrix<f64>| -> Vec<f32> {
        (0..x.nrows())
            .flat_map(|r| (0..x.ncols()).map(move |c| x[(r, c)] as f32))
            .collect()
    };
    let model = BankModel {
        n: 6,
        m: 3,
        f: flat(&lm.f),
        q: flat(&lm.q),
        h: flat(&lm.h),
        r: flat(&lm.r),
    };
    let p0 = flat(&nalgebra::DMatrix::identity(6, 6));
    KalmanBank::new(model, m, &[0.0; 6], &p0).map_err(|e| Error::Usage(e.to_string()))
}
