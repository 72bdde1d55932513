//! The curves search (digest B5.6): a Bernoulli filter whose births come from the search volume
//! (drawn around the last second's peak consensus fixes and the strongest cells of a coarse
//! grid), weighed on the curves less the tracks' lags so that it does not find them again. When
//! its existence has held the confirmation threshold for `confirm_s`, its particles become a
//! track and a fresh search starts. It runs on the CPU in f64, or on a one-track curves bank
//! (the GPU's: `tracker.curves.search_on_gpu`), falling back to the CPU if the bank fails.

use std::collections::VecDeque;

use crate::dsp::gcc::GccFrame;
use crate::track::filter::bernoulli::FilterKeys;
use crate::track::filter::bernoulli::bank::{BankModel, BankSizes, CurveBank, slot};
use crate::track::filter::bernoulli::existence::Chain;
use crate::track::filter::bernoulli::filter::{BernoulliFilter, BernoulliParams};
use crate::track::filter::bernoulli::followers::track_params;
use crate::track::measure::curves::near;
use crate::track::measure::curves::{CurveFrame, CurveModel, DIM};

/// What the search is set to (`[tracker.curves]`).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchSettings {
    pub particles: usize,
    pub birth_particles: usize,
    pub births_per_s: f64,
    pub lifetime_s: f64,
    /// The existence at which the search becomes a track…
    pub confirm: f64,
    /// …once it has held it this long (s): a birth drawn onto a peak of noise can lift it for
    /// a frame or two (its weights are an importance-sampling estimate with heavy tails), a
    /// source holds it.
    pub confirm_s: f64,
    pub max_tracks: usize,
    pub seed: u64,
}

/// A bank the search runs on, and its name for the log.
struct SearchBank {
    bank: Box<dyn CurveBank + Send>,
    what: String,
}

impl std::fmt::Debug for SearchBank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchBank")
            .field("what", &self.what)
            .field("sizes", &self.bank.sizes())
            .finish()
    }
}

#[derive(Debug)]
pub struct CurvesSearch {
    set: SearchSettings,
    frame_s: f64,
    filter: BernoulliFilter,
    /// The search on a one-track curves bank instead (the GPU's; [`Self::set_bank`]).
    bank: Option<SearchBank>,
    /// The search's existence after the last frame.
    p: f64,
    /// Consecutive frames the search has held the confirmation threshold.
    held: usize,
    /// The peaks' consensus fixes of the last second's frames (births are drawn around them).
    recent: VecDeque<Vec<[f64; 3]>>,
}

/// A source the search has found: its particles as a track's filter, and its mean.
pub struct Found {
    pub filter: BernoulliFilter,
    pub mean: Vec<f64>,
    pub p: f64,
}

impl CurvesSearch {
    /// A search (its filter keyed by the next of `keys`).
    pub fn new(set: SearchSettings, frame_s: f64, keys: &mut FilterKeys) -> Self {
        let filter = new_filter(&set, frame_s, keys);
        Self {
            set,
            frame_s,
            filter,
            bank: None,
            p: 0.0,
            held: 0,
            recent: VecDeque::new(),
        }
    }

    /// The search's existence probability (how close a new source is to confirmation).
    pub fn existence(&self) -> f64 {
        self.p
    }

    /// What a bank for the search must be: `model` in f32 (the band's lobe as its area), one
    /// track of the search's birth and continuing particles, and its chain.
    pub fn bank_spec(&self, model: &CurveModel) -> (BankModel, BankSizes, Chain) {
        let params = search_params(&self.set, self.frame_s);
        let sizes = BankSizes {
            tracks: 1,
            n_birth: params.n_birth,
            n_cont: params.n_cont,
        };
        (model.packed(None), sizes, params.chain)
    }

    /// Run the search on `bank` from the next frame (made to [`Self::bank_spec`]) and hand
    /// its particles to each track it confirms; `what` names it in the log.
    pub fn set_bank(&mut self, bank: Box<dyn CurveBank + Send>, what: &str) {
        self.bank = Some(SearchBank {
            bank,
            what: what.to_string(),
        });
    }

    /// Where the search runs: "cpu" or the bank's name.
    pub fn runs_on(&self) -> &str {
        self.bank.as_ref().map_or("cpu", |b| b.what.as_str())
    }

    /// Keep this frame's peak consensus fixes among the last second's (the births' centres).
    pub fn remember(&mut self, model: &CurveModel, gcc: &GccFrame, pair_ok: &[bool]) {
        let keep = (1.0 / self.frame_s).ceil().max(1.0) as usize;
        self.recent.push_back(model.peak_candidates(gcc, pair_ok));
        while self.recent.len() > keep {
            self.recent.pop_front();
        }
    }

    /// One frame of the search on `frame`, with the curves and candidates near the tracks'
    /// `positions` masked. A source found (held at the threshold for `confirm_s`, and a track's place
    /// free) comes back as a track's filter, and a fresh search starts.
    pub fn step(
        &mut self,
        model: &CurveModel,
        mut frame: CurveFrame,
        positions: &[[f64; 3]],
        keys: &mut FilterKeys,
    ) -> Option<Found> {
        frame.candidates = self.recent.iter().flatten().copied().collect();
        let seen = if positions.is_empty() {
            frame
        } else {
            let mut m = model.masked(&frame, positions);
            m.candidates
                .retain(|c| positions.iter().all(|h| !near(c, h, 3.0)));
            m
        };
        let (p, mean) = self.weigh(model, &seen, keys);
        self.p = p;
        if p < self.set.confirm {
            self.held = 0;
            return None;
        }
        self.held += 1;
        let needed = (self.set.confirm_s / self.frame_s).ceil().max(1.0) as usize;
        if self.held < needed || positions.len() >= self.set.max_tracks {
            return None;
        }
        self.held = 0;
        let filter = self.hand_over(p, keys)?;
        self.p = 0.0;
        Some(Found { filter, mean, p })
    }

    /// One step of the search, on the bank where there is one: its existence and mean.
    fn weigh(
        &mut self,
        model: &CurveModel,
        seen: &CurveFrame,
        keys: &mut FilterKeys,
    ) -> (f64, Vec<f64>) {
        if let Some(b) = self.bank.as_mut() {
            let (f, prop) = model.bank_inputs(seen);
            match b.bank.step(&f, &prop) {
                Ok(sums) => match sums.first() {
                    Some(t) => return (t.p_exist, t.mean.to_vec()),
                    None => self.bank_failed("a step without the track's sums", keys),
                },
                Err(e) => self.bank_failed(&e.to_string(), keys),
            }
        }
        let s = self.filter.step(model, seen);
        (s.existence.p, s.mean)
    }

    /// The bank failed: the search carries on on the CPU, from scratch.
    fn bank_failed(&mut self, why: &str, keys: &mut FilterKeys) {
        if let Some(b) = self.bank.take() {
            log::warn!(
                "curves: the search on {} failed ({why}); it runs on the CPU from now on, from scratch",
                b.what
            );
        }
        self.filter = new_filter(&self.set, self.frame_s, keys);
    }

    /// The search's particles as a confirmed track's filter, at existence `p`, and a fresh
    /// search; None if the bank failed (the search restarts on the CPU).
    fn hand_over(&mut self, p: f64, keys: &mut FilterKeys) -> Option<BernoulliFilter> {
        let chain = Chain::per_second(self.set.births_per_s, self.set.lifetime_s, self.frame_s);
        let params = track_params(chain, self.set.particles);
        let Some(b) = self.bank.as_mut() else {
            let fresh = new_filter(&self.set, self.frame_s, keys);
            let mut filter = std::mem::replace(&mut self.filter, fresh);
            filter.set_params(params);
            return Some(filter);
        };
        let taken = b
            .bank
            .particles()
            .and_then(|x| b.bank.reset(0.0).map(|()| x));
        match taken {
            Ok(x) => {
                // The bank's one track, state-major, as the filter's particle-major f64.
                let n = x.len() / DIM;
                let particles: Vec<f64> = (0..n)
                    .flat_map(|i| (0..DIM).map(move |k| (k, i)))
                    .map(|(k, i)| f64::from(x[slot(1, n, k, 0, i)]))
                    .collect();
                let key = keys.next_key();
                let seed = self.set.seed;
                Some(BernoulliFilter::seeded(
                    params, DIM, seed, key, p, particles,
                ))
            }
            Err(e) => {
                self.bank_failed(&e.to_string(), keys);
                None
            }
        }
    }
}

/// The search: births from the volume at the chain's birth rate.
fn search_params(set: &SearchSettings, frame_s: f64) -> BernoulliParams {
    BernoulliParams {
        chain: Chain::per_second(set.births_per_s, set.lifetime_s, frame_s),
        n_birth: set.birth_particles,
        n_cont: set.particles,
    }
}

/// A fresh search filter, keyed by the next of `keys`.
fn new_filter(set: &SearchSettings, frame_s: f64, keys: &mut FilterKeys) -> BernoulliFilter {
    let key = keys.next_key();
    BernoulliFilter::new(search_params(set, frame_s), DIM, set.seed, key, 0.0)
}
