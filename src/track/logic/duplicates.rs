//! Tracks that follow the same source as an older track: each frame in which a track predicts
//! every informative pair's TDOA within the gate of an older live track counts towards
//! [`DUPLICATE_AFTER_S`], after which the younger goes.

use crate::track::gate::Gates;

/// A track that predicts the same TDOAs as an older one for this long is deleted as its
/// duplicate.
pub const DUPLICATE_AFTER_S: f64 = 0.5;

/// One track as the rule sees it: its gates, the step it just took and the time it has
/// shared an older track's TDOAs so far.
pub struct DuplicateRow<'a> {
    pub gates: &'a Gates,
    pub dt_s: f64,
    pub shared_s: &'a mut f64,
    /// Already going this frame (left out on both sides).
    pub dead: bool,
}

/// Per row, in order, the older row it duplicates once it has for [`DUPLICATE_AFTER_S`] (its
/// shared time updated on the way).
pub fn duplicates(
    rows: &mut [DuplicateRow],
    informative: &[usize],
    gate_sigmas: f32,
) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    for j in 1..rows.len() {
        if rows[j].dead {
            continue;
        }
        let older = (0..j).filter(|&i| !rows[i].dead).find(|&i| {
            let (a, b) = (rows[i].gates, rows[j].gates);
            !informative.is_empty()
                && informative.iter().all(|&p| {
                    let gate = gate_sigmas * a.spread_s[p].max(b.spread_s[p]);
                    (a.predicted_s[p] - b.predicted_s[p]).abs() <= gate
                })
        });
        let row = &mut rows[j];
        match older {
            Some(_) => *row.shared_s += row.dt_s,
            // (A frame without an informative pair says nothing either way.)
            None if informative.is_empty() => {}
            None => *row.shared_s = 0.0,
        }
        if let Some(i) = older.filter(|_| *row.shared_s >= DUPLICATE_AFTER_S) {
            row.dead = true;
            found.push((j, i));
        }
    }
    found
}
