//! Each pair's GCC-PHAT curves over time as a heat map, with every track's predicted delay drawn
//! on top (PNG only: a heat map as SVG rectangles would be megabytes).

use nalgebra::Vector3;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{PlotInput, Res, heat, track_colour};

/// GCC-PHAT curves kept for the heat map: every `every`-th frame, each pair's curve over its
/// physical lags.
#[derive(Debug, Clone, Default)]
pub struct GccTrace {
    pub pairs: Vec<(usize, usize)>,
    /// Each pair's largest physical lag, in whole samples (curves hold 2 × this + 1 values).
    pub max_lag: Vec<usize>,
    pub sample_rate_hz: f64,
    pub every: usize,
    /// Frame centre times of the kept frames.
    pub t: Vec<f64>,
    /// Per kept frame, the pairs' curves one after another.
    pub curves: Vec<Vec<f32>>,
}

impl GccTrace {
    /// Curves of at most `max_columns` frames out of about `frames`.
    pub fn new(params: &crate::dsp::gcc::GccParams, frames: u64, max_columns: usize) -> Self {
        Self {
            pairs: params.pairs.iter().map(|p| (p.a, p.b)).collect(),
            max_lag: params
                .pairs
                .iter()
                .map(|p| (p.max_lag_samples.floor() as usize).min(params.curve_half))
                .collect(),
            sample_rate_hz: params.sample_rate_hz,
            every: (frames as usize).div_ceil(max_columns.max(1)).max(1),
            t: Vec::new(),
            curves: Vec::new(),
        }
    }

    /// Keep frame `seq` (when it falls on the stride): `curves` is `pairs × curve_len`.
    pub fn push(&mut self, seq: u64, t: f64, curves: &[f32], curve_half: usize) {
        if seq as usize % self.every != 0 || curves.is_empty() {
            return;
        }
        let cl = 2 * curve_half + 1;
        let mut keep = Vec::new();
        for (p, &ml) in self.max_lag.iter().enumerate() {
            let c = &curves[p * cl..(p + 1) * cl];
            keep.extend_from_slice(&c[curve_half - ml..=curve_half + ml]);
        }
        self.t.push(t);
        self.curves.push(keep);
    }
}

/// Most pairs drawn in the heat map (the first ones).
pub(super) const MAX_PAIRS_DRAWN: usize = 6;

pub(super) fn draw_gcc<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    inp: &PlotInput,
    g: &GccTrace,
) -> Res<DB> {
    root.fill(&WHITE)?;
    let np = g.pairs.len().min(MAX_PAIRS_DRAWN);
    if np == 0 || g.t.is_empty() {
        return Ok(());
    }
    let geo = inp.cfg.geometry();
    let pair_specs = geo.pairs(crate::dsp::geometry::PairMode::All, 0);
    let areas = root.split_evenly((np, 1));
    let t0 = g.t.first().copied().unwrap_or(0.0);
    let t1 = g.t.last().copied().unwrap_or(1.0).max(t0 + 1e-3);
    let dt = if g.t.len() > 1 {
        (t1 - t0) / (g.t.len() - 1) as f64
    } else {
        0.1
    };
    let ms = 1000.0 / g.sample_rate_hz;
    let offsets: Vec<usize> = g
        .max_lag
        .iter()
        .scan(0usize, |acc, &ml| {
            let o = *acc;
            *acc += 2 * ml + 1;
            Some(o)
        })
        .collect();
    for p in 0..np {
        let ml = g.max_lag[p] as f64;
        let (a, b) = g.pairs[p];
        let mut chart = ChartBuilder::on(&areas[p])
            .caption(
                format!("GCC-PHAT, sensors {a}-{b}, with each track's predicted delay"),
                ("sans-serif", 15),
            )
            .margin(6)
            .x_label_area_size(if p + 1 == np { 35 } else { 20 })
            .y_label_area_size(60)
            .build_cartesian_2d(t0 - dt / 2.0..t1 + dt / 2.0, -ml * ms..ml * ms)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(if p + 1 == np { "time (s)" } else { "" })
            .y_desc("lag (ms)")
            .label_style(("sans-serif", 11))
            .draw()?;
        let len = 2 * g.max_lag[p] + 1;
        // Normalise each column to its own maximum over the pair's lags.
        let cells = g.t.iter().zip(&g.curves).flat_map(|(&t, c)| {
            let col = &c[offsets[p]..offsets[p] + len];
            let mx = col.iter().fold(1e-12f32, |m, v| m.max(*v));
            col.iter().enumerate().map(move |(i, v)| {
                let lag = (i as f64 - ml) * ms;
                Rectangle::new(
                    [
                        (t - dt / 2.0, lag - ms / 2.0),
                        (t + dt / 2.0, lag + ms / 2.0),
                    ],
                    heat(f64::from((v / mx).max(0.0))).filled(),
                )
            })
        });
        chart.draw_series(cells)?;
        // Predicted delays of each report (3-D: from its position; direction: far field).
        let spec = pair_specs.iter().find(|s| s.a == a && s.b == b);
        if let Some(spec) = spec {
            let geo = &geo;
            let pts = inp.frames.iter().flat_map(|f| {
                f.reports.iter().map(move |r| {
                    let v = Vector3::from(r.pos);
                    let tau = if inp.cfg.array.mode.angular() {
                        geo.tdoa_far_s(&v, spec)
                    } else {
                        geo.tdoa_s(&v, spec)
                    };
                    (r.id, f.t_frame, tau * 1000.0)
                })
            });
            chart.draw_series(pts.map(|(id, t, lag)| {
                Circle::new((t, lag), 1, track_colour(id).mix(0.9).filled())
            }))?;
        }
    }
    Ok(())
}
