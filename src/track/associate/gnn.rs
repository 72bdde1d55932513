//! Global-nearest-neighbour assignment of peaks to tracks, one sensor pair at a time, by
//! Bertsekas's auction algorithm with a dummy per track (the track takes no peak: a missed
//! detection). The costs are the squared normalised distances of the gated peaks; a pair outside
//! a track's gate is forbidden. [`crate::math::assign::hungarian`] is the test oracle.

use crate::track::gate::Gates;

/// A forbidden pairing (outside the gate).
pub const FORBIDDEN: f64 = f64::INFINITY;

/// The minimum-cost assignment of rows (tracks) to columns (peaks), each row to at most one
/// column and each column to at most one row, where leaving row `r` unassigned costs `miss`
/// and `cost[r][c]` may be [`FORBIDDEN`]. Returns each row's column, or None.
///
/// Forward auction on benefits −cost with ε = 1e-7 of the largest cost: the result is optimal
/// to within rows × ε (a few millionths for the squared distances of order one to ten used
/// here).
pub fn auction(cost: &[Vec<f64>], miss: f64) -> Vec<Option<usize>> {
    let rows = cost.len();
    let cols = cost.first().map_or(0, Vec::len);
    if rows == 0 {
        return Vec::new();
    }
    // Columns: the real ones, then one dummy per row (only that row may take it).
    let n_cols = cols + rows;
    let benefit = |r: usize, c: usize| -> f64 {
        if c < cols {
            -cost[r][c]
        } else if c - cols == r {
            -miss
        } else {
            f64::NEG_INFINITY
        }
    };
    let finite_max = cost
        .iter()
        .flatten()
        .chain(std::iter::once(&miss))
        .filter(|v| v.is_finite())
        .fold(1.0f64, |m, v| m.max(v.abs()));
    // One forward phase from zero prices: the columns nobody takes keep the lowest price,
    // which is what makes the forward auction exact for more columns than rows (ε-scaling
    // would need a reverse phase for that).
    let eps = 1e-7 * finite_max;
    let mut price = vec![0.0f64; n_cols];
    let mut owner: Vec<Option<usize>> = vec![None; n_cols];
    let mut assigned: Vec<Option<usize>> = vec![None; rows];
    let mut queue: Vec<usize> = (0..rows).rev().collect();
    while let Some(r) = queue.pop() {
        let (mut best, mut v1, mut v2) = (usize::MAX, f64::NEG_INFINITY, f64::NEG_INFINITY);
        for c in 0..n_cols {
            let v = benefit(r, c) - price[c];
            if v > v1 {
                v2 = v1;
                v1 = v;
                best = c;
            } else if v > v2 {
                v2 = v;
            }
        }
        if best == usize::MAX {
            continue;
        }
        // With one usable column (its dummy), the bid just takes it.
        let step = if v2.is_finite() { v1 - v2 + eps } else { eps };
        price[best] += step;
        if let Some(prev) = owner[best].replace(r) {
            assigned[prev] = None;
            queue.push(prev);
        }
        assigned[r] = Some(best);
    }
    assigned
        .into_iter()
        .map(|a| a.filter(|&c| c < cols))
        .collect()
}

/// The total cost of an assignment (missed rows at `miss`).
pub fn total_cost(cost: &[Vec<f64>], miss: f64, a: &[Option<usize>]) -> f64 {
    a.iter()
        .enumerate()
        .map(|(r, c)| c.map_or(miss, |c| cost[r][c]))
        .sum()
}

/// One pair's assignment: `tracks` gives each track's confirmation and gates, `peaks` the pair's
/// peak TDOAs (None: no usable peak there). Confirmed tracks choose first; tentative tracks share
/// what is left. A peak must lie within `gate_sigmas` spreads of a track's predicted TDOA,
/// and a track may take none (a miss costs as much as a peak at the gate's edge). Returns each
/// track's peak index.
pub fn assign_pair(
    tracks: &[(bool, &Gates)],
    pair: usize,
    peaks: &[Option<f32>],
    gate_sigmas: f32,
) -> Vec<Option<usize>> {
    let g2 = gate_sigmas * gate_sigmas;
    let mut out = vec![None; tracks.len()];
    let mut taken = vec![false; peaks.len()];
    for confirmed in [true, false] {
        let rows: Vec<usize> = (0..tracks.len())
            .filter(|&i| tracks[i].0 == confirmed)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let cost: Vec<Vec<f64>> = rows
            .iter()
            .map(|&i| {
                peaks
                    .iter()
                    .enumerate()
                    .map(|(j, tau)| match tau {
                        Some(tau) if !taken[j] => {
                            let d2 = tracks[i].1.d2(pair, *tau);
                            if d2 <= g2 { f64::from(d2) } else { FORBIDDEN }
                        }
                        _ => FORBIDDEN,
                    })
                    .collect()
            })
            .collect();
        for (row, a) in auction(&cost, f64::from(g2)).into_iter().enumerate() {
            if let Some(j) = a {
                taken[j] = true;
                out[rows[row]] = Some(j);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::assign::hungarian;
    use crate::rng::philox::{PhiloxStream, Stream};

    /// The optimum by the Hungarian algorithm on the square matrix with one dummy column per
    /// row (forbidden pairs at a cost no assignment can want).
    fn oracle(cost: &[Vec<f64>], miss: f64) -> f64 {
        let rows = cost.len();
        let cols = cost.first().map_or(0, Vec::len);
        let n = rows + cols;
        let big = 1e6;
        let sq: Vec<Vec<f64>> = (0..n)
            .map(|r| {
                (0..n)
                    .map(|c| {
                        if r < rows && c < cols {
                            if cost[r][c].is_finite() {
                                cost[r][c]
                            } else {
                                big
                            }
                        } else if r < rows {
                            // Row r's dummy is column cols + r.
                            if c - cols == r { miss } else { big }
                        } else if c < cols {
                            // Filler rows take the leftover real columns for nothing.
                            0.0
                        } else {
                            0.0
                        }
                    })
                    .collect()
            })
            .collect();
        let a = hungarian(&sq);
        (0..rows).map(|r| sq[r][a[r]]).sum()
    }

    /// on random gated cost matrices up to 20 × 20 (a third of the pairs forbidden), the
    /// auction's total cost equals the Hungarian optimum, no forbidden pair is assigned, and no
    /// column is used twice.
    #[test]
    fn auction_is_optimal_on_random_gated_matrices() {
        let mut rng = PhiloxStream::new(17, 0, Stream::Simulate);
        for trial in 0..10_000 {
            let rows = 1 + (rng.uniform_f64() * 20.0) as usize;
            let cols = (rng.uniform_f64() * 21.0) as usize;
            let miss = 9.0;
            let cost: Vec<Vec<f64>> = (0..rows)
                .map(|_| {
                    (0..cols)
                        .map(|_| {
                            if rng.uniform_f64() < 0.33 {
                                FORBIDDEN
                            } else {
                                12.0 * rng.uniform_f64()
                            }
                        })
                        .collect()
                })
                .collect();
            let a = auction(&cost, miss);
            let mut used = vec![false; cols];
            for (r, c) in a.iter().enumerate() {
                if let Some(c) = *c {
                    assert!(cost[r][c].is_finite(), "trial {trial}: forbidden pair");
                    assert!(!used[c], "trial {trial}: column used twice");
                    used[c] = true;
                }
            }
            let got = total_cost(&cost, miss, &a);
            let want = oracle(&cost, miss);
            assert!(
                (got - want).abs() <= 1e-7 * 12.0 * rows as f64 + 1e-9,
                "trial {trial} ({rows} x {cols}): {got} against {want}"
            );
        }
    }

    /// The classic case: two tracks both nearest the same peak; the one that loses it least
    /// takes it.
    #[test]
    fn contested_peak_goes_where_it_costs_least() {
        let cost = vec![vec![1.0, 2.0], vec![1.5, FORBIDDEN]];
        assert_eq!(auction(&cost, 9.0), vec![Some(1), Some(0)]);
        // Nothing in a gate: a miss.
        assert_eq!(auction(&[vec![FORBIDDEN]], 9.0), vec![None]);
        assert!(auction(&[], 9.0).is_empty());
    }
    fn gate(predicted: f32, spread: f32) -> Gates {
        Gates {
            predicted_s: vec![predicted],
            spread_s: vec![spread],
        }
    }

    /// a peak in the gates of a confirmed and a tentative track goes to the confirmed
    /// track, even where the tentative track is nearer; the tentative track takes what is left
    /// in its gate, or nothing.
    #[test]
    fn confirmed_tracks_choose_first() {
        let confirmed = gate(0.0, 1.0);
        let tentative = gate(0.5, 1.0);
        // Both gate peak 0 (the tentative track is nearer to it); peak 1 is only in the
        // tentative track's gate.
        let peaks = [Some(0.6), Some(2.5)];
        let got = assign_pair(&[(false, &tentative), (true, &confirmed)], 0, &peaks, 3.0);
        assert_eq!(got, vec![Some(1), Some(0)]);
        // With no leftover in its gate, the tentative track misses.
        let got = assign_pair(
            &[(false, &tentative), (true, &confirmed)],
            0,
            &peaks[..1],
            3.0,
        );
        assert_eq!(got, vec![None, Some(0)]);
        // A peak outside every gate goes to nobody, and a missing peak is never taken.
        let got = assign_pair(&[(true, &confirmed)], 0, &[None, Some(7.0)], 3.0);
        assert_eq!(got, vec![None]);
    }
}
