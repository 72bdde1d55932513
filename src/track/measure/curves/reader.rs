//! The curves as the tracker reads them each frame: the frame the model weighs (each pair's
//! curve with its noise level, [`CurveModel::frame`]), less the clutter map's slow mean where
//! there is one; and each track's view of it, the curves less the templates of the other
//! tracks whose lobes overlap its own (the joint template).

use super::clutter::ClutterMap;
use super::{CurveFrame, CurveModel, DUPLICATE_M, near};
use crate::track::measure::{FrameInput, MeasurementModel};

#[derive(Debug)]
pub struct CurvesReader {
    model: CurveModel,
    /// The noise levels so far (see [`CurveModel::frame`]).
    levels: Vec<f64>,
    /// The curves' slow mean, taken from each frame (`clutter_map_s`).
    clutter: Option<ClutterMap>,
    /// The frame last read.
    last: CurveFrame,
}

/// A track as the views see it: its position and, where its template is subtracted from the
/// others' views, its amplitude (None: it is not, e.g. a track seeded this frame).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Held {
    pub id: u64,
    pub position: [f64; 3],
    pub amplitude: Option<f64>,
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
            last: CurveFrame::default(),
        }
    }

    pub fn model(&self) -> &CurveModel {
        &self.model
    }
}

impl MeasurementModel for CurvesReader {
    type Frame = CurveFrame;
    /// Every track, in order (track `i` among them).
    type Others<'a> = [Held];

    fn name(&self) -> &'static str {
        "curves"
    }

    /// The frame as the model weighs it, with the pairs' health (None when the correlator gave
    /// no curves of the model's size). The clutter map is taken from the curves and learns
    /// them, but not around the lags of the tracks at `input.held`. Returns the usable pairs.
    fn read(&mut self, input: &FrameInput) -> Option<usize> {
        let want = self.model.pairs() * self.model.curve_len();
        if input.gcc.curves.len() != want {
            return None;
        }
        let frame = self
            .model
            .frame(&input.gcc.curves, input.pair_ok, &mut self.levels);
        self.last = frame;
        if let Some(map) = self.clutter.as_mut() {
            let held = self.model.held_lags(input.held);
            map.apply(&mut self.last.curves, &held);
        }
        Some(self.last.ok.iter().filter(|&&ok| ok).count())
    }

    fn frame(&self) -> &CurveFrame {
        &self.last
    }

    /// Track `i`'s view: the curves less the templates (amplitude × κ about their delays) of
    /// the other tracks with an amplitude whose lobes overlap its own in some pair; tracks
    /// within [`DUPLICATE_M`] of it are left to the duplicate rule.
    fn view(&self, i: usize, others: &[Held], out: &mut CurveFrame) {
        let me = others[i];
        let overlapping: Vec<([f64; 3], f64)> = others
            .iter()
            .filter_map(|o| {
                let a = o.amplitude?;
                let apart = o.id != me.id && !near(&o.position, &me.position, DUPLICATE_M);
                let overlap = apart && self.model.overlaps(&self.last, &me.position, &o.position);
                overlap.then_some((o.position, a))
            })
            .collect();
        if overlapping.is_empty() {
            out.clone_from(&self.last);
        } else {
            *out = self.model.without(&self.last, &overlapping);
        }
    }
}
