//! Motion-model probabilities over time.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{COLOURS, PlotInput, Res};

pub(super) fn draw_models<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    inp: &PlotInput,
) -> Res<DB> {
    root.fill(&WHITE)?;
    // The track with the most reports.
    let mut counts = std::collections::BTreeMap::<u64, usize>::new();
    for f in inp.frames {
        for r in &f.reports {
            *counts.entry(r.id).or_default() += 1;
        }
    }
    let id = counts.iter().max_by_key(|(_, n)| **n).map(|(id, _)| *id);
    let t1 = inp
        .frames
        .last()
        .map(|f| f.t_frame)
        .unwrap_or(1.0)
        .max(1e-3);
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!(
                "model probabilities of track {}",
                id.map(|i| i.to_string()).unwrap_or_else(|| "-".into())
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t1, 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("probability")
        .label_style(("sans-serif", 13))
        .draw()?;
    let Some(id) = id else { return Ok(()) };
    for (m, name) in inp.model_names.iter().enumerate() {
        let col = COLOURS[m % COLOURS.len()];
        let pts = inp.frames.iter().filter_map(|f| {
            f.reports
                .iter()
                .find(|r| r.id == id)
                .and_then(|r| r.models.get(m).map(|p| (f.t_frame, f64::from(*p))))
        });
        chart
            .draw_series(LineSeries::new(pts, col.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
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
