use super::*;
use crate::rng::philox::{PhiloxStream, Stream};

/// A node's report of a source at `pos` moving at `vel`, with position noise of `std` (m)
/// per axis drawn from `rng` and reported honestly (an ellipse `stretch` times longer along x).
struct Node {
    name: &'static str,
    std: f64,
    stretch: [f64; 3],
    rng: PhiloxStream,
}

impl Node {
    fn new(name: &'static str, std: f64, stretch: [f64; 3], seed: u64) -> Self {
        Self {
            name,
            std,
            stretch,
            rng: PhiloxStream::new(seed, 0, Stream::Simulate),
        }
    }

    fn report(&mut self, id: u64, t: f64, pos: [f64; 3], vel: [f64; 3]) -> NodeTrack {
        let mut x = Vector6::zeros();
        let mut p = Matrix6::zeros();
        for k in 0..3 {
            let s = self.std * self.stretch[k];
            x[k] = pos[k] + s * self.rng.normal_f64();
            x[k + 3] = vel[k];
            p[(k, k)] = s * s;
            p[(k + 3, k + 3)] = 0.01;
        }
        NodeTrack {
            node: self.name.into(),
            id,
            confirmed: true,
            t,
            x,
            p,
        }
    }
}

fn source(t: f64) -> ([f64; 3], [f64; 3]) {
    ([-20.0 + 1.5 * t, 5.0, -3.0], [1.5, 0.0, 0.0])
}

fn params() -> FuseParams {
    FuseParams {
        survey_std_m: 0.0,
        ..FuseParams::default()
    }
}

/// Two arrays with crossed error ellipses hear one source: one fused id throughout, fusing
/// both, with a smaller error than either array's.
#[test]
fn one_source_two_nodes_one_fused_track() {
    let mut f = Fuser::new(params());
    let mut a = Node::new("a", 0.2, [4.0, 1.0, 1.0], 1);
    let mut b = Node::new("b", 0.2, [1.0, 4.0, 1.0], 2);
    let (mut ea, mut eb, mut ef) = (0.0, 0.0, 0.0);
    let mut ids = std::collections::BTreeSet::new();
    for i in 0..200 {
        let t = i as f64 * 0.1;
        let (pos, vel) = source(t);
        let (ra, rb) = (a.report(1, t, pos, vel), b.report(4, t, pos, vel));
        let err = |x: &Vector6<f64>| (0..3).map(|k| (x[k] - pos[k]).powi(2)).sum::<f64>();
        ea += err(&ra.x);
        eb += err(&rb.x);
        f.report(ra);
        f.report(rb);
        let out = f.step(t);
        assert_eq!(out.tracks.len(), 1, "step {i}");
        let tr = &out.tracks[0];
        ids.insert(tr.id);
        assert_eq!(tr.members.len(), 2);
        ef += err(&tr.x);
    }
    assert_eq!(ids.len(), 1);
    let (ra, rb, rf) = (
        (ea / 200.0).sqrt(),
        (eb / 200.0).sqrt(),
        (ef / 200.0).sqrt(),
    );
    assert!(
        rf < 0.7 * ra.min(rb),
        "fused {rf:.3} m against {ra:.3} and {rb:.3}"
    );
}

/// A source only node b hears keeps one fused track of its own beside the shared one.
#[test]
fn a_source_heard_by_one_node_keeps_one_track() {
    let mut f = Fuser::new(params());
    let mut a = Node::new("a", 0.2, [1.0; 3], 3);
    let mut b = Node::new("b", 0.2, [1.0; 3], 4);
    for i in 0..50 {
        let t = i as f64 * 0.1;
        let (pos, vel) = source(t);
        f.report(a.report(1, t, pos, vel));
        f.report(b.report(1, t, pos, vel));
        f.report(b.report(2, t, [30.0, -40.0, -2.0], [0.0; 3]));
        let out = f.step(t);
        assert_eq!(out.tracks.len(), 2, "step {i}");
        let lone = out.tracks.iter().find(|e| e.x[0] > 25.0).unwrap();
        assert_eq!(lone.members, vec![("b".to_string(), 2)]);
    }
}

/// A node that renumbers its track, a node that goes offline: the fused id stays while any
/// node still holds the source.
#[test]
fn fused_ids_outlive_node_tracks_and_nodes() {
    let mut f = Fuser::new(params());
    let mut a = Node::new("a", 0.2, [1.0; 3], 5);
    let mut b = Node::new("b", 0.2, [1.0; 3], 6);
    let mut ids = std::collections::BTreeSet::new();
    for i in 0..120 {
        let t = i as f64 * 0.1;
        let (pos, vel) = source(t);
        // Node a loses its track at step 40 and starts track 9 on the same source.
        let a_id = if i < 40 { 1 } else { 9 };
        if i == 40 {
            f.ended("a", 1);
        }
        if i < 80 {
            f.report(a.report(a_id, t, pos, vel));
        } else if i == 80 {
            f.node_gone("a");
        }
        f.report(b.report(3, t, pos, vel));
        let out = f.step(t);
        assert_eq!(out.tracks.len(), 1, "step {i}");
        assert!(out.ended.is_empty(), "step {i}: {:?}", out.ended);
        ids.insert(out.tracks[0].id);
        let nodes = out.tracks[0].members.len();
        assert_eq!(nodes, if i < 80 { 2 } else { 1 }, "step {i}");
    }
    assert_eq!(ids.len(), 1);
}

/// A node track that starts far off (outside the gate) makes a second fused track; once it
/// sits on the source the two merge into the older id.
#[test]
fn duplicates_merge_into_the_older_id() {
    let mut f = Fuser::new(params());
    let mut a = Node::new("a", 0.2, [1.0; 3], 7);
    let mut b = Node::new("b", 0.2, [1.0; 3], 8);
    let mut ended = Vec::new();
    let mut last = Vec::new();
    for i in 0..40 {
        let t = i as f64 * 0.1;
        let (pos, vel) = source(t);
        f.report(a.report(1, t, pos, vel));
        let off = if i < 10 { 5.0 } else { 0.0 };
        f.report(b.report(2, t, [pos[0], pos[1] + off, pos[2]], vel));
        let out = f.step(t);
        ended.extend(out.ended);
        last = out.tracks;
    }
    assert_eq!(ended, vec![(2, FusedEnd::Merged { into: 1 })]);
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].id, 1);
    assert_eq!(last[0].members.len(), 2);
}

/// Node b's clock runs 0.4 s behind: its reports carry times 0.4 s early for a source doing
/// 1.5 m/s (0.6 m apart, 3σ of each). With the skew tolerance the two fuse into one track;
/// without, they stay apart.
#[test]
fn clock_skew_within_the_tolerance_still_fuses() {
    for (skew, want) in [(0.5, 1usize), (0.0, 2)] {
        let mut f = Fuser::new(FuseParams {
            skew_s: skew,
            ..params()
        });
        let mut a = Node::new("a", 0.1, [1.0; 3], 9);
        let mut b = Node::new("b", 0.1, [1.0; 3], 10);
        let mut n = 0;
        for i in 0..100 {
            let t = i as f64 * 0.1;
            let (pos, vel) = source(t);
            f.report(a.report(1, t, pos, vel));
            f.report(b.report(1, t - 0.4, pos, vel));
            n = f.step(t).tracks.len();
        }
        assert_eq!(n, want, "skew tolerance {skew}");
    }
}

/// A node track not heard from for `max_age_s` is dropped, and its fused track ends.
#[test]
fn stale_tracks_end() {
    let mut f = Fuser::new(params());
    let mut a = Node::new("a", 0.2, [1.0; 3], 11);
    let (pos, vel) = source(0.0);
    f.report(a.report(1, 0.0, pos, vel));
    assert_eq!(f.step(0.0).tracks.len(), 1);
    assert_eq!(f.step(1.9).tracks.len(), 1);
    let out = f.step(2.1);
    assert!(out.tracks.is_empty());
    assert_eq!(out.ended, vec![(1, FusedEnd::Lost)]);
    assert_eq!(f.node_tracks(), 0);
}

/// Node b's track drifts off the source (a wrong solution) while a's stays: after
/// `unlink_after` misses b leaves, as a tentative fused track of its own until its probation
/// ends; the source's fused id stays with a.
#[test]
fn a_member_that_leaves_is_on_probation() {
    let p = params();
    let mut f = Fuser::new(p.clone());
    let mut a = Node::new("a", 0.05, [1.0; 3], 1);
    let mut b = Node::new("b", 0.05, [1.0; 3], 2);
    let mut first = None;
    let mut split = None;
    for i in 0..100 {
        let t = i as f64 * 0.1;
        let (pos, vel) = source(t);
        let off = if i >= 30 { 0.5 * (i - 29) as f64 } else { 0.0 };
        f.report(a.report(1, t, pos, vel));
        f.report(b.report(1, t, [pos[0], pos[1] + off, pos[2]], vel));
        let out = f.step(t);
        let id_a = out
            .tracks
            .iter()
            .find(|e| e.members.iter().any(|m| m.0 == "a"))
            .unwrap();
        assert!(!id_a.tentative);
        assert_eq!(*first.get_or_insert(id_a.id), id_a.id, "step {i}");
        if let Some(e) = out.tracks.iter().find(|e| e.id != id_a.id) {
            assert_eq!(e.members, vec![("b".to_string(), 1)]);
            let since = *split.get_or_insert(i);
            assert_eq!(
                e.tentative,
                i - since < p.split_probation as usize,
                "step {i}"
            );
        }
    }
    assert!(split.is_some_and(|s| s > 30 && s < 50), "{split:?}");
}

/// The same split, but then a's track ends while b's is on probation: b's track was the
/// source's after all, and returns to the source's fused id.
#[test]
fn a_split_returns_when_the_track_it_left_ends() {
    let mut f = Fuser::new(params());
    let mut a = Node::new("a", 0.05, [1.0; 3], 1);
    let mut b = Node::new("b", 0.05, [1.0; 3], 2);
    let mut ids = std::collections::BTreeSet::new();
    let mut returned = false;
    for i in 0..80 {
        let t = i as f64 * 0.1;
        let (pos, vel) = source(t);
        let off = if (30..45).contains(&i) {
            0.5 * (i - 29) as f64
        } else {
            0.0
        };
        if i < 45 {
            f.report(a.report(1, t, [pos[0], pos[1] - off, pos[2]], vel));
        } else if i == 45 {
            f.ended("a", 1);
        }
        f.report(b.report(1, t, pos, vel));
        let out = f.step(t);
        returned |= out
            .ended
            .iter()
            .any(|(_, why)| matches!(why, FusedEnd::Merged { .. }));
        for e in out.tracks.iter().filter(|e| !e.tentative) {
            ids.insert(e.id);
        }
        if i > 45 {
            assert_eq!(out.tracks.len(), 1, "step {i}");
            assert_eq!(out.tracks[0].members, vec![("b".to_string(), 1)]);
            assert!(!out.tracks[0].tentative);
        }
    }
    assert!(returned);
    assert_eq!(ids.len(), 1, "confirmed fused ids {ids:?}");
}
