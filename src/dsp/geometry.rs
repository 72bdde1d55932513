//! Array geometry: sensor positions, sensor pairs, physical TDOA bounds, and the rank checks that
//! decide whether 3-D positions (or only directions) are observable.
//!
//! Convention: the TDOA of pair (a, b) is `tau_ab = (r_a - r_b) / c`, the arrival time at sensor a
//! minus the arrival time at sensor b. GCC-PHAT of `X_a X_b*` peaks at this lag.

use nalgebra::{Matrix3, Vector3};

/// Sensor positions (metres, array frame) and the speed of sound.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayGeometry {
    pub sensors_m: Vec<[f64; 3]>,
    pub speed_of_sound_m_s: f64,
}

/// One sensor pair and its largest physically possible TDOA.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    pub a: usize,
    pub b: usize,
    /// |m_a - m_b| / c.
    pub max_tdoa_s: f64,
}

/// Which pairs to correlate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PairMode {
    /// Each sensor against one reference sensor: K-1 pairs, the minimal set.
    Reference,
    /// Every pair: K(K-1)/2 pairs; redundant, so one bad channel or peak is outvoted.
    All,
}

/// How the sensors span space.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Span {
    /// Fewer than two distinct positions.
    Point,
    /// All sensors on a line: only the angle to that line is observable.
    Line,
    /// All sensors in a plane: 3-D positions have a mirror ambiguity through the plane.
    Plane,
    /// Non-coplanar: 3-D positions are observable.
    Volume,
}

/// At most `max` of `pairs` (over `n` sensors): all of them when they fit, else the longest
/// baselines (the finest angles, and near an array the most curvature), taken longest first
/// with each sensor in at most ⌈2 max / n⌉ of them so that every sensor keeps a share (a dead
/// channel then costs only its own pairs), then topped up longest first. The kept pairs stay in
/// their given order.
pub fn longest_baselines(pairs: Vec<Pair>, n: usize, max: usize) -> Vec<Pair> {
    if pairs.len() <= max {
        return pairs;
    }
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by(|&i, &j| pairs[j].max_tdoa_s.total_cmp(&pairs[i].max_tdoa_s));
    let cap = (2 * max).div_ceil(n.max(1));
    let mut uses = vec![0usize; n];
    let mut keep = vec![false; pairs.len()];
    let mut kept = 0;
    for &i in &order {
        let (a, b) = (pairs[i].a, pairs[i].b);
        if kept < max && uses[a] < cap && uses[b] < cap {
            keep[i] = true;
            uses[a] += 1;
            uses[b] += 1;
            kept += 1;
        }
    }
    for &i in &order {
        if kept < max && !keep[i] {
            keep[i] = true;
            kept += 1;
        }
    }
    pairs
        .into_iter()
        .zip(keep)
        .filter_map(|(p, k)| k.then_some(p))
        .collect()
}

impl ArrayGeometry {
    pub fn new(sensors_m: Vec<[f64; 3]>, speed_of_sound_m_s: f64) -> Self {
        Self {
            sensors_m,
            speed_of_sound_m_s,
        }
    }

    pub fn len(&self) -> usize {
        self.sensors_m.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sensors_m.is_empty()
    }

    pub fn sensor(&self, i: usize) -> Vector3<f64> {
        Vector3::from(self.sensors_m[i])
    }

    pub fn centroid(&self) -> Vector3<f64> {
        let n = self.len().max(1) as f64;
        self.sensors_m
            .iter()
            .fold(Vector3::zeros(), |acc, s| acc + Vector3::from(*s))
            / n
    }

    /// The largest distance between two sensors.
    pub fn aperture_m(&self) -> f64 {
        let mut best = 0.0f64;
        for i in 0..self.len() {
            for j in i + 1..self.len() {
                best = best.max((self.sensor(i) - self.sensor(j)).norm());
            }
        }
        best
    }

    pub fn distance(&self, a: usize, b: usize) -> f64 {
        (self.sensor(a) - self.sensor(b)).norm()
    }

    /// Pairs in a fixed order: reference mode gives (ref, j) for j != ref in channel order; all
    /// mode gives (i, j) for i < j in lexicographic order.
    pub fn pairs(&self, mode: PairMode, reference: usize) -> Vec<Pair> {
        let c = self.speed_of_sound_m_s;
        let mk = |a: usize, b: usize| Pair {
            a,
            b,
            max_tdoa_s: self.distance(a, b) / c,
        };
        match mode {
            PairMode::Reference => (0..self.len())
                .filter(|&j| j != reference)
                .map(|j| mk(reference, j))
                .collect(),
            PairMode::All => {
                let mut v = Vec::new();
                for i in 0..self.len() {
                    for j in i + 1..self.len() {
                        v.push(mk(i, j));
                    }
                }
                v
            }
        }
    }

    /// The centred sensor cloud's scatter, Σ (s − c)(s − c)ᵀ over the sensors.
    fn scatter(&self) -> Matrix3<f64> {
        let c = self.centroid();
        let mut m = Matrix3::<f64>::zeros();
        for s in &self.sensors_m {
            let d = Vector3::from(*s) - c;
            m += d * d.transpose();
        }
        m
    }

    /// Singular values of the centred sensor cloud, largest first (metres, RMS spread per axis).
    pub fn spread_m(&self) -> [f64; 3] {
        let m = self.scatter();
        let n = self.len().max(1) as f64;
        let mut ev: Vec<f64> = m
            .symmetric_eigenvalues()
            .iter()
            .map(|e| (e.max(0.0) / n).sqrt())
            .collect();
        ev.sort_by(|a, b| b.total_cmp(a));
        [ev[0], ev[1], ev[2]]
    }

    /// The unit normal of a flat array's plane (the direction of least spread), `None` unless
    /// [`Self::span`] is [`Span::Plane`]. Its sign is arbitrary.
    pub fn plane_normal(&self) -> Option<Vector3<f64>> {
        if self.span() != Span::Plane {
            return None;
        }
        let m = self.scatter();
        let e = m.symmetric_eigen();
        let i = e.eigenvalues.imin();
        Some(e.eigenvectors.column(i).into_owned())
    }

    /// The unit direction of a line array's axis (the direction of most spread), pointing
    /// from the first sensor towards the last; `None` unless [`Self::span`] is [`Span::Line`].
    pub fn line_axis(&self) -> Option<Vector3<f64>> {
        if self.span() != Span::Line {
            return None;
        }
        let m = self.scatter();
        let e = m.symmetric_eigen();
        let axis: Vector3<f64> = e.eigenvectors.column(e.eigenvalues.imax()).into_owned();
        let run = self.sensor(self.len() - 1) - self.sensor(0);
        Some(if axis.dot(&run) < 0.0 { -axis } else { axis })
    }

    /// How the sensors span space. A dimension counts when its spread exceeds 2% of the largest
    /// (and 1 mm): below that, timing noise swamps the out-of-plane information.
    pub fn span(&self) -> Span {
        let s = self.spread_m();
        let tol = (0.02 * s[0]).max(1e-3);
        if s[0] <= 1e-3 {
            Span::Point
        } else if s[1] <= tol {
            Span::Line
        } else if s[2] <= tol {
            Span::Plane
        } else {
            Span::Volume
        }
    }

    /// The exact TDOA of a pair for a source at `p` (near field).
    pub fn tdoa_s(&self, p: &Vector3<f64>, pair: &Pair) -> f64 {
        ((p - self.sensor(pair.a)).norm() - (p - self.sensor(pair.b)).norm())
            / self.speed_of_sound_m_s
    }

    /// The gradient of a pair's TDOA with respect to the source position `p` (s/m).
    pub fn tdoa_gradient(&self, p: &Vector3<f64>, pair: &Pair) -> Vector3<f64> {
        let da = p - self.sensor(pair.a);
        let db = p - self.sensor(pair.b);
        (da / da.norm().max(1e-9) - db / db.norm().max(1e-9)) / self.speed_of_sound_m_s
    }

    /// The position spread (m, the root of the covariance's trace) that `pairs`' TDOAs, each
    /// with independent noise `sigma_s`, leave at `p`: σ² (JᵀJ)⁻¹ with J the TDOAs' gradients.
    /// None where the pairs leave a direction unobservable there. (Pairs that share sensors
    /// are not independent, so this is a little narrower than the truth: a yardstick, not a
    /// bound.)
    pub fn tdoa_spread_m(&self, pairs: &[Pair], p: &Vector3<f64>, sigma_s: f64) -> Option<f64> {
        let mut jtj = Matrix3::<f64>::zeros();
        for pair in pairs {
            let g = self.tdoa_gradient(p, pair);
            jtj += g * g.transpose();
        }
        let ev = jtj.symmetric_eigenvalues();
        if !(ev.max() > 0.0) || ev.min() <= 1e-12 * ev.max() {
            return None;
        }
        let cov = jtj.try_inverse()? * (sigma_s * sigma_s);
        let spread = cov.trace().max(0.0).sqrt();
        spread.is_finite().then_some(spread)
    }

    /// The far-field TDOA of a pair for a unit direction `u` pointing from the array to the source.
    pub fn tdoa_far_s(&self, u: &Vector3<f64>, pair: &Pair) -> f64 {
        (self.sensor(pair.b) - self.sensor(pair.a)).dot(u) / self.speed_of_sound_m_s
    }

    /// Mean distance from `p` to the sensors.
    pub fn mean_range_m(&self, p: &Vector3<f64>) -> f64 {
        self.sensors_m
            .iter()
            .map(|s| (p - Vector3::from(*s)).norm())
            .sum::<f64>()
            / self.len().max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tetra() -> ArrayGeometry {
        ArrayGeometry::new(
            vec![
                [0.0, 0.0, 0.0],
                [1.0, 0.0, 0.0],
                [0.0, 1.0, 0.0],
                [0.0, 0.0, 1.0],
            ],
            1500.0,
        )
    }

    #[test]
    fn pair_orders() {
        let g = tetra();
        let r: Vec<_> = g
            .pairs(PairMode::Reference, 2)
            .iter()
            .map(|p| (p.a, p.b))
            .collect();
        assert_eq!(r, vec![(2, 0), (2, 1), (2, 3)]);
        let a: Vec<_> = g
            .pairs(PairMode::All, 0)
            .iter()
            .map(|p| (p.a, p.b))
            .collect();
        assert_eq!(a, vec![(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]);
        let p = g.pairs(PairMode::All, 0)[3];
        assert!((p.max_tdoa_s - 2f64.sqrt() / 1500.0).abs() < 1e-15);
    }

    #[test]
    fn tdoa_spread_grows_with_range_and_noise() {
        let g = tetra();
        let pairs = g.pairs(PairMode::All, 0);
        let sigma = 1e-5;
        let dir = Vector3::new(1.0, 2.0, -2.0).normalize();
        let at = |r: f64| {
            g.tdoa_spread_m(&pairs, &(g.centroid() + dir * r), sigma)
                .unwrap()
        };
        // Near the array the spread is of the order of c sigma (1.5 cm); far from it the range
        // axis dominates and grows as the square of the range.
        assert!(at(0.5) < 0.1, "{}", at(0.5));
        let ratio = at(40.0) / at(20.0);
        assert!((ratio - 4.0).abs() < 0.2, "{ratio}");
        assert!(
            (g.tdoa_spread_m(&pairs, &(dir * 20.0), 2.0 * sigma).unwrap()
                / g.tdoa_spread_m(&pairs, &(dir * 20.0), sigma).unwrap()
                - 2.0)
                .abs()
                < 1e-9
        );
        // The multilateration's covariance is the same matrix at the same noise.
        let x = g.centroid() + dir * 10.0;
        let obs: Vec<_> = pairs
            .iter()
            .map(|p| crate::dsp::multilat::Obs {
                pair: *p,
                tdoa_s: g.tdoa_s(&x, p),
            })
            .collect();
        let fix = crate::dsp::multilat::locate(&g, &obs, sigma, None, &[x]).unwrap();
        let from_fix = fix.covariance.trace().sqrt();
        let spread = g.tdoa_spread_m(&pairs, &x, sigma).unwrap();
        assert!(
            (from_fix / spread - 1.0).abs() < 1e-3,
            "{from_fix} {spread}"
        );
        // A line array cannot see rotations about its axis.
        let line = ArrayGeometry::new(vec![[0.0; 3], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0]], 1500.0);
        let lp = line.pairs(PairMode::All, 0);
        assert!(
            line.tdoa_spread_m(&lp, &Vector3::new(3.0, 4.0, 5.0), sigma)
                .is_none()
        );
    }

    #[test]
    fn spans() {
        assert_eq!(tetra().span(), Span::Volume);
        let mut g = tetra();
        g.sensors_m[3] = [0.5, 0.5, 0.0];
        assert_eq!(g.span(), Span::Plane);
        g.sensors_m = vec![[0.0; 3], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0]];
        assert_eq!(g.span(), Span::Line);
        g.sensors_m = vec![[0.0; 3], [0.0; 3]];
        assert_eq!(g.span(), Span::Point);
    }

    #[test]
    fn a_flat_arrays_normal_is_across_its_plane() {
        assert!(tetra().plane_normal().is_none());
        // A ring tilted about the x axis by 0.3 rad.
        let (c, s) = (0.3f64.cos(), 0.3f64.sin());
        let ring = (0..8)
            .map(|i| {
                let a = i as f64 * std::f64::consts::TAU / 8.0;
                [0.05 * a.cos(), 0.05 * a.sin() * c, 0.05 * a.sin() * s]
            })
            .collect();
        let n = ArrayGeometry::new(ring, 343.0)
            .plane_normal()
            .expect("a ring is flat");
        assert!(
            (n.dot(&Vector3::new(0.0, -s, c)).abs() - 1.0).abs() < 1e-9,
            "{n}"
        );
    }

    #[test]
    fn far_field_is_the_limit_of_near_field() {
        let g = tetra();
        let u = Vector3::new(0.3, -0.5, 0.8).normalize();
        for pair in g.pairs(PairMode::All, 0) {
            let near = g.tdoa_s(&(u * 1e6), &pair);
            let far = g.tdoa_far_s(&u, &pair);
            assert!((near - far).abs() < 1e-9, "{near} vs {far}");
        }
    }

    /// 32 microphones on a 3 cm line with every pair (496) cut to 120: the longest baselines,
    /// every sensor in at least a few pairs and none in more than ⌈240 / 32⌉ = 8, kept in
    /// their given order; at or under the limit nothing changes.
    #[test]
    fn longest_baselines_share_the_sensors() {
        let g = ArrayGeometry::new(
            (0..32).map(|i| [0.03 * i as f64, 0.0, 0.0]).collect(),
            343.0,
        );
        let all = g.pairs(PairMode::All, 0);
        assert_eq!(longest_baselines(all.clone(), 32, 496), all);
        let kept = longest_baselines(all.clone(), 32, 120);
        assert_eq!(kept.len(), 120);
        let mut uses = [0usize; 32];
        for p in &kept {
            uses[p.a] += 1;
            uses[p.b] += 1;
        }
        assert!(uses.iter().all(|&u| (3..=8).contains(&u)), "{uses:?}");
        assert!(kept.windows(2).all(|w| (w[0].a, w[0].b) < (w[1].a, w[1].b)));
        let mean = |v: &[Pair]| v.iter().map(|p| p.max_tdoa_s).sum::<f64>() / v.len() as f64;
        assert!(
            mean(&kept) > 1.5 * mean(&all),
            "{} vs {}",
            mean(&kept),
            mean(&all)
        );
    }
}
