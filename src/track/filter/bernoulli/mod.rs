//! Track-before-detect filters (seed 003; digest `pf-multitarget-and-tbd.md`, Part B): a
//! Bernoulli particle filter whose particles are weighted by the raw sensor frame through a
//! likelihood ratio, never through thresholded detections, so that evidence too weak for one
//! frame builds up over several.
//!
//! - [`existence`]: the existence recursion (log domain).
//! - [`filter`]: one single-target PF-TBD: birth and continuing particle sets, existence,
//!   mixture resampling, the estimate. Generic over a [`CellModel`] (the GCC curves of
//!   [`crate::track::measure::curves`]; the seed's infrared and radar models in the tests).
//! - [`bank`]: many curves tracks stepped together in f32, the CPU twin of `kernels/tbd.cu`;
//!   [`lobes`]: its weighing read from two tables a pair.

pub mod bank;
pub mod existence;
pub mod filter;
pub mod followers;
pub mod lobes;

/// The four keys of one particle's random draws (Philox, as the particle filter keys them):
/// the same numbers on every backend and thread layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrawKey {
    pub seed: u64,
    pub frame: u64,
    pub track: u32,
    pub particle: u32,
}

impl DrawKey {
    /// The particle's four Philox words for `stream`.
    pub fn words(&self, stream: crate::rng::philox::Stream) -> [u32; 4] {
        crate::rng::philox::draw(self.seed, self.frame, self.track, self.particle, stream)
    }
}

/// The random-number keys of the curves' filters, one each (the track field of their
/// [`DrawKey`]s), handed out in order.
#[derive(Debug, Clone)]
pub struct FilterKeys(u32);

impl Default for FilterKeys {
    fn default() -> Self {
        Self(1)
    }
}

impl FilterKeys {
    pub fn next_key(&mut self) -> u32 {
        let k = self.0;
        self.0 = self.0.wrapping_add(1);
        k
    }
}

/// The `k` largest of `scores` (at least one, unordered) and a flag per score for them: the
/// cells a birth proposal favours.
pub fn strongest(scores: &[f64], k: usize) -> (Vec<usize>, Vec<bool>) {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    if order.is_empty() {
        return (order, Vec::new());
    }
    let k = k.clamp(1, order.len());
    order.select_nth_unstable_by(k - 1, |&a, &b| scores[b].total_cmp(&scores[a]));
    order.truncate(k);
    let mut is_top = vec![false; scores.len()];
    for &c in &order {
        is_top[c] = true;
    }
    (order, is_top)
}

/// An image-like frame's birth proposal: its strongest cells (the infrared and radar models).
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
pub struct TopCells {
    pub cells: Vec<usize>,
    pub is_top: Vec<bool>,
}

#[cfg(test)]
impl TopCells {
    /// The `k` largest of `scores`.
    pub fn of(scores: &[f64], k: usize) -> Self {
        let (cells, is_top) = strongest(scores, k);
        Self { cells, is_top }
    }
}

/// What the Bernoulli filter needs of a sensor: the frame's log-likelihood ratio of a state
/// (target present against absent), a birth proposal with its importance correction, and the
/// motion model.
pub trait CellModel: Sync {
    /// One frame of raw sensor data (an image, a set of GCC curves).
    type Frame: Sync;
    /// What the birth proposal keeps of a frame (e.g. its strongest cells).
    type Proposal: Sync;

    /// State dimension.
    fn dim(&self) -> usize;

    /// ln l(z | x) = ln p(z | x, E = 1) − ln p(z | E = 0).
    fn log_lr(&self, frame: &Self::Frame, x: &[f64]) -> f64;

    /// The frame's birth proposal q_b.
    fn proposal(&self, frame: &Self::Frame) -> Self::Proposal;

    /// Draws a birth state from q_b into `x`; returns ln(p_b(x) / q_b(x)), the importance
    /// correction of eq. 20 (0 when the proposal is the birth prior).
    fn draw_birth(&self, proposal: &Self::Proposal, key: DrawKey, x: &mut [f64]) -> f64;

    /// Moves a continuing state one frame on through the motion model.
    fn propagate(&self, key: DrawKey, x: &mut [f64]);
}
