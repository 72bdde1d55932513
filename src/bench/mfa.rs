//! Multi-frame assignment ([`crate::track::mfa::window`]): the time of one window step (every
//! track's candidate tree over the window, the S-D solve, the commit) against the window's
//! lists S and the clutter, for 2 and 8 tracks in 2-D. CPU, one thread.

use nalgebra::{DMatrix, DVector};

use super::{BenchOptions, Row, time_median};
use crate::error::{Error, Result};
use crate::rng::philox::{PhiloxStream, Stream};
use crate::track::mfa::cost::ListModel;
use crate::track::mfa::tree::TreeParams;
use crate::track::mfa::window::{Window, WindowTrack};
use crate::track::smooth::kalman::LinearModel;

/// The frames of one scenario (timed steps cycle through it).
const FRAMES: usize = 64;

pub fn rows(opts: &BenchOptions, backends: &[&str]) -> Result<Vec<Row>> {
    if !backends.contains(&"cpu") {
        return Ok(Vec::new());
    }
    let lists: &[usize] = if opts.quick { &[2, 3] } else { &[2, 3, 4, 5] };
    let mut rows = Vec::new();
    for &tracks in &[2usize, 8] {
        for &clutter in &[0usize, 2, 5] {
            let frames = scenario(tracks, clutter);
            for &s in lists {
                let mut w = window(tracks, s);
                let mut k = FRAMES;
                let (secs, reps) = time_median(opts.budget_s, 3, || {
                    // At the end of the scenario, start it again (the window filled untimed).
                    if k == FRAMES {
                        w = window(tracks, s);
                        for f in &frames[..s - 2] {
                            let _ = w.push(f.clone());
                        }
                        k = s - 2;
                    }
                    let f = frames[k].clone();
                    k += 1;
                    let t = std::time::Instant::now();
                    let _ = w.push(f);
                    Ok(t.elapsed().as_secs_f64())
                })
                .map_err(|e| Error::Usage(format!("mfa bench: {e}")))?;
                rows.push(Row {
                    stage: "mfa".into(),
                    backend: "cpu".into(),
                    params: format!("S={s}, {tracks} tracks, {} meas/frame", tracks + clutter),
                    median_us: secs * 1e6,
                    per_unit: secs * 1e6 / tracks as f64,
                    unit: "us/track-frame".into(),
                    gb_s: None,
                    wall_us: None,
                    reps,
                });
            }
        }
    }
    Ok(rows)
}

/// Tracks 3 m apart moving at 1 m/s along x, P_D 0.9, 0.3 m noise, and `clutter` false alarms a
/// frame spread over the tracks' band.
fn scenario(tracks: usize, clutter: usize) -> Vec<Vec<DVector<f64>>> {
    let mut rng = PhiloxStream::new(41, tracks as u32, Stream::Simulate);
    (0..FRAMES)
        .map(|k| {
            let t = k as f64;
            let mut f = Vec::new();
            for i in 0..tracks {
                if rng.uniform_f64() < 0.9 {
                    f.push(DVector::from_vec(vec![
                        t + 0.3 * rng.normal_f64(),
                        3.0 * i as f64 + 0.3 * rng.normal_f64(),
                    ]));
                }
            }
            for _ in 0..clutter {
                f.push(DVector::from_vec(vec![
                    t + 4.0 * (rng.uniform_f64() - 0.5),
                    3.0 * tracks as f64 * rng.uniform_f64() - 1.5,
                ]));
            }
            f
        })
        .collect()
}

/// A window of `lists` lists over `tracks` tracks at the scenario's start.
fn window(tracks: usize, lists: usize) -> Window {
    let model = LinearModel::constant_velocity(2, 1.0, 0.05, 0.09);
    let params = TreeParams {
        gate_chi2: 9.21,
        lists: vec![ListModel {
            pd: 0.9,
            clutter_density: 0.05,
        }],
        max_branches: 100_000,
    };
    let start = (0..tracks)
        .map(|i| WindowTrack {
            x: DVector::from_vec(vec![-1.0, 3.0 * i as f64, 1.0, 0.0]),
            p: DMatrix::from_diagonal(&DVector::from_vec(vec![0.09, 0.09, 0.01, 0.01])),
        })
        .collect();
    Window::new(model, params, lists, start)
}
