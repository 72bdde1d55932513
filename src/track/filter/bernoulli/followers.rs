//! A track's filter on the curves: a Bernoulli filter over position, velocity and coherence
//! (its existence with it), stepped on the track's own view of the frame (the curves less the
//! templates of the other tracks whose lobes overlap its own: the joint template), seeded from
//! a peaks track's state or handed over by the curves search.

use super::DrawKey;
use super::existence::Chain;
use super::filter::{BernoulliFilter, BernoulliParams};
use crate::rng::philox::{Stream, normals6, uniform};
use crate::track::Estimate;
use crate::track::measure::MeasurementModel;
use crate::track::measure::curves::reader::{CurvesReader, Held};
use crate::track::measure::curves::{CurveFrame, CurveModel, DIM};
use crate::track::motion::models::Kinematics;
use crate::track::report::{TrackReport, TrackStatus, report};

/// A track's filter on the curves, and what its logic keeps of it.
#[derive(Debug, Clone)]
pub struct Follower {
    pub filter: BernoulliFilter,
    /// Its existence has passed the confirmation threshold.
    pub confirmed: bool,
    /// The last frame's mean state.
    pub mean: Vec<f64>,
    /// Consecutive frames its mean has spent at the search volume's edge.
    pub edge_frames: usize,
    /// `auto`: consecutive frames its peaks track has coasted, and whether the track's last
    /// report came from the follower (the peaks coasting long enough).
    pub coast_frames: usize,
    pub reporting: bool,
    /// Its place among the followers: they are stepped, and their existence ruled, oldest
    /// first (a follower seeded again keeps its place).
    pub order: u64,
}

impl Follower {
    /// A confirmed follower of `filter` (the search's hand-over) at `mean`, in place `order`.
    pub fn confirmed(filter: BernoulliFilter, mean: Vec<f64>, order: u64) -> Self {
        Self {
            filter,
            confirmed: true,
            mean,
            edge_frames: 0,
            coast_frames: 0,
            reporting: false,
            order,
        }
    }

    /// Its mean position.
    pub fn position(&self) -> [f64; 3] {
        [self.mean[0], self.mean[1], self.mean[2]]
    }
}

/// A track's filter: no births (a new source is the search's), the chain's lifetime.
pub fn track_params(chain: Chain, particles: usize) -> BernoulliParams {
    BernoulliParams {
        chain: Chain {
            p_birth: 0.0,
            ..chain
        },
        n_birth: 0,
        n_cont: particles,
    }
}

/// Step every track's follower (`(id, follower)`, in order) one frame on the frame `reader`
/// read, each on its own view of it ([`CurvesReader`]'s: with `joint`, less the overlapping
/// tracks' templates at their last means; a track seeded this frame has no amplitude yet and
/// is not subtracted). A follower whose existence reaches `confirm` is confirmed; one whose
/// mean sits within `edge_m` of the volume's faces counts a frame at the edge.
pub fn step_all(
    tracks: &mut [(u64, &mut Follower)],
    reader: &CurvesReader,
    joint: bool,
    confirm: f64,
    edge_m: f64,
) {
    let held: Vec<Held> = tracks
        .iter()
        .map(|(id, t)| Held {
            id: *id,
            position: t.position(),
            amplitude: t.mean.get(6).copied().filter(|_| joint),
        })
        .collect();
    let model = reader.model();
    let mut seen = CurveFrame::default();
    for (i, (_, t)) in tracks.iter_mut().enumerate() {
        reader.view(i, &held, &mut seen);
        let s = t.filter.step(model, &seen);
        t.mean = s.mean;
        if s.existence.p >= confirm {
            t.confirmed = true;
        }
        if model.at_edge(&t.mean, edge_m) {
            t.edge_frames += 1;
        } else {
            t.edge_frames = 0;
        }
    }
}

/// How a track is seeded from a peaks track's report.
pub struct Seed<'a> {
    pub model: &'a CurveModel,
    pub params: BernoulliParams,
    pub seed: u64,
    /// Its filter's random-number key.
    pub key: u32,
    /// Its existence at the start.
    pub p0: f64,
}

/// A follower of report `r`'s track in place `order`, its particles drawn from the report's
/// Gaussian (spreads at least 0.5 m and 0.3 m/s) and coherences from the prior.
pub fn seeded(s: &Seed, r: &TrackReport, order: u64) -> Follower {
    let n = s.params.n_cont;
    let g = &r.state;
    let mut cov = nalgebra::Matrix6::from_fn(|i, j| g.cov[i][j]);
    for k in 0..6 {
        let floor = if k < 3 { 0.25 } else { 0.09 };
        cov[(k, k)] = cov[(k, k)].max(floor);
    }
    let l = nalgebra::Cholesky::new(cov)
        .map(|c| c.l())
        .unwrap_or_else(|| nalgebra::Matrix6::from_diagonal_element(0.5));
    let (lo, hi) = s.model.coherence_range();
    let mut x = Vec::with_capacity(n * DIM);
    for i in 0..n {
        let k = DrawKey {
            seed: s.seed,
            frame: 0,
            track: s.key,
            particle: i as u32,
        };
        let z6 = normals6(k.words(Stream::InitPosition)).map(f64::from);
        let u = uniform(k.words(Stream::InitVelocity)[0]);
        let d = l * nalgebra::Vector6::from(z6);
        for k in 0..6 {
            x.push(g.mean[k] + d[k]);
        }
        x.push(lo + f64::from(u) * (hi - lo));
    }
    let filter = BernoulliFilter::seeded(s.params, DIM, s.seed, s.key, s.p0, x);
    Follower::confirmed(filter, g.mean.to_vec(), order)
}

/// Track `id`'s report from its follower `t`: the particles' mean and covariance of position
/// and velocity, their coherence and existence.
pub fn curve_report(
    id: u64,
    t: &Follower,
    status: TrackStatus,
    seq: u64,
    t_centre_s: f64,
) -> TrackReport {
    let x = t.filter.particles();
    let n = (x.len() / DIM).max(1) as f64;
    let mut mean = [0.0; 6];
    for p in x.chunks(DIM) {
        for k in 0..6 {
            mean[k] += p[k] / n;
        }
    }
    let mut cov = [[0.0; 6]; 6];
    for p in x.chunks(DIM) {
        for i in 0..6 {
            for j in 0..6 {
                cov[i][j] += (p[i] - mean[i]) * (p[j] - mean[j]) / n;
            }
        }
    }
    let coherence = x.chunks(DIM).map(|p| p[6]).sum::<f64>() / n;
    let e = Estimate {
        mean,
        cov,
        model_probs: Vec::new(),
        turn_rate: 0.0,
        ess: n as f32,
        resampled: true,
        log_evidence: 0.0,
        chosen_model: None,
        temper: 1.0,
    };
    let kin = Kinematics::ThreeD;
    let mut r = report(id, t_centre_s, &e, status, seq, t_centre_s, None, kin, None);
    r.coherence = Some(coherence as f32);
    r.existence = Some(t.filter.p_exist() as f32);
    r
}
