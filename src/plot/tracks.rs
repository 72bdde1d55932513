//! Tracks against truth, from above and from the side.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{PlotInput, Res, span, track_colour, truth_paths};

pub(super) fn draw_tracks<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    inp: &PlotInput,
) -> Res<DB> {
    root.fill(&WHITE)?;
    let sensors = &inp.cfg.array.sensors_m;
    let paths = truth_paths(inp.truth);
    let reports: Vec<(u64, [f64; 3])> = inp
        .frames
        .iter()
        .flat_map(|f| f.reports.iter().map(|r| (r.id, r.pos)))
        .collect();
    let all = || {
        sensors
            .iter()
            .copied()
            .chain(paths.iter().flat_map(|(_, p)| p.iter().copied()))
            .chain(reports.iter().map(|r| r.1))
    };
    let areas = root.split_evenly((1, 2));
    for (panel, (a, b, name)) in [
        (0usize, 1usize, "top view: y (m)"),
        (0, 2, "side view: z (m)"),
    ]
    .iter()
    .enumerate()
    {
        let (x0, x1) = span(all().map(|p| p[*a])).unwrap_or((-1.0, 1.0));
        let (y0, y1) = span(all().map(|p| p[*b])).unwrap_or((-1.0, 1.0));
        let mut chart = ChartBuilder::on(&areas[panel])
            .caption(
                if panel == 0 {
                    "tracks against truth, from above"
                } else {
                    "from the side"
                },
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        chart
            .configure_mesh()
            .x_desc("x (m)")
            .y_desc(*name)
            .label_style(("sans-serif", 13))
            .draw()?;
        let mut ids: Vec<u64> = reports.iter().map(|r| r.0).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let col = track_colour(id);
            let s = chart.draw_series(
                reports
                    .iter()
                    .filter(|r| r.0 == id)
                    .map(|r| Circle::new((r.1[*a], r.1[*b]), 2, col.filled())),
            )?;
            if panel == 0 {
                s.label(format!("track {id}"))
                    .legend(move |(x, y)| Circle::new((x + 9, y), 4, col.filled()));
            }
        }
        for (k, path) in &paths {
            let s = chart.draw_series(LineSeries::new(
                path.iter().map(|p| (p[*a], p[*b])),
                BLACK.stroke_width(1),
            ))?;
            if panel == 0 {
                s.label(format!("truth {k}")).legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(1))
                });
            }
        }
        let s = chart.draw_series(
            sensors
                .iter()
                .map(|p| TriangleMarker::new((p[*a], p[*b]), 6, BLUE.filled())),
        )?;
        if panel == 0 {
            s.label("sensors")
                .legend(|(x, y)| TriangleMarker::new((x + 9, y), 5, BLUE.filled()));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .draw()?;
        }
    }
    Ok(())
}
