//! Ground truth: `truth.csv` rows `t,target,x,y,z`, with t the emission time. A target is
//! present between consecutive rows of its own, and absent across a gap: two rows more than
//! [`GAP_FACTOR`] times its usual spacing apart (a source that stopped or paused).

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, IoContext, Result};

/// Rows further apart than this many times a target's usual spacing mark a gap in it.
pub const GAP_FACTOR: f64 = 2.5;

/// Ground truth: per target, rows of (emission time, position), sorted by time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Truth {
    pub targets: BTreeMap<u32, Vec<(f64, [f64; 3])>>,
    /// Per target: its usual row spacing (the median), seconds.
    spacing: BTreeMap<u32, f64>,
}

impl Truth {
    /// Read `t,target,x,y,z` rows (a header line is skipped).
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).at(path)?;
        Self::parse(&text).map_err(|(line, problem)| Error::Scene {
            path: path.into(),
            problem: format!("line {line}: {problem}"),
            fix: "truth.csv holds rows t,target,x,y,z (seconds, integer id, metres)".into(),
        })
    }

    /// The truth of rows (emission time, target, position), as a simulator gives them.
    pub fn from_rows(rows: &[(f64, usize, [f64; 3])]) -> Self {
        let mut csv = String::new();
        for (t, k, p) in rows {
            csv += &format!("{t},{k},{},{},{}\n", p[0], p[1], p[2]);
        }
        // Rows written here from numbers always parse.
        Self::parse(&csv).unwrap_or_default()
    }

    pub fn parse(text: &str) -> std::result::Result<Self, (usize, String)> {
        let mut t = Truth::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || (i == 0 && line.chars().next().is_some_and(|c| c.is_alphabetic()))
            {
                continue;
            }
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            if f.len() < 5 {
                return Err((i + 1, format!("{} fields, expected 5", f.len())));
            }
            let num = |s: &str| {
                s.parse::<f64>()
                    .map_err(|e| (i + 1, format!("`{s}`: {e}")))
                    .and_then(|v| {
                        if v.is_finite() && v.abs() <= 1e9 {
                            Ok(v)
                        } else {
                            Err((i + 1, format!("`{s}` is not a finite number within 1e9")))
                        }
                    })
            };
            let time = num(f[0])?;
            let id = f[1]
                .parse::<u32>()
                .map_err(|e| (i + 1, format!("target `{}`: {e}", f[1])))?;
            let p = [num(f[2])?, num(f[3])?, num(f[4])?];
            t.targets.entry(id).or_default().push((time, p));
        }
        for rows in t.targets.values_mut() {
            rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        t.spacing = t
            .targets
            .iter()
            .filter_map(|(k, rows)| {
                let mut d: Vec<f64> = rows.windows(2).map(|w| w[1].0 - w[0].0).collect();
                d.sort_by(f64::total_cmp);
                d.get(d.len() / 2).map(|m| (*k, *m))
            })
            .collect();
        Ok(t)
    }

    /// Whether target `k`'s rows around `t` (at `t0` and `t1`) leave a gap between them.
    fn gap(&self, k: u32, t0: f64, t1: f64) -> bool {
        self.spacing
            .get(&k)
            .is_some_and(|s| t1 - t0 > GAP_FACTOR * s.max(1e-9))
    }

    /// A target's position at time `t` by linear interpolation (None outside its rows).
    pub fn at(&self, target: u32, t: f64) -> Option<[f64; 3]> {
        let rows = self.targets.get(&target)?;
        let i = rows.partition_point(|r| r.0 <= t);
        if i == 0 {
            return (rows.first()?.0 == t).then(|| rows[0].1);
        }
        if i == rows.len() {
            let last = rows.last()?;
            return (last.0 == t).then_some(last.1);
        }
        let (t0, p0) = rows[i - 1];
        let (t1, p1) = rows[i];
        if self.gap(target, t0, t1) {
            return (t == t0).then_some(p0);
        }
        let a = if t1 > t0 { (t - t0) / (t1 - t0) } else { 0.0 };
        Some([0, 1, 2].map(|k| p0[k] + a * (p1[k] - p0[k])))
    }

    /// Where a target fell silent, while `t` lies in one of its gaps (a pause): the position of
    /// the row before the gap. None while it sounds, before its first row or after its last.
    pub fn paused_at(&self, target: u32, t: f64) -> Option<[f64; 3]> {
        let rows = self.targets.get(&target)?;
        let i = rows.partition_point(|r| r.0 <= t);
        if i == 0 || i == rows.len() {
            return None;
        }
        let (t0, p0) = rows[i - 1];
        (t > t0 && self.gap(target, t0, rows[i].0)).then_some(p0)
    }

    /// The truth of a scene's frame seen from a turning array's frame: each row turned about
    /// the vertical through `centre` by the array's heading when its sound arrived there
    /// (`headings`, after the row's emission time by its range over `c`), as the inverse of
    /// [`crate::math::geo::Origin::enu`].
    pub fn in_array_frame(
        &self,
        headings: &crate::audio::heading::HeadingTable,
        centre: &[f64; 3],
        c: f64,
    ) -> Truth {
        let mut out = self.clone();
        for rows in out.targets.values_mut() {
            for (t, p) in rows.iter_mut() {
                let d = [p[0] - centre[0], p[1] - centre[1], p[2] - centre[2]];
                let range = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
                let h = headings.at(*t + range / c).unwrap_or(0.0);
                let (sn, cs) = h.to_radians().sin_cos();
                // enu = R a with R = [[c, s], [-s, c]]: a = Rᵀ enu.
                *p = [
                    centre[0] + d[0] * cs - d[1] * sn,
                    centre[1] + d[0] * sn + d[1] * cs,
                    p[2],
                ];
            }
        }
        out
    }

    pub fn span(&self) -> Option<(f64, f64)> {
        let lo = self
            .targets
            .values()
            .filter_map(|r| r.first())
            .map(|r| r.0)
            .fold(f64::INFINITY, f64::min);
        let hi = self
            .targets
            .values()
            .filter_map(|r| r.last())
            .map(|r| r.0)
            .fold(f64::NEG_INFINITY, f64::max);
        (lo <= hi).then_some((lo, hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target that pauses is absent across the gap in its rows, present on both sides.
    #[test]
    fn truth_has_gaps_where_a_source_paused() {
        let mut csv = String::from("t,target,x,y,z\n");
        for k in 0..=40 {
            let t = f64::from(k) * 0.05;
            if !(0.6..1.4).contains(&t) {
                csv.push_str(&format!("{t},3,{t},0,0\n"));
            }
        }
        let t = Truth::parse(&csv).unwrap();
        assert!(t.at(3, 0.52).is_some());
        assert!(t.at(3, 1.0).is_none(), "absent while paused");
        assert!(t.at(3, 1.55).is_some());
        assert_eq!(t.at(3, 0.55), Some([0.55, 0.0, 0.0]));
    }

    #[test]
    fn truth_interpolates_and_rejects_bad_rows() {
        let t = Truth::parse("t,target,x,y,z\n0,0,0,0,0\n1,0,2,4,6\n0.5,1,1,1,1\n").unwrap();
        assert_eq!(t.at(0, 0.25), Some([0.5, 1.0, 1.5]));
        assert_eq!(t.at(0, 1.0), Some([2.0, 4.0, 6.0]));
        assert_eq!(t.at(0, 1.5), None);
        assert_eq!(t.at(1, 0.5), Some([1.0, 1.0, 1.0]));
        assert_eq!(t.span(), Some((0.0, 1.0)));
        let e = Truth::parse("t,target,x,y,z\n0,0,0,zero,0\n").unwrap_err();
        assert_eq!(e.0, 2);
        // NaN, infinities and overflowing numbers are errors naming the line, not rows that
        // change the score without a word (reliability issue).
        for bad in ["NaN", "nan", "inf", "-inf", "1e999", "1e300"] {
            let text = format!("t,target,x,y,z\n0,0,0,0,0\n1,0,{bad},0,0\n");
            let e = Truth::parse(&text).unwrap_err();
            assert_eq!(e.0, 3, "{bad}");
            let text = format!("t,target,x,y,z\n{bad},0,0,0,0\n");
            assert!(Truth::parse(&text).is_err(), "{bad}");
        }
    }
}
