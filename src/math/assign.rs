//! Assignment solvers: the minimum-cost assignment of rows to columns, shared by the tracker and
//! the evaluation.

/// Minimum-cost assignment of rows to columns of a square cost matrix (Hungarian algorithm,
/// O(n³)). Returns the column of each row.
pub fn hungarian(cost: &[Vec<f64>]) -> Vec<usize> {
    hungarian_rect(cost, cost.len())
}

/// Minimum-cost assignment of every row to a distinct column, for `rows <= cols` columns
/// (each row of `cost` at least `cols` long): O(rows² cols), so one target against thousands
/// of reports costs little. Returns the column of each row. A cost that is not finite is
/// treated as larger than every finite one (the search would otherwise never end).
pub fn hungarian_rect(cost: &[Vec<f64>], cols: usize) -> Vec<usize> {
    let n = cost.len();
    let m = cols;
    if n == 0 {
        return Vec::new();
    }
    assert!(n <= m, "hungarian_rect: {n} rows but {m} columns");
    let largest = cost
        .iter()
        .flat_map(|r| r[..m].iter())
        .copied()
        .filter(|c| c.is_finite())
        .fold(0.0f64, |a, c| a.max(c.abs()));
    // Large enough that no finite assignment is worse, small enough to stay finite in sums.
    let big = (largest + 1.0) * (n as f64 + 1.0);
    let at = |i: usize, j: usize| {
        let c = cost[i][j];
        if c.is_finite() { c } else { big }
    };
    // Potentials formulation (1-based arrays with a virtual column 0).
    let inf = f64::INFINITY;
    let mut u = vec![0.0; n + 1];
    let mut v = vec![0.0; m + 1];
    let mut p = vec![0usize; m + 1];
    let mut way = vec![0usize; m + 1];
    for i in 1..=n {
        p[0] = i;
        let mut j0 = 0usize;
        let mut minv = vec![inf; m + 1];
        let mut used = vec![false; m + 1];
        loop {
            used[j0] = true;
            let i0 = p[j0];
            let mut delta = inf;
            let mut j1 = 0usize;
            for j in 1..=m {
                if used[j] {
                    continue;
                }
                let cur = at(i0 - 1, j - 1) - u[i0] - v[j];
                if cur < minv[j] {
                    minv[j] = cur;
                    way[j] = j0;
                }
                if minv[j] < delta {
                    delta = minv[j];
                    j1 = j;
                }
            }
            for j in 0..=m {
                if used[j] {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
            if p[j0] == 0 {
                break;
            }
        }
        loop {
            let j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
            if j0 == 0 {
                break;
            }
        }
    }
    let mut ans = vec![0usize; n];
    for j in 1..=m {
        if p[j] > 0 {
            ans[p[j] - 1] = j - 1;
        }
    }
    ans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hungarian_finds_the_optimum() {
        let c = vec![
            vec![4.0, 1.0, 3.0],
            vec![2.0, 0.0, 5.0],
            vec![3.0, 2.0, 2.0],
        ];
        let a = hungarian(&c);
        let total: f64 = a.iter().enumerate().map(|(i, &j)| c[i][j]).sum();
        assert_eq!(total, 5.0); // 1 + 2 + 2
        let mut seen = a.clone();
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2]);
    }

    /// The rectangular form equals the square form padded with zero-cost dummy rows, on random
    /// matrices; a NaN or infinite cost ends (it is the worst choice, not an endless search).
    #[test]
    fn rectangular_assignment_matches_the_padded_square_one() {
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..300 {
            let rows = 1 + (next() * 6.0) as usize;
            let cols = rows + (next() * 5.0) as usize;
            let c: Vec<Vec<f64>> = (0..rows)
                .map(|_| (0..cols).map(|_| (next() * 10.0).round()).collect())
                .collect();
            let a = hungarian_rect(&c, cols);
            let rect: f64 = a.iter().enumerate().map(|(i, &j)| c[i][j]).sum();
            let mut sq = c.clone();
            sq.resize(cols, vec![0.0; cols]);
            let b = hungarian(&sq);
            let square: f64 = (0..rows).map(|i| sq[i][b[i]]).sum();
            assert_eq!(rect, square);
            let mut seen = a.clone();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), rows);
        }
        let bad = vec![
            vec![f64::NAN, 1.0, f64::INFINITY],
            vec![f64::INFINITY, f64::NAN, 2.0],
        ];
        assert_eq!(hungarian_rect(&bad, 3), vec![1, 2]);
        let all_bad = vec![vec![f64::NAN; 2]; 2];
        let a = hungarian(&all_bad);
        assert_ne!(a[0], a[1]);
    }
}
