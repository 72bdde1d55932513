//! Track-to-track fusion across nodes: each node's track state nearest the fusion time,
//! brought to that time, associated into fused tracks and fused by covariance intersection.
//!
//! Association keeps history: a node track stays linked to its fused track while it gates
//! against the fused estimate of the track's other members; it is unlinked only after
//! `unlink_after` consecutive misses. Unlinked node tracks join fused tracks by GNN (the
//! project's Hungarian solver on χ² distances, gated, one track per node per fused track), node
//! by node; those that join none start a fused track. Two fused tracks whose node sets are
//! disjoint and whose estimates gate for `merge_after` consecutive steps are one source: the
//! younger merges into the older, whose id stays. So a fused id outlives any one node's track
//! and any one node.
//!
//! Clock skew between nodes: a report is predicted (constant velocity) from its own
//! sample-clock time to the fusion time; gating compares two estimates under the sum of their
//! covariances plus τ² v vᵀ for the configured skew tolerance τ, the position difference a
//! clock off by τ would make. (Only the gate: a covariance that large along the track would
//! flatten the fusion's weights.)

use std::collections::{BTreeMap, VecDeque};

use nalgebra::{Matrix3, Matrix6, Vector6};

use crate::fusion::ci::{Estimate, covariance_intersection, mahalanobis2};
use crate::fusion::report::NodeTrack;
use crate::math::assign::hungarian_rect;

/// Association and timing parameters (`[fusion]` of fuse.toml).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FuseParams {
    /// χ² gate on position (3 degrees of freedom).
    pub gate_chi2: f64,
    /// A node track not heard from for this long is dropped (s).
    pub max_age_s: f64,
    /// Clock skew tolerated between nodes (s).
    pub skew_s: f64,
    /// Georeferencing error of each array (m, one sigma per axis), added to every node
    /// track's position covariance: two arrays' surveys never agree exactly.
    pub survey_std_m: f64,
    pub unlink_after: u32,
    pub merge_after: u32,
    /// Steps a node track that left its fused track stays a tentative fused track of its own
    /// before it is confirmed; should the track it left lose its last member meanwhile, it
    /// returns to that track's id.
    pub split_probation: u32,
    /// Fuse tentative node tracks too (default: confirmed and coasting only).
    pub tentative: bool,
}

impl Default for FuseParams {
    fn default() -> Self {
        Self {
            // χ²(3) at 0.999.
            gate_chi2: 16.27,
            max_age_s: 2.0,
            skew_s: 0.5,
            survey_std_m: 0.1,
            unlink_after: 5,
            merge_after: 5,
            split_probation: 20,
            tentative: false,
        }
    }
}

/// States held per node track: the fusion time trails the reports by `delay_s`, and the state
/// nearest that time beats one extrapolated back from the newest.
const HISTORY: usize = 128;

/// A node track's key: (node, the node's track id).
pub type Key = (String, u64);

/// One fused track's output at a step.
#[derive(Debug, Clone, PartialEq)]
pub struct FusedEstimate {
    pub id: u64,
    pub x: Vector6<f64>,
    pub p: Matrix6<f64>,
    /// The node tracks it fuses, in the order they joined.
    pub members: Vec<Key>,
    /// Steps since the fused track began.
    pub age: u64,
    /// Split from another fused track and not yet confirmed on its own.
    pub tentative: bool,
}

/// Why a fused track ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusedEnd {
    /// Its last node track ended, went stale or its node went offline.
    Lost,
    /// Found to be the same source as the fused track `into`.
    Merged { into: u64 },
}

#[derive(Debug, Default)]
struct Fused {
    /// In the order they joined.
    members: Vec<Key>,
    /// Consecutive gate misses of each member against the others.
    misses: BTreeMap<Key, u32>,
    /// Consecutive steps gating with each younger fused track (for merging).
    close: BTreeMap<u64, u32>,
    /// Its last fused estimate and that estimate's time.
    last: Option<(f64, Estimate)>,
    age: u64,
    /// Split from this fused track, with the steps of probation left (then it is confirmed).
    split_from: Option<(u64, u32)>,
}

/// The fusion state.
#[derive(Debug, Default)]
pub struct Fuser {
    params: FuseParams,
    /// Each node track's recent states, oldest first (at most [`HISTORY`], none older than
    /// `max_age_s` before the newest).
    latest: BTreeMap<Key, VecDeque<NodeTrack>>,
    fused: BTreeMap<u64, Fused>,
    link: BTreeMap<Key, u64>,
    next_id: u64,
}

/// What one step gives.
#[derive(Debug, Default)]
pub struct StepOutput {
    pub tracks: Vec<FusedEstimate>,
    pub ended: Vec<(u64, FusedEnd)>,
}

impl Fuser {
    pub fn new(params: FuseParams) -> Self {
        Self {
            params,
            next_id: 1,
            ..Self::default()
        }
    }

    /// A node's track state (an older state than the one held is ignored).
    pub fn report(&mut self, t: NodeTrack) {
        if !(t.confirmed || self.params.tentative) {
            return;
        }
        let key = (t.node.clone(), t.id);
        let h = self.latest.entry(key).or_default();
        if h.back().is_some_and(|old| old.t >= t.t) {
            return;
        }
        let newest = t.t;
        h.push_back(t);
        while h.len() > HISTORY
            || h.front()
                .is_some_and(|o| newest - o.t > self.params.max_age_s)
        {
            h.pop_front();
        }
    }

    /// Node `node` ended its track `id`.
    pub fn ended(&mut self, node: &str, id: u64) {
        self.forget(&(node.to_string(), id));
    }

    /// Node `node` went offline (its last will, or a clean goodbye): all its tracks end.
    pub fn node_gone(&mut self, node: &str) {
        let keys: Vec<Key> = self
            .latest
            .keys()
            .filter(|k| k.0 == node)
            .cloned()
            .collect();
        for k in keys {
            self.forget(&k);
        }
    }

    /// Node tracks held now.
    pub fn node_tracks(&self) -> usize {
        self.latest.len()
    }

    /// Fused tracks held now.
    pub fn fused_tracks(&self) -> usize {
        self.fused.len()
    }

    /// Node tracks of `node` held now.
    pub fn tracks_of(&self, node: &str) -> usize {
        self.latest.keys().filter(|k| k.0 == node).count()
    }

    fn forget(&mut self, key: &Key) {
        self.latest.remove(key);
        if let Some(f) = self.link.remove(key) {
            if let Some(fused) = self.fused.get_mut(&f) {
                fused.members.retain(|k| k != key);
                fused.misses.remove(key);
            }
        }
    }

    /// Fuse at time `now` (UTC seconds).
    pub fn step(&mut self, now: f64) -> StepOutput {
        let stale: Vec<Key> = self
            .latest
            .iter()
            .filter(|(_, h)| h.back().is_none_or(|t| now - t.t > self.params.max_age_s))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &stale {
            self.forget(k);
        }
        let predicted: BTreeMap<Key, Estimate> = self
            .latest
            .iter()
            .filter_map(|(k, h)| {
                let t = h
                    .iter()
                    .min_by(|a, b| (a.t - now).abs().total_cmp(&(b.t - now).abs()))?;
                Some((k.clone(), self.predict(t, now)))
            })
            .collect();
        let left = self.check_links(&predicted, now);
        self.assign_unlinked(&predicted, &left);
        let mut out = StepOutput::default();
        self.merge_duplicates(&predicted, &mut out);
        self.end_probations(&mut out);
        let empty: Vec<u64> = self
            .fused
            .iter()
            .filter(|(_, f)| f.members.is_empty())
            .map(|(id, _)| *id)
            .collect();
        for id in empty {
            self.fused.remove(&id);
            out.ended.push((id, FusedEnd::Lost));
        }
        for (id, f) in &mut self.fused {
            f.age += 1;
            if let Some((x, p)) = estimate_of(&f.members, &predicted) {
                f.last = Some((now, (x, p)));
                out.tracks.push(FusedEstimate {
                    id: *id,
                    x,
                    p,
                    members: f.members.clone(),
                    age: f.age,
                    tentative: f.split_from.is_some(),
                });
            }
        }
        out
    }

    /// A node track at time `now`: constant velocity from its own time, plus the survey term.
    fn predict(&self, t: &NodeTrack, now: f64) -> Estimate {
        let (x, mut p) = constant_velocity(&(t.x, t.p), now - t.t);
        let survey = Matrix3::identity() * self.params.survey_std_m.powi(2);
        let mut pos = p.fixed_view_mut::<3, 3>(0, 0);
        pos += survey;
        (x, p)
    }

    /// Unlink members that no longer gate against the rest of their fused track.
    /// Returns the node tracks that left, each with the fused track it left.
    fn check_links(&mut self, pred: &BTreeMap<Key, Estimate>, now: f64) -> BTreeMap<Key, u64> {
        let gate = self.params.gate_chi2;
        let limit = self.params.unlink_after;
        let skew = self.params.skew_s;
        let mut unlinked = Vec::new();
        for f in self.fused.values_mut() {
            if f.members.len() < 2 {
                continue;
            }
            let members = f.members.clone();
            for k in &members {
                let others: Vec<Key> = members.iter().filter(|o| *o != k).cloned().collect();
                let (Some(me), Some(rest)) = (pred.get(k), estimate_of(&others, pred)) else {
                    continue;
                };
                let s = gate_cov(skew, me, &rest);
                let ok = mahalanobis2(&me.0, &rest.0, &s).is_some_and(|d| d <= gate);
                let m = f.misses.entry(k.clone()).or_default();
                *m = if ok { 0 } else { *m + 1 };
            }
            // At most one a step (with two members both miss together): the one farthest
            // from where the fused track itself was heading, so that the fused id stays with
            // the member it has been following; without that, the one that joined last.
            let over: Vec<&Key> = members
                .iter()
                .filter(|k| f.misses.get(*k).is_some_and(|m| *m >= limit))
                .collect();
            let course = f.last.as_ref().map(|(t, e)| constant_velocity(e, now - t));
            let drift = |k: &Key| -> f64 {
                let (Some(x), Some(me)) = (&course, pred.get(k)) else {
                    return 0.0;
                };
                // (In the course's own metric: a member's wide covariance must not make it
                // look near.)
                mahalanobis2(&me.0, &x.0, &x.1.fixed_view::<3, 3>(0, 0).into_owned())
                    .unwrap_or(f64::INFINITY)
            };
            let leaving = over
                .iter()
                .rev()
                .copied()
                .max_by(|a, b| drift(a).total_cmp(&drift(b)));
            if let Some(k) = leaving {
                f.members.retain(|m| m != k);
                f.misses.remove(k);
                unlinked.push(k.clone());
            }
        }
        let mut left = BTreeMap::new();
        for k in unlinked {
            log::info!("fusion: {}:{} no longer fits its fused track", k.0, k.1);
            if let Some(f) = self.link.remove(&k) {
                left.insert(k, f);
            }
        }
        left
    }

    /// GNN, node by node, of the unlinked node tracks to fused tracks without a track of that
    /// node; the rest start fused tracks.
    /// (`left`: node tracks that just left a fused track, and which; a new fused track of one
    /// starts on probation.)
    fn assign_unlinked(&mut self, pred: &BTreeMap<Key, Estimate>, left: &BTreeMap<Key, u64>) {
        let mut by_node: BTreeMap<String, Vec<Key>> = BTreeMap::new();
        for k in pred.keys().filter(|k| !self.link.contains_key(*k)) {
            by_node.entry(k.0.clone()).or_default().push(k.clone());
        }
        for (node, keys) in by_node {
            let candidates: Vec<(u64, Estimate)> = self
                .fused
                .iter()
                .filter(|(_, f)| !f.members.is_empty() && !f.members.iter().any(|m| m.0 == node))
                .filter_map(|(id, f)| estimate_of(&f.members, pred).map(|e| (*id, e)))
                .collect();
            let (gate, skew) = (self.params.gate_chi2, self.params.skew_s);
            let cols = candidates.len() + keys.len();
            let cost: Vec<Vec<f64>> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let me = &pred[k];
                    let mut row: Vec<f64> = candidates
                        .iter()
                        .map(|(_, e)| {
                            let s = gate_cov(skew, me, e);
                            mahalanobis2(&me.0, &e.0, &s)
                                .filter(|d| *d <= gate)
                                .unwrap_or(f64::INFINITY)
                        })
                        .collect();
                    // One "new track" column per row, at the gate's cost.
                    row.extend((0..keys.len()).map(|j| if j == i { gate } else { f64::INFINITY }));
                    row
                })
                .collect();
            let cols_of = hungarian_rect(&cost, cols);
            for (i, k) in keys.iter().enumerate() {
                let j = cols_of[i];
                let id = if j < candidates.len() && cost[i][j].is_finite() {
                    candidates[j].0
                } else {
                    let id = self.next_id;
                    self.next_id += 1;
                    // (One that has just left a fused track starts on probation.)
                    let split_from = left.get(k).map(|from| (*from, self.params.split_probation));
                    self.fused.insert(
                        id,
                        Fused {
                            split_from,
                            ..Fused::default()
                        },
                    );
                    id
                };
                if let Some(f) = self.fused.get_mut(&id) {
                    f.members.push(k.clone());
                }
                self.link.insert(k.clone(), id);
            }
        }
    }

    /// Count down the probation of fused tracks split from another: one whose origin has lost
    /// its last member returns into it (the source keeps its id when the member that left
    /// turns out to be the one that stayed with it); one that outlasts its probation is
    /// confirmed as a track of its own.
    fn end_probations(&mut self, out: &mut StepOutput) {
        let on_probation: Vec<(u64, u64, u32)> = self
            .fused
            .iter()
            .filter_map(|(id, f)| f.split_from.map(|(from, left)| (*id, from, left)))
            .collect();
        for (id, from, left) in on_probation {
            let orphaned = self.fused.get(&from).is_some_and(|o| o.members.is_empty());
            if orphaned {
                let Some(g) = self.fused.remove(&id) else {
                    continue;
                };
                for k in &g.members {
                    self.link.insert(k.clone(), from);
                }
                if let Some(o) = self.fused.get_mut(&from) {
                    o.members.extend(g.members);
                    o.misses.clear();
                }
                log::info!("fusion: fused track {id} returns to track {from}");
                out.ended.push((id, FusedEnd::Merged { into: from }));
            } else if let Some(f) = self.fused.get_mut(&id) {
                // (Its first step is the first of its probation.)
                if f.age > 0 {
                    f.split_from = (left > 1).then_some((from, left - 1));
                }
            }
        }
    }

    /// Merge fused tracks that are one source (disjoint nodes, gating for `merge_after`
    /// steps): the younger (larger id) into the older.
    fn merge_duplicates(&mut self, pred: &BTreeMap<Key, Estimate>, out: &mut StepOutput) {
        let est: Vec<(u64, Vec<String>, Estimate)> = self
            .fused
            .iter()
            .filter_map(|(id, f)| {
                let nodes = f.members.iter().map(|m| m.0.clone()).collect();
                estimate_of(&f.members, pred).map(|e| (*id, nodes, e))
            })
            .collect();
        let skew = self.params.skew_s;
        let mut merges = Vec::new();
        for (i, (a, na, ea)) in est.iter().enumerate() {
            for (b, nb, eb) in &est[i + 1..] {
                let disjoint = !na.iter().any(|n| nb.contains(n));
                let s = gate_cov(skew, ea, eb);
                let close = disjoint
                    && mahalanobis2(&ea.0, &eb.0, &s).is_some_and(|d| d <= self.params.gate_chi2);
                let Some(f) = self.fused.get_mut(a) else {
                    continue;
                };
                let streak = f.close.entry(*b).or_default();
                *streak = if close { *streak + 1 } else { 0 };
                if *streak >= self.params.merge_after {
                    merges.push((*a, *b));
                }
            }
        }
        for (keep, gone) in merges {
            if !self.fused.contains_key(&keep) {
                continue;
            }
            let Some(g) = self.fused.remove(&gone) else {
                continue;
            };
            for k in &g.members {
                self.link.insert(k.clone(), keep);
            }
            if let Some(f) = self.fused.get_mut(&keep) {
                f.members.extend(g.members);
                f.close.remove(&gone);
            }
            log::info!("fusion: fused track {gone} is track {keep}; merged");
            out.ended.push((gone, FusedEnd::Merged { into: keep }));
        }
    }
}

/// `e` moved `dt` seconds at its velocity.
fn constant_velocity(e: &Estimate, dt: f64) -> Estimate {
    let mut f = Matrix6::identity();
    for k in 0..3 {
        f[(k, k + 3)] = dt;
    }
    (f * e.0, f * e.1 * f.transpose())
}

/// The covariance two estimates' positions are compared under: the sum of theirs, plus
/// τ² v vᵀ for a relative clock error up to τ = `skew` s.
fn gate_cov(skew: f64, a: &Estimate, b: &Estimate) -> Matrix3<f64> {
    let v = (a.0.fixed_rows::<3>(3) + b.0.fixed_rows::<3>(3)) * 0.5;
    a.1.fixed_view::<3, 3>(0, 0) + b.1.fixed_view::<3, 3>(0, 0) + v * v.transpose() * skew.powi(2)
}

/// The covariance intersection of the predicted states of `members`.
fn estimate_of(members: &[Key], pred: &BTreeMap<Key, Estimate>) -> Option<Estimate> {
    let items: Vec<Estimate> = members
        .iter()
        .filter_map(|k| pred.get(k))
        .copied()
        .collect();
    covariance_intersection(&items)
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
