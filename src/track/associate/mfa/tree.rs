//! The candidate tree of one track over a window of frames (seed 001, §2.5, Fig. 4.6): every
//! path through each frame's gated measurements or a miss, each with the track's state filtered
//! along it (branch filtering: a frame's gate and likelihood are conditioned on the path's
//! earlier measurements) and its NLLR cost. The paths are the track's candidates of the S-D
//! assignment.

use nalgebra::{DMatrix, DVector};

use super::cost::{Entry, ListModel, nllr};
use crate::track::smooth::kalman::{LinearModel, innovation_factor, symmetric, update_given};

/// One path of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    /// Per frame: 0 for a miss, j + 1 for the frame's measurement j.
    pub path: Vec<usize>,
    /// The track's state after the last frame, filtered along the path.
    pub x: DVector<f64>,
    pub p: DMatrix<f64>,
    /// Its NLLR (see [`super::cost`]).
    pub cost: f64,
}

/// How the tree grows.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeParams {
    /// χ² gate on the innovation (as many degrees of freedom as the measurement has).
    pub gate_chi2: f64,
    /// Detection and clutter of each frame, in order.
    pub lists: Vec<ListModel>,
    /// Most paths grown (the rest are left out and the tree says so).
    pub max_branches: usize,
}

/// The tree, and whether `max_branches` cut it short.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    pub branches: Vec<Branch>,
    pub truncated: bool,
}

/// The paths of a track at (x0, p0), one step before the first frame, over `frames` (each a
/// list of measurements). None where an innovation covariance is not positive definite, or
/// `params.lists` has fewer models than there are frames.
pub fn grow(
    model: &LinearModel,
    x0: &DVector<f64>,
    p0: &DMatrix<f64>,
    frames: &[Vec<DVector<f64>>],
    params: &TreeParams,
) -> Option<Tree> {
    if params.lists.len() < frames.len() {
        return None;
    }
    let mut tree = Tree {
        branches: Vec::new(),
        truncated: false,
    };
    let mut path = Vec::with_capacity(frames.len());
    let mut entries = Vec::with_capacity(frames.len());
    extend(
        model,
        (x0.clone(), p0.clone()),
        frames,
        params,
        &mut path,
        &mut entries,
        &mut tree,
    )?;
    Some(tree)
}

/// Grow the tree below a node: predict to the next frame, then a miss and each gated
/// measurement in turn.
fn extend(
    model: &LinearModel,
    (x, p): (DVector<f64>, DMatrix<f64>),
    frames: &[Vec<DVector<f64>>],
    params: &TreeParams,
    path: &mut Vec<usize>,
    entries: &mut Vec<Entry>,
    tree: &mut Tree,
) -> Option<()> {
    let k = path.len();
    if k == frames.len() {
        if tree.branches.len() >= params.max_branches {
            tree.truncated = true;
            return Some(());
        }
        tree.branches.push(Branch {
            path: path.clone(),
            x,
            p,
            cost: nllr(entries, &params.lists[..k]),
        });
        return Some(());
    }
    let xp = &model.f * &x;
    let pp = symmetric(&model.f * &p * model.f.transpose() + &model.q);
    path.push(0);
    entries.push(Entry::Miss);
    extend(
        model,
        (xp.clone(), pp.clone()),
        frames,
        params,
        path,
        entries,
        tree,
    )?;
    path.pop();
    entries.pop();
    // One factor of the innovation covariance for every measurement of the frame.
    let chol = innovation_factor(model, &pp)?;
    let l = chol.l();
    let predicted = &model.h * &xp;
    let box_half = box_half_widths(&l, params.gate_chi2);
    let log_det: f64 = l.diagonal().iter().map(|v| 2.0 * v.ln()).sum();
    for (j, z) in frames[k].iter().enumerate() {
        // The coarse gate first: the box around the fine gate's ellipsoid.
        let innovation = z - &predicted;
        if (0..z.len()).any(|i| innovation[i].abs() > box_half[i]) {
            continue;
        }
        let d2 = l.solve_lower_triangular(&innovation)?.norm_squared();
        if d2 > params.gate_chi2 {
            continue;
        }
        let m = z.len() as f64;
        let log_likelihood = -0.5 * (d2 + log_det + m * std::f64::consts::TAU.ln());
        let u = update_given(model, &xp, &pp, chol.clone(), z);
        path.push(j + 1);
        entries.push(Entry::Hit { log_likelihood });
        extend(model, (u.x, u.p), frames, params, path, entries, tree)?;
        path.pop();
        entries.pop();
    }
    Some(())
}

/// Half-widths of the box that holds the fine gate's ellipsoid {ν : νᵀS⁻¹ν ≤ γ} (|ν_i| ≤
/// √(γ S_ii)), from `l`, the Cholesky factor of the innovation covariance S (S_ii is the
/// squared norm of row i of L): a measurement outside it cannot pass the fine gate, and the
/// test needs no triangular solve.
pub fn box_half_widths(l: &DMatrix<f64>, gate_chi2: f64) -> Vec<f64> {
    (0..l.nrows())
        .map(|i| (gate_chi2 * l.row(i).norm_squared()).sqrt())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::philox::{PhiloxStream, Stream};
    use crate::track::smooth::kalman::update;

    /// A model, a track's state, and up to three measurements in each of three frames.
    type Setup = (
        LinearModel,
        DVector<f64>,
        DMatrix<f64>,
        Vec<Vec<DVector<f64>>>,
    );

    fn setup(rng: &mut PhiloxStream) -> Setup {
        let model = LinearModel::constant_velocity(2, 0.1, 1.0, 0.04);
        let x0 = DVector::from_vec(vec![0.0, 0.0, 1.0, 0.5]);
        let p0 = DMatrix::from_diagonal(&DVector::from_vec(vec![0.1, 0.1, 0.5, 0.5]));
        let frames = (1..=3)
            .map(|k| {
                let n = (rng.uniform_f64() * 4.0) as usize;
                (0..n)
                    .map(|_| {
                        let t = 0.1 * f64::from(k);
                        DVector::from_vec(vec![
                            t + 0.6 * rng.normal_f64(),
                            0.5 * t + 0.6 * rng.normal_f64(),
                        ])
                    })
                    .collect()
            })
            .collect();
        (model, x0, p0, frames)
    }

    fn params(max_branches: usize) -> TreeParams {
        TreeParams {
            gate_chi2: 9.21,
            lists: vec![
                ListModel {
                    pd: 0.9,
                    clutter_density: 0.3,
                };
                3
            ],
            max_branches,
        }
    }

    /// C5: the tree holds exactly the gated paths that enumerating every path and filtering
    /// each one sequentially finds, each with that filter's state (1e-9) and the NLLR of its
    /// entries.
    #[test]
    fn the_tree_is_every_gated_path_filtered_along_it() {
        let mut rng = PhiloxStream::new(21, 0, Stream::Simulate);
        let mut grown = 0;
        for case in 0..200 {
            let (model, x0, p0, frames) = setup(&mut rng);
            let pr = params(usize::MAX);
            let tree = grow(&model, &x0, &p0, &frames, &pr).unwrap();
            assert!(!tree.truncated);
            // Every path of the full product, filtered on its own.
            let mut expected = Vec::new();
            let sizes: Vec<usize> = frames.iter().map(|f| f.len() + 1).collect();
            let total: usize = sizes.iter().product();
            for mut code in 0..total {
                let path: Vec<usize> = sizes
                    .iter()
                    .map(|&n| {
                        let c = code % n;
                        code /= n;
                        c
                    })
                    .collect();
                let (mut x, mut p) = (x0.clone(), p0.clone());
                let mut gated = true;
                for (k, &c) in path.iter().enumerate() {
                    x = &model.f * &x;
                    p = symmetric(&model.f * &p * model.f.transpose() + &model.q);
                    if c > 0 {
                        let z = &frames[k][c - 1];
                        let s = &model.h * &p * model.h.transpose() + &model.r;
                        let v = z - &model.h * &x;
                        let d2 = (v.transpose() * s.clone().try_inverse().unwrap() * &v)[(0, 0)];
                        gated &= d2 <= pr.gate_chi2;
                        (x, p) = update(&model, &x, &p, z).unwrap();
                    }
                }
                if gated {
                    expected.push((path, x, p));
                }
            }
            assert_eq!(tree.branches.len(), expected.len(), "case {case}");
            for (path, x, p) in &expected {
                let b = tree
                    .branches
                    .iter()
                    .find(|b| &b.path == path)
                    .expect("the path is in the tree");
                assert!(
                    (&b.x - x).amax() < 1e-9 && (&b.p - p).amax() < 1e-9,
                    "case {case} {path:?}"
                );
            }
            grown += tree.branches.len();
        }
        assert!(grown > 400, "{grown} branches in all");
    }

    /// A path's cost is the NLLR of its entries: all misses cost Σ -ln(1 - P_D); and a tree
    /// larger than `max_branches` is cut and says so.
    #[test]
    fn costs_and_the_limit() {
        let mut rng = PhiloxStream::new(22, 0, Stream::Simulate);
        let (model, x0, p0, frames) = setup(&mut rng);
        let tree = grow(&model, &x0, &p0, &frames, &params(usize::MAX)).unwrap();
        let misses = tree
            .branches
            .iter()
            .find(|b| b.path.iter().all(|&c| c == 0))
            .unwrap();
        assert!((misses.cost + 3.0 * 0.1f64.ln()).abs() < 1e-12);
        let cut = grow(&model, &x0, &p0, &frames, &params(1)).unwrap();
        assert_eq!(cut.branches.len(), 1);
        assert_eq!(cut.truncated, tree.branches.len() > 1);
    }

    /// C4: of 100,000 measurements drawn from the predicted measurement's distribution, the
    /// gate at χ²(2) 0.99 (9.21) passes 99 % ± 0.5 %; the coarse box never turns away one the
    /// fine gate would pass (checked on draws four times as wide), and turns away most of what
    /// the fine gate would.
    #[test]
    fn the_gates_pass_their_probability_and_the_box_holds_the_ellipse() {
        let mut rng = PhiloxStream::new(23, 0, Stream::Simulate);
        let model = LinearModel::constant_velocity(2, 0.1, 1.0, 0.04);
        let x0 = DVector::from_vec(vec![0.0, 0.0, 1.0, 0.5]);
        let p0 = DMatrix::from_vec(
            4,
            4,
            vec![
                0.2, 0.05, 0.01, 0.0, //
                0.05, 0.1, 0.0, 0.02, //
                0.01, 0.0, 0.5, 0.1, //
                0.0, 0.02, 0.1, 0.4,
            ],
        );
        let xp = &model.f * &x0;
        let pp = symmetric(&model.f * &p0 * model.f.transpose() + &model.q);
        let s = &model.h * &pp * model.h.transpose() + &model.r;
        let l = s.clone().cholesky().unwrap().l();
        let mean = &model.h * &xp;
        let draw = |rng: &mut PhiloxStream, spread: f64| -> DVector<f64> {
            &mean + &l * DVector::from_vec(vec![rng.normal_f64(), rng.normal_f64()]) * spread
        };
        let pr = params(usize::MAX);
        let n = 100_000;
        let mut passed = 0;
        let mut candidates = 0;
        for _ in 0..n {
            let z = draw(&mut rng, 1.0);
            let tree = grow(&model, &x0, &p0, &[vec![z]], &pr).unwrap();
            passed += tree.branches.len() - 1;
            candidates += tree.branches.len();
        }
        let share = passed as f64 / f64::from(n);
        eprintln!("gated {share:.4} of true measurements ({candidates} candidates)");
        assert!((share - 0.99).abs() < 0.005, "{share}");
        let half = box_half_widths(&l, pr.gate_chi2);
        let s_inv = s.try_inverse().unwrap();
        let (mut boxed_out, mut fine_out) = (0, 0);
        for _ in 0..n {
            let z = draw(&mut rng, 4.0);
            let v = &z - &mean;
            let fine = (v.transpose() * &s_inv * &v)[(0, 0)] <= pr.gate_chi2;
            let in_box = (0..2).all(|i| v[i].abs() <= half[i]);
            assert!(in_box || !fine, "the box turned away {v}");
            fine_out += usize::from(!fine);
            boxed_out += usize::from(!in_box);
        }
        assert!(boxed_out * 10 > fine_out * 7, "{boxed_out} of {fine_out}");
    }
}
