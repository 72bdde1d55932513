//! Assignment with dummies: the 2-D problem (rows and columns may each go unassigned, at their
//! own cost) and the S-D problem of multi-frame assignment, solved by Lagrangian relaxation
//! (Deb, Yeddanapudi, Pattipati and Bar-Shalom 1997; Poore and Rijavec 1993).
//!
//! An S-D problem has S index lists; index 0 of each is the dummy ("missed", "no track") and may
//! be used any number of times, every real index (1..=n) exactly once. A candidate is a tuple of
//! one index per list with its cost; a solution is a set of candidates covering every real index
//! once. The relaxation lifts the constraints of lists 2..S into multipliers, solves the 2-D
//! problem that leaves on lists 0 and 1, and recovers a feasible solution by fixing the chosen
//! (list 0, list 1) pairs and solving the (S-1)-D problem on them, down to 2-D. It returns the
//! best feasible solution found, with the lower bound that proves how far from optimal it is at
//! worst.

use super::assign::{hungarian, hungarian_rect};

/// One candidate: an index per list (0 the dummy) and its cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub idx: Vec<usize>,
    pub cost: f64,
}

/// An S-D assignment problem: the real indices of each list (`sizes[s]`: 1..=sizes[s]) and the
/// candidates (finite costs, at least one real index each).
#[derive(Debug, Clone, PartialEq)]
pub struct SdProblem {
    pub sizes: Vec<usize>,
    pub candidates: Vec<Candidate>,
}

/// A solution: the candidates chosen (indices into the problem's list), their total cost,
/// and the best lower bound on the optimum (equal to `cost` when proved optimal).
#[derive(Debug, Clone, PartialEq)]
pub struct SdSolution {
    pub chosen: Vec<usize>,
    pub cost: f64,
    pub lower_bound: f64,
    /// Relaxation iterations used (0 for a 2-D problem, solved exactly).
    pub iterations: usize,
}

impl SdSolution {
    /// (cost - lower bound) / |cost|: at most how far from optimal, relatively.
    pub fn gap(&self) -> f64 {
        (self.cost - self.lower_bound).max(0.0) / self.cost.abs().max(1e-12)
    }
}

/// When the relaxation stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SdLimits {
    pub max_iterations: usize,
    /// Stop once the relative gap is below this.
    pub gap: f64,
}

impl Default for SdLimits {
    /// MATLAB `assignsd`'s defaults: 100 iterations, a 1 % gap.
    fn default() -> Self {
        Self {
            max_iterations: 100,
            gap: 0.01,
        }
    }
}

impl SdProblem {
    /// Why the problem is malformed (None: it is well formed). It need not be feasible.
    pub fn problem(&self) -> Option<String> {
        if self.sizes.len() < 2 {
            return Some(format!(
                "{} lists (an assignment needs 2 or more)",
                self.sizes.len()
            ));
        }
        for (k, c) in self.candidates.iter().enumerate() {
            if c.idx.len() != self.sizes.len() {
                return Some(format!(
                    "candidate {k} has {} indices for {} lists",
                    c.idx.len(),
                    self.sizes.len()
                ));
            }
            if let Some(s) = (0..c.idx.len()).find(|&s| c.idx[s] > self.sizes[s]) {
                return Some(format!(
                    "candidate {k}: index {} of list {s} is beyond its {}",
                    c.idx[s], self.sizes[s]
                ));
            }
            if c.idx.iter().all(|&i| i == 0) {
                return Some(format!("candidate {k} is all dummies"));
            }
            if !c.cost.is_finite() {
                return Some(format!("candidate {k}: cost {}", c.cost));
            }
        }
        None
    }
}

/// The 2-D problem with dummies on lists 0 and 1: `pair(i, j)` is the cost of pairing real or
/// dummy indices (None: not allowed; `pair(0, 0)` is never asked). Returns the chosen pairs
/// (each real index in exactly one) and their total cost, or None when no assignment covers
/// every real index.
pub fn assign_2d(
    rows: usize,
    cols: usize,
    pair: impl Fn(usize, usize) -> Option<f64>,
) -> Option<(Vec<(usize, usize)>, f64)> {
    let free: Option<Vec<f64>> = (1..=cols).map(|j| pair(0, j)).collect();
    match free {
        Some(free) => assign_2d_rect(rows, cols, &pair, &free),
        None => assign_2d_square(rows, cols, &pair),
    }
}

/// [`assign_2d`] when every column may go unassigned (at `free[j - 1]`): rows against the
/// columns and one "miss" column per row, each real column's cost less its unassigned cost, so
/// an O(rows² (rows + cols)) rectangular problem.
fn assign_2d_rect(
    rows: usize,
    cols: usize,
    pair: &impl Fn(usize, usize) -> Option<f64>,
    free: &[f64],
) -> Option<(Vec<(usize, usize)>, f64)> {
    let base: f64 = free.iter().sum();
    let width = cols + rows;
    let inf = f64::INFINITY;
    let m: Vec<Vec<f64>> = (1..=rows)
        .map(|i| {
            let mut row = vec![inf; width];
            for j in 1..=cols {
                row[j - 1] = pair(i, j).map_or(inf, |c| c - free[j - 1]);
            }
            row[cols + i - 1] = pair(i, 0).unwrap_or(inf);
            row
        })
        .collect();
    let a = hungarian_rect(&m, width);
    let mut pairs = Vec::new();
    let mut total = base;
    let mut taken = vec![false; cols + 1];
    for (r, &c) in a.iter().enumerate() {
        if !m[r][c].is_finite() {
            return None;
        }
        total += m[r][c];
        if c < cols {
            pairs.push((r + 1, c + 1));
            taken[c + 1] = true;
        } else {
            pairs.push((r + 1, 0));
        }
    }
    pairs.extend((1..=cols).filter(|&j| !taken[j]).map(|j| (0, j)));
    Some((pairs, total))
}

/// [`assign_2d`] in general: a square problem of rows + cols, real rows against real columns
/// and one "dummy column" per row (its cost on the diagonal), one "dummy row" per column
/// likewise, and dummy against dummy at no cost.
fn assign_2d_square(
    rows: usize,
    cols: usize,
    pair: &impl Fn(usize, usize) -> Option<f64>,
) -> Option<(Vec<(usize, usize)>, f64)> {
    let n = rows + cols;
    if n == 0 {
        return Some((Vec::new(), 0.0));
    }
    let inf = f64::INFINITY;
    let mut m = vec![vec![inf; n]; n];
    for i in 0..rows {
        for j in 0..cols {
            m[i][j] = pair(i + 1, j + 1).unwrap_or(inf);
        }
        m[i][cols + i] = pair(i + 1, 0).unwrap_or(inf);
    }
    for j in 0..cols {
        m[rows + j][j] = pair(0, j + 1).unwrap_or(inf);
        for i in 0..rows {
            m[rows + j][cols + i] = 0.0;
        }
    }
    let a = hungarian(&m);
    let mut pairs = Vec::new();
    let mut total = 0.0;
    for (r, &c) in a.iter().enumerate() {
        let cost = m[r][c];
        if !cost.is_finite() {
            return None;
        }
        total += cost;
        match (r < rows, c < cols) {
            (true, true) => pairs.push((r + 1, c + 1)),
            (true, false) => pairs.push((r + 1, 0)),
            (false, true) => pairs.push((0, c + 1)),
            (false, false) => {}
        }
    }
    Some((pairs, total))
}

/// Solve an S-D problem (S >= 2). None when it is malformed or no solution covers every real
/// index.
pub fn solve_sd(p: &SdProblem, limits: SdLimits) -> Option<SdSolution> {
    if p.problem().is_some() {
        return None;
    }
    if p.sizes.len() == 2 {
        return solve_2d_problem(p);
    }
    relax(p, limits)
}

/// The S = 2 case exactly: the cheapest candidate of each pair.
fn solve_2d_problem(p: &SdProblem) -> Option<SdSolution> {
    let best = best_by_pair(p, |c| c.cost);
    let (pairs, cost) = assign_2d(p.sizes[0], p.sizes[1], |i, j| {
        best.get(&(i, j)).map(|&(c, _)| c)
    })?;
    let chosen = pairs.iter().map(|ij| best[ij].1).collect();
    Some(SdSolution {
        chosen,
        cost,
        lower_bound: cost,
        iterations: 0,
    })
}

/// For each (list 0, list 1) pair, its cheapest candidate under `reduced` (cost, index); pairs
/// (0, 0) are left out.
fn best_by_pair(
    p: &SdProblem,
    reduced: impl Fn(&Candidate) -> f64,
) -> std::collections::HashMap<(usize, usize), (f64, usize)> {
    let mut best = std::collections::HashMap::new();
    for (k, c) in p.candidates.iter().enumerate() {
        if c.idx[0] == 0 && c.idx[1] == 0 {
            continue;
        }
        let r = reduced(c);
        best.entry((c.idx[0], c.idx[1]))
            .and_modify(|b: &mut (f64, usize)| {
                if r < b.0 {
                    *b = (r, k);
                }
            })
            .or_insert((r, k));
    }
    best
}

/// Lagrangian relaxation of lists 2..S with subgradient (Polyak) steps.
fn relax(p: &SdProblem, limits: SdLimits) -> Option<SdSolution> {
    let s_count = p.sizes.len();
    // Multipliers of lists 2..S (u[s][0] stays 0: the dummy is free).
    let mut u: Vec<Vec<f64>> = p.sizes.iter().map(|&n| vec![0.0; n + 1]).collect();
    let mut best: Option<SdSolution> = None;
    let mut lower = f64::NEG_INFINITY;
    let mut rho = 2.0;
    let mut stalled = 0;
    let mut iterations = 0;
    for it in 1..=limits.max_iterations.max(1) {
        iterations = it;
        let reduced = |c: &Candidate| c.cost - (2..s_count).map(|s| u[s][c.idx[s]]).sum::<f64>();
        let by_pair = best_by_pair(p, reduced);
        let (pairs, cost2) = assign_2d(p.sizes[0], p.sizes[1], |i, j| {
            by_pair.get(&(i, j)).map(|&(c, _)| c)
        })?;
        // Candidates starting (0, 0) cover only relaxed lists: each is taken when it pays.
        let free: Vec<usize> = (0..p.candidates.len())
            .filter(|&k| {
                let c = &p.candidates[k];
                c.idx[0] == 0 && c.idx[1] == 0 && reduced(c) < 0.0
            })
            .collect();
        let free_cost: f64 = free.iter().map(|&k| reduced(&p.candidates[k])).sum();
        let multipliers: f64 = (2..s_count).map(|s| u[s][1..].iter().sum::<f64>()).sum();
        let dual = cost2 + free_cost + multipliers;
        if dual > lower + 1e-12 * dual.abs().max(1.0) {
            lower = dual;
            stalled = 0;
        } else {
            stalled += 1;
            if stalled >= 10 {
                rho /= 2.0;
                stalled = 0;
            }
        }
        let relaxed: Vec<usize> = pairs
            .iter()
            .map(|ij| by_pair[ij].1)
            .chain(free.iter().copied())
            .collect();
        // The subgradient: 1 - how often each relaxed real index is used.
        let mut g: Vec<Vec<f64>> = p.sizes.iter().map(|&n| vec![1.0; n + 1]).collect();
        for &k in &relaxed {
            for s in 2..s_count {
                g[s][p.candidates[k].idx[s]] -= 1.0;
            }
        }
        let norm2: f64 = (2..s_count)
            .map(|s| g[s][1..].iter().map(|v| v * v).sum::<f64>())
            .sum();
        if norm2 == 0.0 {
            // The relaxed solution is feasible: optimal.
            let cost = relaxed.iter().map(|&k| p.candidates[k].cost).sum();
            return Some(SdSolution {
                chosen: relaxed,
                cost,
                lower_bound: cost,
                iterations: it,
            });
        }
        if let Some(found) = recover(p, &pairs, limits) {
            if best.as_ref().is_none_or(|b| found.cost < b.cost) {
                best = Some(found);
            }
        }
        let target = match &best {
            Some(b) => b.cost,
            None => dual + 0.1 * dual.abs() + 1.0,
        };
        if let Some(b) = &best {
            if (b.cost - lower) <= limits.gap * b.cost.abs().max(1e-12) {
                break;
            }
        }
        let step = rho * (target - dual).max(1e-9) / norm2;
        for s in 2..s_count {
            for i in 1..u[s].len() {
                u[s][i] += step * g[s][i];
            }
        }
    }
    best.map(|mut b| {
        // (A bound above the best found is rounding: the best found is then optimal.)
        b.lower_bound = lower.min(b.cost);
        b.iterations = iterations;
        b
    })
}

/// A feasible solution from the relaxed one: the (list 0, list 1) pairs it chose become one
/// list, and the (S-1)-D problem on them and lists 2..S is solved (recursively, down to 2-D).
/// A pair of two real indices with no candidate that leaves lists 2..S to their dummies gets
/// one: its two singles together, so that every merged index can be completed.
fn recover(p: &SdProblem, pairs: &[(usize, usize)], limits: SdLimits) -> Option<SdSolution> {
    let merged: std::collections::HashMap<(usize, usize), usize> = pairs
        .iter()
        .enumerate()
        .map(|(k, ij)| (*ij, k + 1))
        .collect();
    let mut sub = SdProblem {
        sizes: std::iter::once(pairs.len())
            .chain(p.sizes[2..].iter().copied())
            .collect(),
        candidates: Vec::new(),
    };
    // Each sub-problem candidate's candidates in `p`.
    let mut origin: Vec<Vec<usize>> = Vec::new();
    let rest_dummy = |c: &Candidate| c.idx[2..].iter().all(|&r| r == 0);
    let mut completed = vec![false; pairs.len() + 1];
    for (k, c) in p.candidates.iter().enumerate() {
        let head = if c.idx[0] == 0 && c.idx[1] == 0 {
            0
        } else if let Some(&m) = merged.get(&(c.idx[0], c.idx[1])) {
            completed[m] |= rest_dummy(c);
            m
        } else {
            continue;
        };
        let idx: Vec<usize> = std::iter::once(head)
            .chain(c.idx[2..].iter().copied())
            .collect();
        sub.candidates.push(Candidate { idx, cost: c.cost });
        origin.push(vec![k]);
    }
    let single = |i: usize, j: usize| {
        p.candidates
            .iter()
            .position(|c| c.idx[0] == i && c.idx[1] == j && rest_dummy(c))
    };
    for (m, &(i, j)) in pairs.iter().enumerate() {
        if completed[m + 1] || i == 0 || j == 0 {
            continue;
        }
        if let (Some(a), Some(b)) = (single(i, 0), single(0, j)) {
            let mut idx = vec![0; sub.sizes.len()];
            idx[0] = m + 1;
            sub.candidates.push(Candidate {
                idx,
                cost: p.candidates[a].cost + p.candidates[b].cost,
            });
            origin.push(vec![a, b]);
        }
    }
    let limits = SdLimits {
        max_iterations: limits.max_iterations.min(20),
        ..limits
    };
    let s = solve_sd(&sub, limits)?;
    Some(SdSolution {
        chosen: s
            .chosen
            .iter()
            .flat_map(|&k| origin[k].iter().copied())
            .collect(),
        cost: s.cost,
        lower_bound: f64::NEG_INFINITY,
        iterations: 0,
    })
}

#[cfg(test)]
#[path = "sd_assign_tests.rs"]
mod tests;
