//! The maps of `sonotrack plan`: the Cramér–Rao bound over a slice of the search volume as a heat
//! map (log colour scale, a colour bar, sensors as triangles, ambiguous cells as crosses).

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Res, font, heat, perr};
use crate::analysis::plan::{PlanReport, Slice, human};
use crate::error::{Error, Result};

/// Write the plan's maps (PNG) and `plan.json` into `dir`; returns the files written.
pub fn write_maps(dir: &Path, r: &PlanReport, sensors: &[[f64; 3]]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        path: dir.into(),
        source: e,
    })?;
    let mut files = Vec::new();
    for (k, s) in r.slices.iter().enumerate() {
        let stem = ["plan-top", "plan-side"]
            .get(k)
            .filter(|_| r.mode != "direction")
            .copied()
            .unwrap_or("plan-direction");
        let path = dir.join(format!("{stem}.png"));
        let marks: Vec<(f64, f64)> = if r.mode == "direction" {
            Vec::new()
        } else {
            let (xa, ya) = if k == 0 { (0, 1) } else { (0, 2) };
            sensors.iter().map(|p| (p[xa], p[ya])).collect()
        };
        heat_map(
            &path,
            &format!("Cramér–Rao bound, {}: {}", s.name, r.source),
            s,
            &marks,
        )?;
        files.push(path);
    }
    let json = dir.join("plan.json");
    std::fs::write(&json, serde_json::to_string_pretty(r).unwrap_or_default()).map_err(|e| {
        Error::Io {
            path: json.clone(),
            source: e,
        }
    })?;
    files.push(json);
    Ok(files)
}

/// A heat map of a plan slice (log colour scale, a colour bar, sensors as triangles, ambiguous
/// cells as crosses), as PNG.
pub fn heat_map(path: &Path, title: &str, s: &Slice, marks: &[(f64, f64)]) -> Result<()> {
    font();
    let root = BitMapBackend::new(path, (1000, 720)).into_drawing_area();
    draw_heat(&root, title, s, marks).map_err(perr(path))?;
    root.present().map_err(perr(path))?;
    Ok(())
}

fn draw_heat<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    s: &Slice,
    marks: &[(f64, f64)],
) -> Res<DB> {
    root.fill(&WHITE)?;
    let (main, bar) = root.split_horizontally(880);
    let finite: Vec<f64> = s
        .values
        .iter()
        .filter_map(|v| *v)
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(f64::log10)
        .collect();
    // Colour scale over the 2nd to 98th percentile of log10(bound).
    let mut sorted = finite.clone();
    sorted.sort_by(f64::total_cmp);
    let q = |p: f64| {
        sorted
            .get(((sorted.len().max(1) - 1) as f64 * p) as usize)
            .copied()
    };
    let (lo, hi) = match (q(0.02), q(0.98)) {
        (Some(a), Some(b)) if b > a => (a, b),
        (Some(a), _) => (a - 0.5, a + 0.5),
        _ => (-3.0, 0.0),
    };
    let mut chart = ChartBuilder::on(&main)
        .caption(title, ("sans-serif", 15))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(s.x_range.0..s.x_range.1, s.y_range.0..s.y_range.1)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(s.x_axis.as_str())
        .y_desc(s.y_axis.as_str())
        .label_style(("sans-serif", 13))
        .draw()?;
    let dx = (s.x_range.1 - s.x_range.0) / (s.nx - 1).max(1) as f64;
    let dy = (s.y_range.1 - s.y_range.0) / (s.ny - 1).max(1) as f64;
    chart.draw_series((0..s.nx * s.ny).map(|k| {
        let (i, j) = (k % s.nx, k / s.nx);
        let x = s.x_range.0 + i as f64 * dx;
        let y = s.y_range.0 + j as f64 * dy;
        let col = match s.values[k] {
            Some(v) if v.is_finite() && v > 0.0 => {
                heat(1.0 - ((v.log10() - lo) / (hi - lo)).clamp(0.0, 1.0))
            }
            _ => RGBColor(60, 60, 60),
        };
        Rectangle::new(
            [(x - dx / 2.0, y - dy / 2.0), (x + dx / 2.0, y + dy / 2.0)],
            col.filled(),
        )
    }))?;
    chart.draw_series(
        s.ambiguous
            .iter()
            .map(|&(x, y)| Cross::new((x, y), 5, WHITE.stroke_width(2))),
    )?;
    chart.draw_series(
        marks
            .iter()
            .map(|&(x, y)| TriangleMarker::new((x, y), 7, WHITE.filled())),
    )?;
    // The colour bar: bright is good (small bound).
    let unit = s.unit.clone();
    let mut cb = ChartBuilder::on(&bar)
        .margin_top(40)
        .margin_bottom(50)
        .margin_right(10)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..1.0, lo..hi)?;
    cb.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_desc(format!("bound ({})", s.unit))
        .y_label_formatter(&|v| human(10f64.powf(*v), &unit))
        .label_style(("sans-serif", 12))
        .draw()?;
    let steps = 100;
    cb.draw_series((0..steps).map(|k| {
        let a = lo + (hi - lo) * k as f64 / steps as f64;
        let b = lo + (hi - lo) * (k + 1) as f64 / steps as f64;
        Rectangle::new(
            [(0.0, a), (1.0, b)],
            heat(1.0 - (a - lo) / (hi - lo)).filled(),
        )
    }))?;
    Ok(())
}
