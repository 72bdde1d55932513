//! Plots of a replay (PNG and SVG, drawn with plotters): tracks against truth from above and
//! from the side, error over time with the Cramér–Rao bound, each pair's GCC-PHAT curves over
//! time as a heat map with every track's predicted delay drawn on top (PNG only: a heat map as
//! SVG rectangles would be megabytes), and model probabilities over time.
//!
//! One file per picture: [`tracks`], [`error`], [`gcc`], [`models`], and the plan's maps
//! ([`plan_map`]); this module holds what they share and [`write_all`].

mod error;
mod gcc;
mod models;
pub mod plan_map;
mod tracks;

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::analysis::recording_bound::FrameBound;
use crate::analysis::stream::FrameReports;
use crate::analysis::truth::Truth;
use crate::config::Config;
use crate::error::{Error, Result};

pub use gcc::GccTrace;

static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Register the embedded font (once) under the family name the plots use.
fn font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The font is embedded at build time and known to parse.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
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

pub(crate) fn perr<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> Error + '_ {
    move |e| Error::Io {
        path: path.into(),
        source: std::io::Error::other(format!("drawing the plot: {e:?}")),
    }
}

pub(crate) type Res<DB> =
    std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Distinct colours (the "tab10" set).
pub(crate) const COLOURS: [RGBColor; 8] = [
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
pub(crate) fn track_colour(id: u64) -> RGBColor {
    COLOURS[(id as usize + COLOURS.len() - 1) % COLOURS.len()]
}

pub(crate) fn span(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
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
pub(crate) fn truth_paths(truth: Option<&Truth>) -> Vec<(u32, Vec<[f64; 3]>)> {
    truth
        .map(|t| {
            t.targets
                .iter()
                .map(|(k, rows)| (*k, rows.iter().map(|r| r.1).collect()))
                .collect()
        })
        .unwrap_or_default()
}

/// A blue-to-yellow colour map on [0, 1].
pub(crate) fn heat(v: f64) -> RGBColor {
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
    both!("tracks", (1400, 650), |r| tracks::draw_tracks(r, inp));
    both!("error", (1100, 450), |r| error::draw_error(r, inp));
    both!("models", (1100, 400), |r| models::draw_models(r, inp));
    if let Some(g) = inp.gcc {
        let np = g.pairs.len().clamp(1, gcc::MAX_PAIRS_DRAWN) as u32;
        let png = dir.join("gcc.png");
        {
            let root = BitMapBackend::new(&png, (1100, 40 + 190 * np)).into_drawing_area();
            gcc::draw_gcc(&root, inp, g).map_err(perr(&png))?;
            root.present().map_err(perr(&png))?;
        }
        out.push(png);
    }
    Ok(out)
}
