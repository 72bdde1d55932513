//! `sonotrack plan`: how well an array layout can locate a source, before deploying it. Maps of
//! the one-frame Cramér–Rao bound (`crate::analysis::crlb`) over the search volume for an assumed source
//! spectrum and level, and the regions where the delays are ambiguous.
//!
//! Source model: the per-channel SNR over the processing band is `snr_db` when the source is
//! `at_m` from a sensor, falls off with spherical spreading (−20 log r), and is shaped across the
//! band by the chosen spectrum (white, pink, a ship's falling spectrum, or speech). Noise is
//! white and equal on every sensor. The frame length and band are the configuration's.
//!
//! 3-D arrays: a horizontal slice at the source depth and a vertical slice (x–z) through the
//! array, each a PNG heat map of the RMS position bound with the sensors marked, and coarse grid
//! cells where a second position explains the same delays marked with crosses. Direction-only
//! (compact) arrays: the angular bound over azimuth and elevation at range `at_m`.

use std::path::PathBuf;

use nalgebra::{DMatrix, Vector3};
use rayon::prelude::*;
use serde::Serialize;

use crate::analysis::crlb;
use crate::config::Config;
use crate::dsp::geometry::{ArrayGeometry, PairMode};
use crate::dsp::multilat::{self, Obs};
use crate::error::Result;

/// The assumed source spectrum's shape over frequency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SourceSpectrum {
    /// Flat.
    White,
    /// 1/f (−3 dB per octave).
    Pink,
    /// A ship: flat to 100 Hz, then 1/f² (−6 dB per octave).
    Ship,
    /// Speech: a band from 300 Hz to 3.4 kHz, falling outside it.
    Speech,
}

impl SourceSpectrum {
    fn shape(self, f: f64) -> f64 {
        let f = f.max(1.0);
        match self {
            Self::White => 1.0,
            Self::Pink => 1.0 / f,
            Self::Ship => {
                if f < 100.0 {
                    1.0
                } else {
                    (100.0 / f).powi(2)
                }
            }
            Self::Speech => {
                let lo = (f / 300.0).min(1.0).powi(4);
                let hi = (3400.0 / f).min(1.0).powi(4);
                lo * hi
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub snr_db: f64,
    pub at_m: f64,
    pub spectrum: SourceSpectrum,
    /// Grid points along each axis of a slice.
    pub resolution: usize,
    /// Coarse grid for the ambiguity search (0: none).
    pub ambiguity_resolution: usize,
    /// Depth (z) of the horizontal slice; default the middle of the search volume.
    pub z_m: Option<f64>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            snr_db: 10.0,
            at_m: 20.0,
            spectrum: SourceSpectrum::White,
            resolution: 120,
            ambiguity_resolution: 24,
            z_m: None,
        }
    }
}

/// One map: values on an `nx × ny` grid (row-major, y then x) over `x_range × y_range`.
#[derive(Debug, Clone, Serialize)]
pub struct Slice {
    pub name: String,
    pub x_axis: String,
    pub y_axis: String,
    pub x_range: (f64, f64),
    pub y_range: (f64, f64),
    pub nx: usize,
    pub ny: usize,
    /// The bound (metres, or degrees for directions); None where unobservable.
    #[serde(skip)]
    pub values: Vec<Option<f64>>,
    pub unit: String,
    /// Coarse cells (centre x, centre y) where the delays have a second solution.
    #[serde(skip)]
    pub ambiguous: Vec<(f64, f64)>,
    /// Share of the coarse cells that are ambiguous.
    pub ambiguous_fraction: f64,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    /// Share of the grid where the bound is infinite (the geometry cannot see a direction).
    pub unobservable_fraction: f64,
}

impl Slice {
    pub fn value_at(&self, x: f64, y: f64) -> Option<f64> {
        let fx = (x - self.x_range.0) / (self.x_range.1 - self.x_range.0);
        let fy = (y - self.y_range.0) / (self.y_range.1 - self.y_range.0);
        if !(0.0..=1.0).contains(&fx) || !(0.0..=1.0).contains(&fy) {
            return None;
        }
        let i = ((fx * (self.nx - 1) as f64).round() as usize).min(self.nx - 1);
        let j = ((fy * (self.ny - 1) as f64).round() as usize).min(self.ny - 1);
        self.values[j * self.nx + i]
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    pub description: String,
    pub sensors: usize,
    pub aperture_m: f64,
    pub mode: String,
    pub source: String,
    pub slices: Vec<Slice>,
    /// Bound along a line from the array's centre outward (range m, bound).
    pub along_range: Vec<(f64, Option<f64>)>,
    pub warnings: Vec<String>,
    pub files: Vec<PathBuf>,
}

/// The per-band information factors of the configuration: (Σ 2ω² over the band's bins /
/// window ENBW, relative source power in the band).
struct Bands {
    weight: Vec<f64>,
    shape: Vec<f64>,
}

fn bands(cfg: &Config, spectrum: SourceSpectrum) -> Bands {
    let fs = cfg.sample_rate_hz();
    let n = cfg.frame_samples();
    let crate::analysis::recording_bound::FrameBand { enbw, lo, hi, .. } =
        crate::analysis::recording_bound::frame_band(cfg);
    let bb = crlb::bands(lo, hi, 32);
    let mut weight = Vec::new();
    let mut shape = Vec::new();
    for &(a, b) in &bb {
        let mut wsum = 0.0;
        let mut ssum = 0.0;
        for k in a..=b {
            let f = k as f64 * fs / n as f64;
            let om = 2.0 * std::f64::consts::PI * f;
            wsum += 2.0 * om * om;
            ssum += spectrum.shape(f);
        }
        weight.push(wsum / enbw);
        shape.push(ssum / (b - a + 1) as f64);
    }
    // Normalise the shape so that its mean over the band's bins is 1.
    let bins: Vec<f64> = bb.iter().map(|&(a, b)| (b - a + 1) as f64).collect();
    let mean = shape.iter().zip(&bins).map(|(s, n)| s * n).sum::<f64>() / bins.iter().sum::<f64>();
    for s in shape.iter_mut() {
        *s /= mean.max(1e-300);
    }
    Bands { weight, shape }
}

/// Arrival-time information for per-sensor broadband SNRs `snr` (linear).
fn information(b: &Bands, snr: &[f64]) -> DMatrix<f64> {
    let m = snr.len();
    let mut j = DMatrix::<f64>::zeros(m, m);
    let mut a = vec![0.0; m];
    for (w, s) in b.weight.iter().zip(&b.shape) {
        for (ai, si) in a.iter_mut().zip(snr) {
            *ai = si * s;
        }
        let mut jb = DMatrix::<f64>::zeros(m, m);
        crlb::add_bin(&mut jb, 1.0, &a);
        j += jb * (w / 2.0);
    }
    j
}

fn percentiles(v: &[Option<f64>]) -> (f64, f64, f64, f64) {
    let mut f: Vec<f64> = v
        .iter()
        .filter_map(|x| *x)
        .filter(|x| x.is_finite())
        .collect();
    let unobs = 1.0 - f.len() as f64 / v.len().max(1) as f64;
    if f.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN, unobs);
    }
    f.sort_by(f64::total_cmp);
    let q = |p: f64| f[((f.len() - 1) as f64 * p).round() as usize];
    (q(0.5), q(0.1), q(0.9), unobs)
}

/// Plan for a configuration.
pub fn plan(cfg: &Config, o: &PlanOptions) -> Result<PlanReport> {
    let geo = cfg.geometry();
    let p = Planner {
        sensors: cfg.array.sensors_m.clone(),
        c: cfg.array.speed_of_sound_m_s,
        centre: geo.centroid(),
        line: cfg.line_axes(),
        ap: geo.aperture_m().max(1e-3),
        bands: bands(cfg, o.spectrum),
        snr0: 10f64.powf(o.snr_db / 10.0),
        res: o.resolution.max(8),
        geo,
        o,
    };
    let direction = cfg.array.mode.angular();
    let source = format!(
        "{} spectrum, {} dB per channel at {} m, spherical spreading",
        format!("{:?}", o.spectrum).to_lowercase(),
        o.snr_db,
        o.at_m
    );
    let mut warnings = Vec::new();
    let slices = if let Some((axis, side)) = p.line {
        vec![p.cone_slice(&axis, &side, &mut warnings)]
    } else if direction {
        vec![p.direction_slice(&mut warnings)]
    } else {
        let (lo, hi) = match (cfg.array.bounds_min_m, cfg.array.bounds_max_m) {
            (Some(l), Some(h)) => (Vector3::from(l), Vector3::from(h)),
            _ => (
                p.centre.add_scalar(-4.0 * p.ap),
                p.centre.add_scalar(4.0 * p.ap),
            ),
        };
        let z = o.z_m.unwrap_or(0.5 * (lo.z + hi.z)).clamp(lo.z, hi.z);
        // The vertical slice passes just beside the centre: exactly through it, a symmetric
        // array makes whole lines of the slice degenerate (x and z move the delays alike).
        let y = (p.centre.y + 0.13 * p.ap).clamp(lo.y, hi.y);
        [("top", 0usize, 1usize, 2usize, z), ("side", 0, 2, 1, y)]
            .into_iter()
            .map(|(name, xa, ya, fixed, other)| {
                let plane = Plane {
                    name,
                    xa,
                    ya,
                    fixed,
                    other,
                    lo,
                    hi,
                };
                p.position_slice(&plane, &mut warnings)
            })
            .collect()
    };
    Ok(PlanReport {
        description: cfg.array.description.clone(),
        sensors: p.sensors.len(),
        aperture_m: p.ap,
        mode: if direction { "direction" } else { "3-D" }.into(),
        source,
        slices,
        along_range: p.along_range(direction),
        warnings,
        files: Vec::new(),
    })
}

/// What every map of a plan is computed from.
struct Planner<'a> {
    geo: ArrayGeometry,
    sensors: Vec<[f64; 3]>,
    /// Speed of sound, m/s.
    c: f64,
    centre: Vector3<f64>,
    /// A line array's axis and side (see [`Config::line_axes`]).
    line: Option<(Vector3<f64>, Vector3<f64>)>,
    /// The aperture (at least a millimetre), m.
    ap: f64,
    bands: Bands,
    /// The per-channel SNR (linear) at `o.at_m` from a sensor.
    snr0: f64,
    /// Grid points along each axis.
    res: usize,
    o: &'a PlanOptions,
}

/// A slice of the search volume: axes `xa` and `ya` over the box `lo`..`hi`, at `other` along
/// axis `fixed`.
struct Plane {
    name: &'static str,
    xa: usize,
    ya: usize,
    fixed: usize,
    other: f64,
    lo: Vector3<f64>,
    hi: Vector3<f64>,
}

impl Plane {
    /// The point at fractions (`fx`, `fy`) of the slice.
    fn point(&self, fx: f64, fy: f64) -> Vector3<f64> {
        let mut p = Vector3::zeros();
        p[self.xa] = self.lo[self.xa] + fx * (self.hi[self.xa] - self.lo[self.xa]);
        p[self.ya] = self.lo[self.ya] + fy * (self.hi[self.ya] - self.lo[self.ya]);
        p[self.fixed] = self.other;
        p
    }
}

impl Planner<'_> {
    /// Each sensor's SNR for a source at `x` (spherical spreading from `o.at_m`).
    fn snr_at(&self, x: &Vector3<f64>) -> Vec<f64> {
        self.sensors
            .iter()
            .map(|s| {
                let r = (x - Vector3::from(*s)).norm().max(1e-3);
                self.snr0 * (self.o.at_m / r).powi(2)
            })
            .collect()
    }

    /// The sensors relative to the centre, from where directions are taken.
    fn relative_sensors(&self) -> Vec<[f64; 3]> {
        self.sensors
            .iter()
            .map(|s| (Vector3::from(*s) - self.centre).into())
            .collect()
    }

    /// The direction bound over azimuth and elevation (far field: every sensor at the same
    /// SNR).
    fn direction_slice(&self, warnings: &mut Vec<String>) -> Slice {
        let snr = vec![self.snr0; self.sensors.len()];
        let j = information(&self.bands, &snr);
        let rel = self.relative_sensors();
        let c = self.c;
        let (nx, ny) = (2 * self.res, self.res);
        let values: Vec<Option<f64>> = (0..ny)
            .flat_map(|jy| (0..nx).map(move |ix| (ix, jy)))
            .map(|(ix, jy)| {
                let az = (-180.0 + 360.0 * ix as f64 / (nx - 1) as f64).to_radians();
                let el = (-90.0 + 180.0 * jy as f64 / (ny - 1) as f64).to_radians();
                crlb::direction_cov(&rel, c, az, el, &j).map(|cv| {
                    (cv[(0, 0)] * el.cos().powi(2) + cv[(1, 1)])
                        .max(0.0)
                        .sqrt()
                        .to_degrees()
                })
            })
            .collect();
        let (median, p10, p90, unobs) = percentiles(&values);
        let spread = self.geo.spread_m();
        if spread[2] < 1e-3 * self.ap {
            warnings.push(
                "the array is planar: a source and its mirror image through the array's plane give the same delays (elevation sign is ambiguous), and elevation is worst near the plane".into(),
            );
        }
        Slice {
            name: "direction".into(),
            x_axis: "azimuth (°)".into(),
            y_axis: "elevation (°)".into(),
            x_range: (-180.0, 180.0),
            y_range: (-90.0, 90.0),
            nx,
            ny,
            values,
            unit: "°".into(),
            ambiguous: Vec::new(),
            ambiguous_fraction: 0.0,
            median,
            p10,
            p90,
            unobservable_fraction: unobs,
        }
    }

    /// A line array's bound on the angle to its axis, over that angle and the turn about the
    /// axis (which the line cannot see: every turn has the same bound).
    fn cone_slice(
        &self,
        axis: &Vector3<f64>,
        side: &Vector3<f64>,
        warnings: &mut Vec<String>,
    ) -> Slice {
        let snr = vec![self.snr0; self.sensors.len()];
        let j = information(&self.bands, &snr);
        let rel = self.relative_sensors();
        let (nx, ny) = (2 * self.res, self.res);
        let column: Vec<Option<f64>> = (0..nx)
            .map(|ix| {
                let theta = std::f64::consts::PI * ix as f64 / (nx - 1) as f64;
                crlb::cone_var(&rel, self.c, theta, axis, side, &j)
                    .map(|v| v.max(0.0).sqrt().to_degrees())
            })
            .collect();
        let values: Vec<Option<f64>> = (0..ny).flat_map(|_| column.iter().copied()).collect();
        let (median, p10, p90, unobs) = percentiles(&values);
        warnings.push(
            "a line array: it measures the angle to its axis (and, near it, the range); the turn about the axis is unobservable, and the angle worst towards the ends of the axis".into(),
        );
        Slice {
            name: "cone".into(),
            x_axis: "angle to the axis (°)".into(),
            y_axis: "turn about the axis (°, unobservable)".into(),
            x_range: (0.0, 180.0),
            y_range: (-180.0, 180.0),
            nx,
            ny,
            values,
            unit: "°".into(),
            ambiguous: Vec::new(),
            ambiguous_fraction: 0.0,
            median,
            p10,
            p90,
            unobservable_fraction: unobs,
        }
    }

    /// The position bound over one slice of the search volume, with its ambiguous cells.
    fn position_slice(&self, pl: &Plane, warnings: &mut Vec<String>) -> Slice {
        let (x0, x1) = (pl.lo[pl.xa], pl.hi[pl.xa]);
        let (y0, y1) = (pl.lo[pl.ya], pl.hi[pl.ya]);
        let res = self.res;
        let ny = res;
        let nx = (((x1 - x0) / (y1 - y0).max(1e-9)) * res as f64)
            .round()
            .clamp(8.0, 4.0 * res as f64) as usize;
        let values: Vec<Option<f64>> = (0..nx * ny)
            .into_par_iter()
            .map(|k| {
                let (ix, jy) = (k % nx, k / nx);
                let p = pl.point(ix as f64 / (nx - 1) as f64, jy as f64 / (ny - 1) as f64);
                let j = information(&self.bands, &self.snr_at(&p));
                crlb::position_rms(&self.sensors, self.c, p.into(), &j)
            })
            .collect();
        let (median, p10, p90, unobs) = percentiles(&values);
        let na = self.o.ambiguity_resolution;
        let ambiguous = self.ambiguous_cells(pl);
        let frac = if na > 0 {
            ambiguous.len() as f64 / (na * na) as f64
        } else {
            0.0
        };
        if !ambiguous.is_empty() {
            warnings.push(format!(
                "{} slice: {} of {} cells ({:.1} %) have a second position with the same delays (marked ×); a fix there can land on that mirror image",
                pl.name,
                ambiguous.len(),
                na * na,
                100.0 * frac,
            ));
        }
        let axis = |a: usize| ["x (m)", "y (m)", "z (m)"][a].to_string();
        Slice {
            name: format!(
                "{} ({} = {:.1} m)",
                pl.name,
                ["x", "y", "z"][pl.fixed],
                pl.other
            ),
            x_axis: axis(pl.xa),
            y_axis: axis(pl.ya),
            x_range: (x0, x1),
            y_range: (y0, y1),
            nx,
            ny,
            values,
            unit: "m".into(),
            ambiguous,
            ambiguous_fraction: frac,
            median,
            p10,
            p90,
            unobservable_fraction: unobs,
        }
    }

    /// Ambiguity: the cells of a coarse grid over the slice with a second position that has
    /// the same delays (none when `o.ambiguity_resolution` is 0).
    fn ambiguous_cells(&self, pl: &Plane) -> Vec<(f64, f64)> {
        let na = self.o.ambiguity_resolution;
        if na == 0 {
            return Vec::new();
        }
        let (geo, centre, ap, c) = (&self.geo, self.centre, self.ap, self.c);
        let bounds = Some((pl.lo.into(), pl.hi.into()));
        let pairs = geo.pairs(PairMode::All, 0);
        (0..na * na)
            .into_par_iter()
            .filter_map(|k| {
                let (ix, jy) = (k % na, k / na);
                let p = pl.point((ix as f64 + 0.5) / na as f64, (jy as f64 + 0.5) / na as f64);
                let obs: Vec<Obs> = pairs
                    .iter()
                    .map(|pr| Obs {
                        pair: *pr,
                        tdoa_s: geo.tdoa_s(&p, pr),
                    })
                    .collect();
                // Also start from the point mirrored through the centre's horizontal plane and
                // through the centre itself.
                let mut mz = p;
                mz.z = 2.0 * centre.z - p.z;
                let starts = [p, mz, 2.0 * centre - p];
                let sols = multilat::all_solutions(
                    geo,
                    &obs,
                    bounds,
                    &starts,
                    1e-5 * ap / c,
                    0.05 * ap.max(1.0),
                );
                (sols.len() > 1).then_some((p[pl.xa], p[pl.ya]))
            })
            .collect()
    }

    /// The bound along a line outward from the centre (horizontal, +x direction with a little
    /// y so it is off any symmetry axis): ranges in metres for compact (direction-only)
    /// arrays, multiples of the aperture for others.
    fn along_range(&self, direction: bool) -> Vec<(f64, Option<f64>)> {
        let dirn: Vector3<f64> = Vector3::new(0.96, 0.28, 0.0);
        [0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
            .iter()
            .map(|k| {
                let r = if direction { 2.0 * k } else { k * self.ap };
                if direction {
                    let snr =
                        vec![self.snr0 * (self.o.at_m / r.max(1e-3)).powi(2); self.sensors.len()];
                    let j = information(&self.bands, &snr);
                    let rel = self.relative_sensors();
                    let sd = match &self.line {
                        // A line: the angle to the axis at 60° from it.
                        Some((axis, side)) => {
                            crlb::cone_var(&rel, self.c, 60f64.to_radians(), axis, side, &j)
                                .map(|v| v.max(0.0).sqrt())
                        }
                        None => crlb::direction_cov(&rel, self.c, dirn.y.atan2(dirn.x), 0.3, &j)
                            .map(|cv| (cv[(0, 0)] * 0.3f64.cos().powi(2) + cv[(1, 1)]).sqrt()),
                    };
                    (r, sd.map(f64::to_degrees))
                } else {
                    let mut p = self.centre + dirn * r;
                    p.z = self.centre.z - 0.25 * r;
                    let j = information(&self.bands, &self.snr_at(&p));
                    (r, crlb::position_rms(&self.sensors, self.c, p.into(), &j))
                }
            })
            .collect()
    }
}

/// A length (or angle) with a readable unit and about three significant digits.
pub fn human(v: f64, unit: &str) -> String {
    if unit != "m" {
        return format!("{v:.3} {unit}");
    }
    let a = v.abs();
    if a >= 1.0 {
        format!("{v:.2} m")
    } else if a >= 0.01 {
        format!("{:.1} cm", v * 100.0)
    } else if a >= 1e-5 {
        format!("{:.2} mm", v * 1000.0)
    } else {
        format!("{:.1} µm", v * 1e6)
    }
}

impl std::fmt::Display for PlanReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "plan: {} ({} sensors, aperture {:.2} m, {} tracking)",
            self.description, self.sensors, self.aperture_m, self.mode
        )?;
        writeln!(f, "source: {}", self.source)?;
        let u = if self.mode == "direction" { "°" } else { "m" };
        writeln!(
            f,
            "  {:<28} {:>11} {:>11} {:>11} {:>13} {:>10}",
            "map", "p10", "median", "p90", "unobservable", "ambiguous"
        )?;
        for s in &self.slices {
            writeln!(
                f,
                "  {:<28} {:>11} {:>11} {:>11} {:>12.1}% {:>9.1}%",
                s.name,
                human(s.p10, u),
                human(s.median, u),
                human(s.p90, u),
                100.0 * s.unobservable_fraction,
                100.0 * s.ambiguous_fraction
            )?;
        }
        write!(f, "  bound outward from the centre:")?;
        for (r, v) in &self.along_range {
            match v {
                Some(v) => write!(f, "  {r:.1} m: {}", human(*v, u))?,
                None => write!(f, "  {r:.1} m: unobservable")?,
            }
        }
        writeln!(f)?;
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        for p in &self.files {
            writeln!(f, "wrote {}", p.display())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn load(rel: &str) -> Config {
        Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
    }

    fn quick() -> PlanOptions {
        PlanOptions {
            resolution: 40,
            ambiguity_resolution: 8,
            ..Default::default()
        }
    }

    /// The known behaviour: the bound grows with range, for every shipped array.
    #[test]
    fn bound_grows_with_range_on_the_shipped_arrays() {
        for f in [
            "boards/arrays/tetra-4-hydrophone.toml",
            "boards/arrays/room-distributed.toml",
            "boards/arrays/circular-4-mic.toml",
            "boards/arrays/circular-8-mic.toml",
            "boards/examples/harbour-orin-nx.toml",
        ] {
            let r = plan(&load(f), &quick()).unwrap();
            let v: Vec<f64> = r.along_range.iter().filter_map(|x| x.1).collect();
            assert!(v.len() >= 4, "{f}: {:?}", r.along_range);
            assert!(
                v.last().unwrap() > &(3.0 * v[1]),
                "{f}: {:?}",
                r.along_range
            );
            assert!(r.slices.iter().all(|s| s.median.is_finite()), "{f}");
        }
    }

    /// Planar arrays see elevation worst near their plane.
    #[test]
    fn planar_arrays_are_worst_along_their_plane() {
        let r = plan(&load("boards/arrays/circular-8-mic.toml"), &quick()).unwrap();
        let s = &r.slices[0];
        let near = s.value_at(30.0, 3.0);
        let high = s.value_at(30.0, 50.0).unwrap();
        assert!(near.is_none_or(|v| v > 3.0 * high), "{near:?} vs {high}");
        assert!(r.warnings.iter().any(|w| w.contains("planar")));
    }

    /// A line array maps the bound on its angle to the axis: the same for every turn about
    /// the axis, growing as 1 / sin θ towards the ends (endfire unobservable), and no planar
    /// warning.
    #[test]
    fn line_arrays_map_the_angle_to_their_axis() {
        let mut cfg = Config::for_array(
            (0..8).map(|i| [0.03 * i as f64, 0.0, 1.0]).collect(),
            343.0,
            16_000,
        );
        cfg.settle_mode("test");
        let r = plan(&cfg, &quick()).unwrap();
        let s = &r.slices[0];
        assert_eq!(s.name, "cone");
        let broadside = s.value_at(90.0, 0.0).unwrap();
        assert_eq!(s.value_at(90.0, 120.0), Some(broadside));
        let oblique = s.value_at(30.0, 0.0).unwrap();
        assert!(
            (oblique / broadside - 2.0).abs() < 0.1,
            "{oblique} vs {broadside}"
        );
        assert!(s.value_at(0.0, 0.0).is_none());
        assert!(!r.warnings.iter().any(|w| w.contains("planar")));
        assert!(r.warnings.iter().any(|w| w.contains("line array")));
    }

    /// Four hydrophones all at one depth: a source and its mirror image through their plane
    /// give the same delays, so most of a vertical slice is ambiguous, and on the plane itself
    /// depth is unobservable (the bound blows up there, the mirror plane). Five well-spread
    /// hydrophones (the harbour example) leave almost nothing ambiguous.
    #[test]
    fn ambiguity_and_mirror_plane() {
        let mut cfg = Config::for_array(
            vec![
                [0.0, 0.0, -10.0],
                [4.0, 0.0, -10.0],
                [0.0, 4.0, -10.0],
                [4.0, 4.0, -10.0],
            ],
            1500.0,
            48_000,
        );
        cfg.array.bounds_min_m = Some([-20.0, -20.0, -30.0]);
        cfg.array.bounds_max_m = Some([20.0, 20.0, 0.0]);
        let r = plan(&cfg, &quick()).unwrap();
        let side = &r.slices[1];
        assert!(side.ambiguous_fraction > 0.3, "{}", side.ambiguous_fraction);
        let at_plane = side.value_at(12.0, -10.0);
        let off = side.value_at(12.0, -20.0).unwrap();
        assert!(
            at_plane.is_none_or(|v| v > 10.0 * off),
            "{at_plane:?} vs {off}"
        );
        let h = plan(&load("boards/examples/harbour-orin-nx.toml"), &quick()).unwrap();
        assert!(
            h.slices.iter().all(|s| s.ambiguous_fraction < 0.05),
            "{:?}",
            h.slices
                .iter()
                .map(|s| s.ambiguous_fraction)
                .collect::<Vec<_>>()
        );
    }
}
