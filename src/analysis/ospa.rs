//! The OSPA distance between a set of tracks and a set of targets (Schuhmacher, Vo and Vo 2008),
//! with its optimal assignment.

use serde::Serialize;

use crate::math::assign::hungarian_rect;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OspaSummary {
    pub c_m: f64,
    pub p: f64,
    /// Mean over scored frames.
    pub mean_m: f64,
    pub median_m: f64,
    pub frames: usize,
    /// Mean number of reports and of truth targets per scored frame.
    pub mean_tracks: f64,
    pub mean_targets: f64,
}

/// OSPA distance between sets `x` and `y` (distances `d[i][j]` given), cut-off `c`, order `p`;
/// also the optimal assignment: for each x, the y it is paired with (when closer than c).
pub fn ospa(d: &[Vec<f64>], m: usize, n: usize, c: f64, p: f64) -> (f64, Vec<Option<usize>>) {
    let k = m.max(n);
    if k == 0 {
        return (0.0, Vec::new());
    }
    let cp = c.powf(p);
    // The smaller set is assigned into the larger (the rest of the larger pays c^p each).
    let cut = |i: usize, j: usize| d[i][j].min(c).powf(p);
    let pairs_x: Vec<Option<usize>> = if m <= n {
        let cost: Vec<Vec<f64>> = (0..m)
            .map(|i| (0..n).map(|j| cut(i, j)).collect())
            .collect();
        hungarian_rect(&cost, n).into_iter().map(Some).collect()
    } else {
        let cost: Vec<Vec<f64>> = (0..n)
            .map(|j| (0..m).map(|i| cut(i, j)).collect())
            .collect();
        let mut x = vec![None; m];
        for (j, i) in hungarian_rect(&cost, m).into_iter().enumerate() {
            x[i] = Some(j);
        }
        x
    };
    let assigned: f64 = pairs_x
        .iter()
        .enumerate()
        .filter_map(|(i, j)| j.map(|j| cut(i, j)))
        .sum();
    let total = assigned + (k - m.min(n)) as f64 * cp;
    let pairs = pairs_x
        .iter()
        .enumerate()
        .map(|(i, j)| j.filter(|&j| d[i][j] < c))
        .collect();
    ((total / k as f64).powf(1.0 / p), pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OSPA by hand: targets at 0 and 10 (on a line), tracks at 1 and 30; c = 5, p = 1.
    /// Pairs: 0-1 (distance 1), 10-30 (cut to 5): (1 + 5) / 2 = 3. One extra track far away:
    /// (1 + 5 + 5) / 3. Empty against two targets: c.
    #[test]
    fn ospa_by_hand() {
        let d = vec![vec![1.0, 30.0], vec![9.0, 20.0]];
        let (v, pairs) = ospa(&d, 2, 2, 5.0, 1.0);
        assert!((v - 3.0).abs() < 1e-12, "{v}");
        assert_eq!(pairs, vec![Some(0), None]);
        let d3 = vec![vec![1.0, 30.0, 50.0], vec![9.0, 20.0, 40.0]];
        let (v3, _) = ospa(&d3, 2, 3, 5.0, 1.0);
        assert!((v3 - 11.0 / 3.0).abs() < 1e-12, "{v3}");
        let (v0, _) = ospa(&[vec![], vec![]], 2, 0, 5.0, 1.0);
        assert!((v0 - 5.0).abs() < 1e-12);
        // p = 2: sqrt((1 + 25) / 2).
        let (v2, _) = ospa(&d, 2, 2, 5.0, 2.0);
        assert!((v2 - 13.0f64.sqrt()).abs() < 1e-12);
        assert_eq!(ospa(&[], 0, 0, 5.0, 1.0).0, 0.0);
    }

    /// One target against many reports (and many against one) is a rectangular assignment, not
    /// a padded square one (O(n³), seconds for a few thousand reports), with the same value as by hand.
    #[test]
    fn many_reports_against_one_target_are_a_rectangular_assignment() {
        let n = 3000;
        let d = vec![(0..n).map(|j| 1.0 + j as f64).collect::<Vec<f64>>()];
        let (v, pairs) = ospa(&d, 1, n, 5.0, 1.0);
        assert_eq!(pairs, vec![Some(0)]);
        assert!((v - (1.0 + 5.0 * (n - 1) as f64) / n as f64).abs() < 1e-12);
        let dt: Vec<Vec<f64>> = (0..n).map(|i| vec![1.0 + i as f64]).collect();
        let (vt, pt) = ospa(&dt, n, 1, 5.0, 1.0);
        assert!((vt - v).abs() < 1e-12);
        assert_eq!(pt[0], Some(0));
        assert!(pt[1..].iter().all(|p| p.is_none()));
    }
}
