//! The Bernoulli existence recursion of PF-TBD (Rutten et al.; digest B2.4, steps 3–5), in the
//! log domain: a frame's likelihood ratios can be astronomically large, so the particle sums
//! arrive as logarithms and are never exponentiated alone.

/// The birth and death probabilities of the existence chain, per frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chain {
    /// P(E_k = 1 | E_{k−1} = 0).
    pub p_birth: f64,
    /// P(E_k = 0 | E_{k−1} = 1).
    pub p_death: f64,
}

impl Chain {
    /// Per-frame probabilities from per-second rates: a source appears at `births_per_s` while
    /// absent and lives `lifetime_s` on average, at `frame_s` seconds a frame. Set per second,
    /// not per frame (digest B5.4), so the frame rate does not change what they mean.
    pub fn per_second(births_per_s: f64, lifetime_s: f64, frame_s: f64) -> Self {
        Self {
            p_birth: 1.0 - (-births_per_s * frame_s).exp(),
            p_death: 1.0 - (-frame_s / lifetime_s).exp(),
        }
    }

    /// The prior's next existence probability with no information (l ≡ 1).
    pub fn predict(&self, p: f64) -> f64 {
        self.p_birth * (1.0 - p) + (1.0 - self.p_death) * p
    }
}

/// One frame's existence update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Existence {
    /// P(E_k = 1 | z_1..k).
    pub p: f64,
    /// The birth particles' share of the posterior mass, M_b (0 when nothing exists).
    pub birth_share: f64,
    /// ln of the birth set's mixture factor: its particles' log-weights plus this, minus
    /// `log_total`, are their normalised log-weights.
    pub log_birth_factor: f64,
    /// The same for the continuing set.
    pub log_cont_factor: f64,
    /// ln(M̃_b + M̃_c).
    pub log_total: f64,
}

/// ln(e^a + e^b) without overflow; −∞ when both are.
pub fn log_add(a: f64, b: f64) -> f64 {
    let m = a.max(b);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + ((a - m).exp() + (b - m).exp()).ln()
}

/// ln Σ exp(xᵢ) by max subtraction; −∞ for an empty or all −∞ slice.
pub fn log_sum_exp(xs: &[f64]) -> f64 {
    let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY || m.is_nan() {
        return m;
    }
    m + xs.iter().map(|&x| (x - m).exp()).sum::<f64>().ln()
}

/// Steps 3–5 of B2.4: the existence probability after frame k from P_{k−1} and the logarithms
/// of the two particle sets' weight sums (each already divided by its particle count, eq. 20
/// and 21: `log_sum_birth` = ln Σ w̃^(b), `log_sum_cont` = ln Σ w̃^(c)).
pub fn update(chain: &Chain, p_prev: f64, log_sum_birth: f64, log_sum_cont: f64) -> Existence {
    let p_prev = p_prev.clamp(0.0, 1.0);
    let log_birth_factor = chain.p_birth.ln() + (1.0 - p_prev).ln();
    let log_cont_factor = (1.0 - chain.p_death).ln() + p_prev.ln();
    let log_mb = log_birth_factor + log_sum_birth;
    let log_mc = log_cont_factor + log_sum_cont;
    let log_total = log_add(log_mb, log_mc);
    // The mass of "no target now": dies, or stays unborn.
    let log_absent = (chain.p_death * p_prev + (1.0 - chain.p_birth) * (1.0 - p_prev)).ln();
    let p = sigmoid(log_total - log_absent);
    let birth_share = if log_total == f64::NEG_INFINITY {
        0.0
    } else {
        (log_mb - log_total).exp()
    };
    Existence {
        p,
        birth_share,
        log_birth_factor,
        log_cont_factor,
        log_total,
    }
}

/// 1 / (1 + e^−x), stable at both ends (±∞ included).
fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAIN: Chain = Chain {
        p_birth: 0.05,
        p_death: 0.05,
    };

    /// B-4: with no information (every likelihood ratio 1, so each set's normalised sum is 1)
    /// the existence probability follows the Markov prior exactly.
    #[test]
    fn uninformative_frames_follow_the_prior() {
        let chain = Chain {
            p_birth: 0.02,
            p_death: 0.1,
        };
        let mut p = 0.0;
        for _ in 0..200 {
            let next = update(&chain, p, 0.0, 0.0).p;
            let prior = chain.predict(p);
            assert!((next - prior).abs() < 1e-14, "{next} against {prior}");
            p = next;
        }
        // The stationary point p_b / (p_b + p_d).
        assert!((p - 0.02 / 0.12).abs() < 1e-9, "{p}");
    }

    /// B-4: a hand-computed two-frame example. Frame 1 from P_0 = 0 with Σw̃_b = 4:
    /// M̃_b = 0.05 · 1 · 4 = 0.2, M̃_c = 0, P_1 = 0.2 / (0.2 + 0.95) = 4/23.
    /// Frame 2 with Σw̃_b = 2, Σw̃_c = 10: M̃_b = 0.05 · 19/23 · 2 = 1.9/23,
    /// M̃_c = 0.95 · 4/23 · 10 = 38/23, absent = 0.05 · 4/23 + 0.95 · 19/23 = 18.25/23,
    /// P_2 = 39.9 / 58.15, M_b = 1.9 / 39.9.
    #[test]
    fn two_frames_by_hand() {
        let one = update(&CHAIN, 0.0, 4f64.ln(), f64::NEG_INFINITY);
        assert!((one.p - 4.0 / 23.0).abs() < 1e-14, "{}", one.p);
        assert!((one.birth_share - 1.0).abs() < 1e-14);
        let two = update(&CHAIN, one.p, 2f64.ln(), 10f64.ln());
        assert!((two.p - 39.9 / 58.15).abs() < 1e-14, "{}", two.p);
        assert!((two.birth_share - 1.9 / 39.9).abs() < 1e-14);
        // The factors normalise both sets together.
        let mb = (two.log_birth_factor + 2f64.ln() - two.log_total).exp();
        let mc = (two.log_cont_factor + 10f64.ln() - two.log_total).exp();
        assert!((mb + mc - 1.0).abs() < 1e-14);
    }

    /// Likelihood ratios far beyond f64's range in the linear domain still give a finite answer.
    #[test]
    fn huge_log_ratios_stay_finite() {
        let e = update(&CHAIN, 0.3, 5000.0, 4000.0);
        assert!(e.p > 0.999_999 && e.p <= 1.0, "{}", e.p);
        assert!((e.birth_share - 1.0).abs() < 1e-12);
        let e = update(&CHAIN, 0.3, -5000.0, -4000.0);
        assert!(e.p < 1e-100 && e.p >= 0.0, "{}", e.p);
        assert!(e.birth_share.is_finite());
        assert_eq!(log_sum_exp(&[]), f64::NEG_INFINITY);
        assert!((log_sum_exp(&[1000.0, 1000.0]) - (1000.0 + 2f64.ln())).abs() < 1e-12);
    }

    #[test]
    fn rates_per_second_mean_the_same_at_any_frame_rate() {
        for frame_s in [0.02, 0.1, 1.0] {
            let c = Chain::per_second(0.001, 30.0, frame_s);
            // Mean lifetime in frames × frame length = 30 s (geometric, to first order).
            let life_s = frame_s / c.p_death;
            assert!((life_s - 30.0).abs() / 30.0 < 0.02, "{life_s}");
            let per_s = c.p_birth / frame_s;
            assert!((per_s - 0.001).abs() / 0.001 < 0.01, "{per_s}");
        }
    }
}
