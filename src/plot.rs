//! Plots of a replay (PNG and SVG, drawn with plotters): tracks against truth from above and
//! from the side, error over time with the Cramér–Rao bound, each pair's GCC-PHAT curves over
//! time as a heat map with every track's predicted delay drawn on top (PNG only: a heat map as
//! SVG rectangles would be megabytes), and model probabilities over time.

use std::path::{Path, PathBuf};

use nalgebra::Vector3;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::bound::FrameBound;
use crate::config::{Config, TrackMode};
use crate::error::{Error, Result};
use crate::evaluate::FrameReports;
use crate::scene::Truth;

static FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");

/// Register the embedded font (once) under the family name the plots use.
fn font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The font is embedded at build time and known to parse.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

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

/// What the plots are drawn from.
pub struct PlotInput<'a> {
    pub cfg: &'a Config,
    pub frames: &'a [FrameReports],
    pub model_names: &'a [String],
    pub truth: Option<&'a Truth>,
    pub bounds: Option<&'a [FrameBound]>,
    pub gcc: Option<&'a GccTrace>,
    pub warmup_s: f64,
}

fn perr<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> Error + '_ {
    move |e| Error::Io {
        path: path.into(),
        source: std::io::Error::other(format!("drawing the plot: {e:?}")),
    }
}

type Res<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Distinct colours (the "tab10" set).
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// A colour per track id.
fn track_colour(id: u64) -> RGBColor {
    COLOURS[(id as usize + COLOURS.len() - 1) % COLOURS.len()]
}

fn span(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    (lo <= hi).then(|| {
        let pad = ((hi - lo) * 0.08).max(0.5);
        (lo - pad, hi + pad)
    })
}

/// Truth rows of each target (for drawing paths).
fn truth_paths(truth: Option<&Truth>) -> Vec<(u32, Vec<[f64; 3]>)> {
    truth
        .map(|t| {
            t.targets
                .iter()
                .map(|(k, rows)| (*k, rows.iter().map(|r| r.1).collect()))
                .collect()
        })
        .unwrap_or_default()
}

fn draw_tracks<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, inp: &PlotInput) -> Res<DB> {
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

/// (frame time, error of the report nearest target 0 at its emission time, and that report's
/// spread: the square root of its position covariance's trace, which is the RMS error its
/// covariance promises; None in direction mode or without a covariance).
fn errors(inp: &PlotInput) -> Vec<(f64, f64, Option<f64>)> {
    let Some(truth) = inp.truth else {
        return Vec::new();
    };
    let k = truth.targets.keys().next().copied().unwrap_or(0);
    let direction = inp.cfg.array.mode == TrackMode::Direction;
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
                        crate::evaluate::truth_heard_at(
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

fn draw_error<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, inp: &PlotInput) -> Res<DB> {
    root.fill(&WHITE)?;
    let direction = inp.cfg.array.mode == TrackMode::Direction;
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

/// A blue-to-yellow colour map on [0, 1].
fn heat(v: f64) -> RGBColor {
    let x = v.clamp(0.0, 1.0);
    let stops = [
        (0.0, (13.0, 8.0, 135.0)),
        (0.35, (126.0, 3.0, 168.0)),
        (0.65, (204.0, 71.0, 120.0)),
        (0.85, (248.0, 149.0, 64.0)),
        (1.0, (240.0, 249.0, 33.0)),
    ];
    for w in stops.windows(2) {
        let ((a, ca), (b, cb)) = (w[0], w[1]);
        if x <= b {
            let f = (x - a) / (b - a);
            let m = |p: f64, q: f64| (p + f * (q - p)) as u8;
            return RGBColor(m(ca.0, cb.0), m(ca.1, cb.1), m(ca.2, cb.2));
        }
    }
    RGBColor(240, 249, 33)
}

/// Most pairs drawn in the heat map (the first ones).
const MAX_PAIRS_DRAWN: usize = 6;

fn draw_gcc<DB: DrawingBackend>(
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
                    let tau = if inp.cfg.array.mode == TrackMode::Direction {
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

fn draw_models<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, inp: &PlotInput) -> Res<DB> {
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

/// Write every plot into `dir`; returns the files written.
pub fn write_all(dir: &Path, inp: &PlotInput) -> Result<Vec<PathBuf>> {
    font();
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        path: dir.into(),
        source: e,
    })?;
    let mut out = Vec::new();
    macro_rules! both {
        ($name:expr, $size:expr, $draw:expr) => {{
            let png = dir.join(format!("{}.png", $name));
            {
                let root = BitMapBackend::new(&png, $size).into_drawing_area();
                $draw(&root).map_err(perr(&png))?;
                root.present().map_err(perr(&png))?;
            }
            out.push(png);
            let svg = dir.join(format!("{}.svg", $name));
            {
                let root = SVGBackend::new(&svg, $size).into_drawing_area();
                $draw(&root).map_err(perr(&svg))?;
                root.present().map_err(perr(&svg))?;
            }
            out.push(svg);
        }};
    }
    both!("tracks", (1400, 650), |r| draw_tracks(r, inp));
    both!("error", (1100, 450), |r| draw_error(r, inp));
    both!("models", (1100, 400), |r| draw_models(r, inp));
    if let Some(g) = inp.gcc {
        let np = g.pairs.len().clamp(1, MAX_PAIRS_DRAWN) as u32;
        let png = dir.join("gcc.png");
        {
            let root = BitMapBackend::new(&png, (1100, 40 + 190 * np)).into_drawing_area();
            draw_gcc(&root, inp, g).map_err(perr(&png))?;
            root.present().map_err(perr(&png))?;
        }
        out.push(png);
    }
    Ok(out)
}

/// A heat map of a plan slice (log colour scale, a colour bar, sensors as triangles, ambiguous
/// cells as crosses), as PNG.
pub fn heat_map(
    path: &Path,
    title: &str,
    s: &crate::plan::Slice,
    marks: &[(f64, f64)],
) -> Result<()> {
    font();
    let root = BitMapBackend::new(path, (1000, 720)).into_drawing_area();
    draw_heat(&root, title, s, marks).map_err(perr(path))?;
    root.present().map_err(perr(path))?;
    Ok(())
}

fn draw_heat<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    s: &crate::plan::Slice,
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
        .y_label_formatter(&|v| crate::plan::human(10f64.powf(*v), &unit))
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
