//! The IMM estimator as the tracker's filter (`tracker.filter = "imm"`): one interacting
//! multiple model estimator per track slot over the tracker's own motion models, behind
//! [`FilterBank`] so that the track manager runs it as it runs the particle filters.
//!
//! - State: the particles' seven components (position, velocity, turn rate), f64; per mode a
//!   mean and covariance, and the mode probabilities.
//! - Mixing: the Markov matrix is the particle filters' model transition matrix, per frame.
//! - Predict: the cubature rule over the state augmented with the motion model's four standard
//!   normal noises; each point is moved by [`models::advance`], the particles' own step. Every
//!   motion model (constant velocity, coordinated turn with its turn-rate random walk,
//!   near-static) and every array mode (3-D; curved or plane wavefronts; a line's half-plane)
//!   is therefore the same model the particles follow.
//! - Update: each pair with peaks in turn, re-linearised after each, in range-difference metres:
//!   a cubature update with probabilistic data association over the pair's peaks. The frame's
//!   per-pair mixture `floor + Σ_k amp_k exp(−ν_k² / 2σ²)` (see [`TdoaMeasurement`]) integrated
//!   over the prediction gives each peak's weight `amp_k (σ/√S) exp(−ν_k² / 2S)`, S = the
//!   predicted spread plus σ²; the floor is the weight of "no peak is the source".
//! - Mode probabilities from each mode's product of those pair ratios. `log_evidence` is the
//!   same ratio to clutter the particle filters report, so the manager's tests of it hold.
//!
//! What it gives up against the particles: one Gaussian per mode cannot hold two solutions of
//! an ambiguous array, nor a newborn track's spread of ranges along a bearing; the manager's
//! births and mirror twins supply the alternatives instead. `ess` reports 0 (no particles) and
//! the model selection is always Markov mixing.

use nalgebra::{SMatrix, SVector};

use crate::error::BackendError;
use crate::track::filter::cubature;
use crate::track::measure::likelihood::{self, GATE_SIGMAS, LikelihoodConsts, MAX_SENSORS};
use crate::track::motion::models::{self, Kinematics, StepCoeffs};
use crate::track::{
    Estimate, FilterBank, FilterParams, Particles, TdoaMeasurement, TrackInit, TrackMode, TrackStep,
};

type V7 = SVector<f64, 7>;
type M7 = SMatrix<f64, 7, 7>;
type V11 = SVector<f64, 11>;
type M11 = SMatrix<f64, 11, 11>;

/// Tracks stepped at once from which a step spreads them over the cores (below, the pool's
/// start-up costs more than it saves: one track-step is about 20 µs).
const PARALLEL_TRACKS: usize = 16;

/// A newborn track's turn-rate spread (rad/s): the particles start at ω = 0 exactly; a little
/// spread keeps the covariance factorable until the turn model's random walk grows it.
const OMEGA0_STD: f64 = 0.01;

/// One mode's Gaussian.
#[derive(Debug, Clone, PartialEq)]
struct Mode {
    x: V7,
    p: M7,
}

/// One track: each mode's estimate and the mode probabilities.
#[derive(Debug, Clone, PartialEq)]
struct Slot {
    modes: Vec<Mode>,
    mu: Vec<f64>,
}

/// A bank of IMM estimators, one per track slot (CPU, f64).
pub struct ImmFilter {
    params: FilterParams,
    kin: Kinematics,
    /// Markov matrix, `pi[from][to]`.
    pi: Vec<Vec<f64>>,
    slots: Vec<Option<Slot>>,
}

impl ImmFilter {
    pub fn new(params: FilterParams) -> Self {
        let pi = markov_from_cdf(&params.transition_cdf, params.n_models());
        Self {
            kin: Kinematics::of(&params),
            slots: vec![None; params.slots],
            pi,
            params,
        }
    }

    /// The Gaussian of a track's prior: the init's mean and covariance, the speed ball's spread
    /// added to the velocity, moved into the array mode's coordinates.
    fn prior(&self, init: &TrackInit) -> Mode {
        let l6 = SMatrix::<f64, 6, 6>::from_fn(|r, c| init.chol[r][c]);
        let mut p = M7::zeros();
        p.fixed_view_mut::<6, 6>(0, 0)
            .copy_from(&(l6 * l6.transpose()));
        // Speed uniform in [0, S], direction uniform: E[v_i²] = S² / 9 per axis.
        let ball = init.speed_ball_m_s * init.speed_ball_m_s / 9.0;
        for i in 3..6 {
            p[(i, i)] += ball;
        }
        p[(6, 6)] = OMEGA0_STD * OMEGA0_STD;
        let x = V7::from_fn(|i, _| if i < 6 { init.mean[i] } else { 0.0 });
        let mut m = Mode { x, p };
        if self.params.mode.angular() {
            self.angular_prior(&mut m, init.inv_range_max);
        }
        m
    }

    /// Direction and line modes: a newborn track's inverse range spread evenly over
    /// [0, max] (curved wavefronts), or its direction on the unit sphere (plane waves), as
    /// `pf::init_particle` draws its particles. A prior drawn from an estimate stays as it is.
    fn angular_prior(&self, m: &mut Mode, inv_range_max: f32) {
        let pos = m.x.fixed_rows::<3>(0).into_owned();
        let n = pos.norm().max(1e-12);
        let u = pos / n;
        let tangent = nalgebra::Matrix3::identity() - u * u.transpose();
        let mut j = M7::identity();
        match self.kin {
            Kinematics::Plane => {
                j.fixed_view_mut::<3, 3>(0, 0).copy_from(&(tangent / n));
                j.fixed_view_mut::<3, 3>(3, 3).copy_from(&tangent);
                m.x = j * m.x;
                m.x.fixed_rows_mut::<3>(0).copy_from(&u);
                m.p = j * m.p * j.transpose();
            }
            Kinematics::Curved if inv_range_max >= 0.0 => {
                let max = f64::from(inv_range_max);
                let rho = 0.5 * max;
                let scale = (1.0 + rho) / n;
                j.fixed_view_mut::<3, 3>(0, 0)
                    .copy_from(&(nalgebra::Matrix3::identity() * scale));
                j.fixed_view_mut::<3, 3>(3, 3)
                    .copy_from(&(nalgebra::Matrix3::identity() * rho));
                let v = m.x.fixed_rows::<3>(3).into_owned();
                m.x = j * m.x;
                m.p = j * m.p * j.transpose();
                // The inverse range's own spread (uniform: max² / 12) along the direction, and
                // through it the velocity's (w = v ρ).
                let var = max * max / 12.0;
                let mut pp = m.p.fixed_view_mut::<3, 3>(0, 0);
                pp += u * u.transpose() * var;
                let mut pv = m.p.fixed_view_mut::<3, 3>(3, 3);
                pv += v * v.transpose() * var;
            }
            _ => {}
        }
        if let Some(line) = &self.params.line {
            let mut s = to_f32(&m.x);
            models::fold_line(&mut s, line);
            m.x = to_f64(&s);
        }
    }

    /// One mode's prediction over `dt` under the model of `c`: the cubature rule over the state
    /// and the step's four noises. None if the covariance cannot be factored.
    fn predict(&self, c: &StepCoeffs, dt: f32, m: &Mode) -> Option<Mode> {
        let l = cubature::factor(&m.p)?;
        let mut la = M11::zeros();
        la.fixed_view_mut::<7, 7>(0, 0).copy_from(&l);
        for i in 7..11 {
            la[(i, i)] = 1.0;
        }
        let xa = V11::from_fn(|i, _| if i < 7 { m.x[i] } else { 0.0 });
        // 3-D steps do not depend on where the source is: each point moves about the mean's
        // position, so that f32 keeps millimetres at a kilometre.
        let origin = match self.kin {
            Kinematics::ThreeD => m.x.fixed_rows::<3>(0).into_owned(),
            _ => nalgebra::Vector3::zeros(),
        };
        let moved: Vec<V7> = cubature::points(&xa, &la)
            .iter()
            .map(|q| {
                let mut s = [0.0f32; 7];
                for (i, v) in s.iter_mut().enumerate() {
                    let o = if i < 3 { origin[i] } else { 0.0 };
                    *v = (q[i] - o) as f32;
                }
                let noise = [q[7] as f32, q[8] as f32, q[9] as f32, q[10] as f32];
                models::advance(c, self.kin, dt, &mut s, noise);
                if let Some(line) = &self.params.line {
                    models::fold_line(&mut s, line);
                }
                V7::from_fn(|i, _| f64::from(s[i]) + if i < 3 { origin[i] } else { 0.0 })
            })
            .collect();
        let (x, p) = cubature::moments(&moved);
        Some(Mode { x, p })
    }

    /// The predicted range difference of pair (a, b), metres (the TDOA times the speed of
    /// sound): in f64 for 3-D tracking, through the particles' own f32 prediction otherwise.
    fn range_difference(&self, k: &LikelihoodConsts, s: &V7, (a, b): (u32, u32), lag: f32) -> f64 {
        let c = f64::from(self.params.speed_of_sound_m_s);
        let (a, b) = (a as usize, b as usize);
        if self.params.mode == TrackMode::ThreeD {
            let pos = s.fixed_rows::<3>(0);
            let vel = s.fixed_rows::<3>(3);
            let term = |m: &[f32; 3]| {
                let d =
                    pos - nalgebra::Vector3::new(f64::from(m[0]), f64::from(m[1]), f64::from(m[2]));
                let r = d.norm().max(1e-6);
                (r, d.dot(&vel) / r)
            };
            let (ra, qa) = term(&self.params.sensors[a]);
            let (rb, qb) = term(&self.params.sensors[b]);
            let delta = f64::from(lag) - 0.5 * (ra + rb) / c;
            return ra - rb + (qa - qb) * delta;
        }
        let mut rho = [0.0f32; MAX_SENSORS];
        let mut rate = [0.0f32; MAX_SENSORS];
        likelihood::sensor_terms(&self.params, k, &to_f32(s), &mut rho, &mut rate);
        f64::from(likelihood::pair_tdoa(k, &rho, &rate, a, b, lag)) * c
    }

    /// Update a mode with pair `pi`'s peaks (probabilistic data association, cubature rule).
    /// Returns the log of the pair's likelihood ratio to clutter; None if the covariance cannot
    /// be factored.
    fn update_pair(
        &self,
        k: &LikelihoodConsts,
        lag: f32,
        meas: &TdoaMeasurement,
        pi: usize,
        m: &mut Mode,
    ) -> Option<f64> {
        let kk = meas.peaks_per_pair;
        let amps = &meas.amp[pi * kk..(pi + 1) * kk];
        let floor = f64::from(meas.floor[pi]);
        if amps.iter().all(|a| *a <= 0.0) {
            return Some(floor.ln());
        }
        let c = f64::from(self.params.speed_of_sound_m_s);
        let l = cubature::factor(&m.p)?;
        let pts = cubature::points(&m.x, &l);
        let h: Vec<SVector<f64, 1>> = pts
            .iter()
            .map(|q| {
                SVector::<f64, 1>::new(self.range_difference(k, q, self.params.pairs[pi], lag))
            })
            .collect();
        let (zhat, pzz) = cubature::moments(&h);
        let w = 1.0 / pts.len() as f64;
        let pxz = pts.iter().zip(&h).fold(V7::zeros(), |acc, (q, z)| {
            acc + (q - m.x) * (z[0] - zhat[0])
        }) * w;
        let sigma = f64::from(meas.sigma_s) * c;
        let r = sigma * sigma;
        let s = pzz[(0, 0)] + r;
        let gate = f64::from(GATE_SIGMAS) * s.sqrt();
        let (mut total, mut b_nu, mut b_nu2) = (floor, 0.0, 0.0);
        for (j, &amp) in amps.iter().enumerate() {
            let nu = f64::from(meas.tdoa_s[pi * kk + j]) * c - zhat[0];
            if amp <= 0.0 || nu.abs() > gate {
                continue;
            }
            let g = f64::from(amp) * (r / s).sqrt() * (-0.5 * nu * nu / s).exp();
            total += g;
            b_nu += g * nu;
            b_nu2 += g * nu * nu;
        }
        if !(total > 0.0) {
            return Some(f64::NEG_INFINITY);
        }
        let hit = (total - floor) / total;
        let nu = b_nu / total;
        let spread = (b_nu2 / total - nu * nu).max(0.0);
        let gain = pxz / s;
        let kkt = gain * gain.transpose();
        m.x += gain * nu;
        m.p += kkt * (spread - hit * s);
        m.p = (m.p + m.p.transpose()) * 0.5;
        Some(total.ln())
    }

    /// Every pair's update of one mode in turn; the sum of their log ratios.
    fn update(
        &self,
        k: &LikelihoodConsts,
        lag: f32,
        meas: &TdoaMeasurement,
        m: &mut Mode,
    ) -> Option<f64> {
        let mut sum = 0.0;
        for pi in 0..meas.pairs().min(self.params.pairs.len()) {
            sum += self.update_pair(k, lag, meas, pi, m)?;
            if sum == f64::NEG_INFINITY {
                break;
            }
        }
        Some(sum)
    }

    /// One IMM cycle of a track: mix, turn with the array, predict and update each mode, weigh
    /// the modes, and write the combined estimate.
    fn cycle(
        &self,
        slot: &mut Slot,
        step: &TrackStep,
        meas: &TdoaMeasurement,
        k: &LikelihoodConsts,
        out: &mut Estimate,
    ) {
        let n = slot.modes.len();
        let c_bar: Vec<f64> = (0..n)
            .map(|j| (0..n).map(|i| self.pi[i][j] * slot.mu[i]).sum())
            .collect();
        let mut next = Vec::with_capacity(n);
        let mut terms = Vec::with_capacity(n);
        for (j, model) in self.params.models.iter().enumerate().take(n) {
            let w: Vec<f64> = (0..n)
                .map(|i| {
                    if c_bar[j] > 0.0 {
                        self.pi[i][j] * slot.mu[i] / c_bar[j]
                    } else {
                        f64::from(u8::from(i == j))
                    }
                })
                .collect();
            let mixed = turned(mix(&slot.modes, &w), step.turn());
            let coeffs = StepCoeffs::new(model, step.dt_s);
            let result = self.predict(&coeffs, step.dt_s, &mixed).and_then(|mut m| {
                let l = self.update(k, step.lag_s, meas, &mut m)?;
                Some((m, l))
            });
            let (m, log_l) = result.unwrap_or((mixed, f64::NEG_INFINITY));
            next.push(m);
            terms.push(if c_bar[j] > 0.0 {
                log_l + c_bar[j].ln()
            } else {
                f64::NEG_INFINITY
            });
        }
        let top = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if top.is_finite() {
            let sum: f64 = terms.iter().map(|t| (t - top).exp()).sum();
            slot.mu = terms.iter().map(|t| (t - top).exp() / sum).collect();
            out.log_evidence = (top + sum.ln()) as f32;
        } else {
            out.log_evidence = f32::NEG_INFINITY;
        }
        slot.modes = next;
        write_estimate(slot, out);
    }
}

/// The Markov matrix of a row-major cumulative transition table (`FilterParams::transition_cdf`).
fn markov_from_cdf(cdf: &[f32], l: usize) -> Vec<Vec<f64>> {
    (0..l)
        .map(|i| {
            (0..l)
                .map(|j| {
                    let hi = f64::from(cdf.get(i * l + j).copied().unwrap_or(1.0));
                    let lo = if j == 0 {
                        0.0
                    } else {
                        f64::from(cdf.get(i * l + j - 1).copied().unwrap_or(1.0))
                    };
                    (hi - lo).max(0.0)
                })
                .collect()
        })
        .collect()
}

/// The mean and covariance of the modes' mixture with weights `w`.
fn mix(modes: &[Mode], w: &[f64]) -> Mode {
    let x = modes
        .iter()
        .zip(w)
        .fold(V7::zeros(), |a, (m, wi)| a + m.x * *wi);
    let p = modes.iter().zip(w).fold(M7::zeros(), |a, (m, wi)| {
        let d = m.x - x;
        a + (m.p + d * d.transpose()) * *wi
    });
    Mode { x, p }
}

/// A mode turned about z with the array (see [`TrackStep::turn`]): position and velocity
/// rotated counter-clockwise by the angle of (sin, cos), the covariance with them.
fn turned(m: Mode, turn: Option<(f32, f32)>) -> Mode {
    let Some((sn, cs)) = turn else {
        return m;
    };
    let (sn, cs) = (f64::from(sn), f64::from(cs));
    let mut r = M7::identity();
    for k in [0, 3] {
        r[(k, k)] = cs;
        r[(k, k + 1)] = -sn;
        r[(k + 1, k)] = sn;
        r[(k + 1, k + 1)] = cs;
    }
    Mode {
        x: r * m.x,
        p: r * m.p * r.transpose(),
    }
}

/// The combined estimate of a slot into `out` (mean, covariance, mode probabilities, turn rate).
fn write_estimate(slot: &Slot, out: &mut Estimate) {
    let c = mix(&slot.modes, &slot.mu);
    for r in 0..6 {
        out.mean[r] = c.x[r];
        for (col, v) in out.cov[r].iter_mut().enumerate() {
            *v = c.p[(r, col)];
        }
    }
    out.model_probs.clear();
    out.model_probs.extend(slot.mu.iter().map(|m| *m as f32));
    out.turn_rate = c.x[6] as f32;
    out.ess = 0.0;
    out.resampled = false;
    out.chosen_model = None;
    out.temper = 1.0;
}

fn to_f32(s: &V7) -> [f32; 7] {
    std::array::from_fn(|i| s[i] as f32)
}

fn to_f64(s: &[f32; 7]) -> V7 {
    V7::from_fn(|i, _| f64::from(s[i]))
}

impl FilterBank for ImmFilter {
    fn backend(&self) -> &'static str {
        "cpu"
    }

    fn params(&self) -> &FilterParams {
        &self.params
    }

    fn init_track(&mut self, init: &TrackInit) -> Result<(), BackendError> {
        let n = self.params.n_models();
        let i = init.slot as usize;
        if i >= self.slots.len() {
            return Err(BackendError::new(
                "cpu",
                format!("IMM filter: slot {i} of {}", self.slots.len()),
            ));
        }
        let prior = self.prior(init);
        let total: f32 = init.model_probs.iter().take(n).sum();
        let mu = (0..n)
            .map(|j| match init.model_probs.get(j) {
                Some(p) if total > 0.0 => f64::from(*p / total),
                _ => 1.0 / n as f64,
            })
            .collect();
        self.slots[i] = Some(Slot {
            modes: vec![prior; n],
            mu,
        });
        Ok(())
    }

    fn step(
        &mut self,
        meas: &TdoaMeasurement,
        tracks: &[TrackStep],
        out: &mut [Estimate],
    ) -> Result<(), BackendError> {
        use rayon::prelude::*;
        let k = LikelihoodConsts::new(&self.params, meas.sigma_s);
        // Every listed track's state out of its slot (put back, and the slot named, if one has
        // no track).
        let mut taken = Vec::with_capacity(tracks.len());
        for t in tracks {
            let i = t.slot as usize;
            let Some(slot) = self.slots.get_mut(i).and_then(Option::take) else {
                for (back, s) in tracks.iter().zip(taken) {
                    self.slots[back.slot as usize] = Some(s);
                }
                return Err(BackendError::new(
                    "cpu",
                    format!("IMM filter: slot {i} has no track"),
                ));
            };
            taken.push(slot);
        }
        // Tracks are independent: many at once are spread over the cores (the same results).
        let this = &*self;
        if tracks.len() >= PARALLEL_TRACKS {
            taken
                .par_iter_mut()
                .zip(tracks.par_iter())
                .zip(out.par_iter_mut())
                .for_each(|((s, t), e)| this.cycle(s, t, meas, &k, e));
        } else {
            for ((s, t), e) in taken.iter_mut().zip(tracks).zip(out.iter_mut()) {
                this.cycle(s, t, meas, &k, e);
            }
        }
        for (t, s) in tracks.iter().zip(taken) {
            self.slots[t.slot as usize] = Some(s);
        }
        Ok(())
    }

    /// The combined estimate's cubature points, equally weighted, each with the likeliest mode.
    fn read_particles(&mut self, slot: u32) -> Result<Particles, BackendError> {
        let missing = || BackendError::new("cpu", format!("IMM filter: slot {slot} has no track"));
        let s = self
            .slots
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or_else(missing)?;
        let c = mix(&s.modes, &s.mu);
        let l = cubature::factor(&c.p).ok_or_else(|| {
            BackendError::new(
                "cpu",
                format!("IMM filter: slot {slot}'s covariance is not positive definite"),
            )
        })?;
        let pts = cubature::points(&c.x, &l);
        let best = (0..s.mu.len())
            .max_by(|a, b| s.mu[*a].total_cmp(&s.mu[*b]))
            .unwrap_or(0) as u32;
        let n = pts.len();
        let mut state = vec![0.0f32; 7 * n];
        for (i, q) in pts.iter().enumerate() {
            for comp in 0..7 {
                state[comp * n + i] = q[comp] as f32;
            }
        }
        Ok(Particles {
            state,
            model: vec![best; n],
            log_weight: vec![-(n as f32).ln(); n],
        })
    }

    /// Set a slot from weighted particles: every mode at their weighted mean and covariance,
    /// the mode probabilities their models' weights.
    fn write_particles(&mut self, slot: u32, particles: &Particles) -> Result<(), BackendError> {
        let n = particles.log_weight.len();
        let nm = self.params.n_models();
        if n == 0 || particles.state.len() != 7 * n || particles.model.len() != n {
            return Err(BackendError::new(
                "cpu",
                format!(
                    "IMM filter: slot {slot}: {n} particles with {} state values",
                    particles.state.len()
                ),
            ));
        }
        let top = particles
            .log_weight
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        if !top.is_finite() {
            return Err(BackendError::new(
                "cpu",
                format!("IMM filter: slot {slot}: no particle has a finite weight"),
            ));
        }
        let w: Vec<f64> = particles
            .log_weight
            .iter()
            .map(|l| f64::from(l - top).exp())
            .collect();
        let total: f64 = w.iter().sum();
        let at = |i: usize| V7::from_fn(|c, _| f64::from(particles.state[c * n + i]));
        let x = (0..n).fold(V7::zeros(), |a, i| a + at(i) * w[i]) / total;
        let p = (0..n).fold(M7::zeros(), |a, i| {
            let d = at(i) - x;
            a + d * d.transpose() * w[i]
        }) / total;
        let mut mu = vec![0.0; nm];
        for (m, wi) in particles.model.iter().zip(&w) {
            if let Some(v) = mu.get_mut(*m as usize) {
                *v += wi / total;
            }
        }
        let entry = self
            .slots
            .get_mut(slot as usize)
            .ok_or_else(|| BackendError::new("cpu", format!("IMM filter: slot {slot}")))?;
        *entry = Some(Slot {
            modes: vec![Mode { x, p }; nm],
            mu,
        });
        Ok(())
    }
}

#[cfg(test)]
#[path = "imm_tests.rs"]
mod tests;
