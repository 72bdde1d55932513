//! Error over time against truth, with the reported spread and the Cramér–Rao bound.

use nalgebra::Vector3;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{PlotInput, Res};

/// (frame time, error of the report nearest target 0 at its emission time, and that report's
/// spread: the square root of its position covariance's trace, which is the RMS error its
/// covariance promises; None in direction mode or without a covariance).
fn errors(inp: &PlotInput) -> Vec<(f64, f64, Option<f64>)> {
    let Some(truth) = inp.truth else {
        return Vec::new();
    };
    let k = truth.targets.keys().next().copied().unwrap_or(0);
    let direction = inp.cfg.array.mode.angular();
    let geo = inp.cfg.geometry();
    let centre = geo.centroid();
    inp.frames
        .iter()
        .filter_map(|f| {
            f.reports
                .iter()
                .filter_map(|r| {
                    // (A direction's report time is the arrival time: see `truth_heard_at`.)
                    let q = if direction {
                        crate::analysis::score::truth_heard_at(
                            truth,
                            k,
                            r.t,
                            &centre,
                            geo.speed_of_sound_m_s,
                        )?
                    } else {
                        truth.at(k, r.t)?
                    };
                    Some(if direction {
                        let u = (Vector3::from(q) - centre).normalize();
                        let v = Vector3::from(r.pos).normalize();
                        (u.dot(&v).clamp(-1.0, 1.0).acos().to_degrees(), None)
                    } else {
                        let spread = r.cov.map(|c| (c[0] + c[3] + c[5]).max(0.0).sqrt());
                        ((Vector3::from(r.pos) - Vector3::from(q)).norm(), spread)
                    })
                })
                .reduce(|a, b| if b.0 < a.0 { b } else { a })
                .map(|(e, s)| (f.t_frame, e, s))
        })
        .collect()
}

pub(super) fn draw_error<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    inp: &PlotInput,
) -> Res<DB> {
    root.fill(&WHITE)?;
    let direction = inp.cfg.array.mode.angular();
    let err = errors(inp);
    let bnd: Vec<(f64, f64)> = inp
        .bounds
        .unwrap_or(&[])
        .iter()
        .filter_map(|b| {
            let v = if direction {
                match (b.azimuth_deg, b.elevation_deg) {
                    (Some(a), Some(e)) => Some((a * a + e * e).sqrt()),
                    _ => None,
                }
            } else {
                b.position_m
            };
            v.map(|v| (b.t_frame, v))
        })
        .collect();
    let t1 = inp
        .frames
        .last()
        .map(|f| f.t_frame)
        .unwrap_or(1.0)
        .max(1e-3);
    let spread: Vec<(f64, f64)> = err
        .iter()
        .filter_map(|&(t, _, s)| s.map(|s| (t, s)))
        .collect();
    let vals = || {
        err.iter()
            .map(|p| p.1)
            .chain(bnd.iter().chain(&spread).map(|p| p.1))
            .filter(|v| *v > 0.0)
    };
    let lo = vals().fold(f64::INFINITY, f64::min).min(1.0) * 0.5;
    let hi = vals().fold(0.0, f64::max).max(lo * 10.0) * 2.0;
    let unit = if direction {
        "angle error (°)"
    } else {
        "position error (m)"
    };
    let mut chart = ChartBuilder::on(root)
        .caption(
            if spread.is_empty() {
                "error over time, with the one-frame Cramér–Rao bound"
            } else {
                "error over time, with the reported spread and the one-frame Cramér–Rao bound"
            },
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..t1, (lo.max(1e-6)..hi.max(1e-5)).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc(unit)
        .label_style(("sans-serif", 13))
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            err.iter().map(|&(t, e, _)| (t, e.max(lo))),
            RED.stroke_width(1),
        ))?
        .label("track error")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], RED));
    if !spread.is_empty() {
        let green = RGBColor(0, 140, 60);
        chart
            .draw_series(LineSeries::new(
                spread.iter().map(|&(t, s)| (t, s.max(lo))),
                green.stroke_width(1),
            ))?
            .label("reported spread (√ trace of the covariance)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], green));
    }
    if !bnd.is_empty() {
        chart
            .draw_series(LineSeries::new(bnd.iter().copied(), BLUE.stroke_width(2)))?
            .label("Cramér–Rao bound (one frame)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLUE.stroke_width(2)));
    }
    if inp.warmup_s > 0.0 {
        chart.draw_series(LineSeries::new(
            [(inp.warmup_s, lo), (inp.warmup_s, hi)],
            BLACK.mix(0.4),
        ))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()?;
    Ok(())
}
