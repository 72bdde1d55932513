//! Random frames for the batched pair costs of multi-frame assignment (seed 001 C10), shared by
//! the library's tests and the GPU parity tests: tracks of a random model near constant velocity
//! with random covariances, and measurements near some of them plus clutter.

use crate::testing::kalman::{model, normal, spd};
use crate::track::mfa::cost::ListModel;
use crate::track::mfa::pair_costs::PairCostInput;

/// `tracks` tracks and `meas` measurements of a random (n, m) model from stream `seed`; about
/// half the measurements lie near a track, the rest are spread over the tracks' span.
pub fn pair_cost_input(seed: u32, n: usize, m: usize, tracks: usize, meas: usize) -> PairCostInput {
    let lm = model(seed, n, m);
    let mut x = Vec::with_capacity(tracks * n);
    let mut p = Vec::with_capacity(tracks * n * n);
    for t in 0..tracks {
        for e in 0..n {
            x.push(10.0 * normal(seed + 5, t * n + e));
        }
        let pt = spd(seed + 100 + t as u32, n, 2.0, 0.05);
        // Symmetric, so nalgebra's column-major order is the row-major one.
        p.extend(pt.iter().copied());
    }
    let mut z = Vec::with_capacity(meas * m);
    for j in 0..meas {
        let near = j % 2 == 0 && tracks > 0;
        let t = j % tracks.max(1);
        for a in 0..m {
            let base = if near {
                (0..n).map(|c| lm.h[(a, c)] * x[t * n + c]).sum::<f64>()
            } else {
                0.0
            };
            let spread = if near { 1.5 } else { 25.0 };
            z.push(base + spread * normal(seed + 7, j * m + a));
        }
    }
    PairCostInput {
        n,
        m,
        h: (0..m)
            .flat_map(|a| (0..n).map(move |c| (a, c)))
            .map(|(a, c)| lm.h[(a, c)])
            .collect(),
        r: (0..m)
            .flat_map(|a| (0..m).map(move |b| (a, b)))
            .map(|(a, b)| lm.r[(a, b)])
            .collect(),
        x,
        p,
        z,
        gate_chi2: 16.0,
        list: ListModel {
            pd: 0.9,
            clutter_density: 1e-3,
        },
    }
}
