//! The curves as the tracker reads them each frame: the frame the model weighs (each pair's
//! curve with its noise level, [`CurveModel::frame`]), less the clutter map's slow mean where
//! there is one.

use super::clutter::ClutterMap;
use super::{CurveFrame, CurveModel};
use crate::dsp::gcc::GccFrame;

#[derive(Debug)]
pub struct CurvesReader {
    model: CurveModel,
    /// The noise levels so far (see [`CurveModel::frame`]).
    levels: Vec<f64>,
    /// The curves' slow mean, taken from each frame (`clutter_map_s`).
    clutter: Option<ClutterMap>,
}

impl CurvesReader {
    /// A reader of `model`'s curves, with a clutter map of time constant `clutter_map_s`
    /// (0: none) at frames `frame_s` apart.
    pub fn new(model: CurveModel, clutter_map_s: f64, frame_s: f64) -> Self {
        let clutter = (clutter_map_s > 0.0).then(|| ClutterMap::new(clutter_map_s, frame_s));
        Self {
            model,
            levels: Vec::new(),
            clutter,
        }
    }

    pub fn model(&self) -> &CurveModel {
        &self.model
    }

    /// The frame as the model weighs it, with the pairs' health (None when the correlator gave
    /// no curves of the model's size). The clutter map is taken from the curves and learns
    /// them, but not around the lags of the tracks at `held`.
    pub fn read(
        &mut self,
        gcc: &GccFrame,
        pair_ok: &[bool],
        held: &[[f64; 3]],
    ) -> Option<CurveFrame> {
        let want = self.model.pairs() * self.model.curve_len();
        if gcc.curves.len() != want {
            return None;
        }
        let mut frame = self.model.frame(&gcc.curves, pair_ok, &mut self.levels);
        if let Some(map) = self.clutter.as_mut() {
            map.apply(&mut frame.curves, &self.model.held_lags(held));
        }
        Some(frame)
    }
}
