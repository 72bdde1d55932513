//! The negative log-likelihood ratio (NLLR) of a candidate tuple of multi-frame assignment:
//! a track and one entry per list (a measurement it explains, or a miss), against the same
//! measurements being false alarms.
//!
//! The corrected form (Deb, Yeddanapudi, Pattipati and Bar-Shalom 1997; digest of seed 001,
//! §2.5): the false-alarm density enters only for the lists where the tuple has a measurement,
//!
//! `c = Σ_s [ -(1 - u_s) ln(1 - P_D,s) - u_s ln(P_D,s p(z_s | X) / λ_s) ]`,
//!
//! with `u_s` = 1 for a measurement and 0 for a miss, and λ_s the false alarms per unit of list
//! s's measurement space (1 / ψ_s for one false alarm spread over the volume ψ_s). The thesis
//! prints the denominator as `Π_s 1/ψ_s` over every list, hits or not ([`nllr_as_printed`]),
//! which makes a miss cost depend on the units of the measurement: kept for the test that shows it.

/// Detection and clutter of one list (a frame, or a sensor pair of a frame).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ListModel {
    /// Probability that the source's measurement is in the list (0 < P_D < 1).
    pub pd: f64,
    /// False alarms per unit of measurement space (λ > 0).
    pub clutter_density: f64,
}

/// A tuple's entry in one list.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Entry {
    /// No measurement of this list (the dummy).
    Miss,
    /// A measurement, with the log of its likelihood under the track, ln p(z | X).
    Hit { log_likelihood: f64 },
}

/// The corrected NLLR of a track's tuple (one entry per list, `lists` in the same order). A
/// tuple of misses only costs Σ -ln(1 - P_D); the tuple of no track and no measurement, and a
/// lone measurement with no track (a false alarm), cost 0 by construction.
pub fn nllr(entries: &[Entry], lists: &[ListModel]) -> f64 {
    entries
        .iter()
        .zip(lists)
        .map(|(e, l)| match e {
            Entry::Miss => -(1.0 - l.pd).ln(),
            Entry::Hit { log_likelihood } => -(l.pd.ln() + log_likelihood - l.clutter_density.ln()),
        })
        .sum()
}

#[cfg(test)]
/// The NLLR as the thesis prints it (eqs. 4.7-4.10): every list's 1/ψ_s in the denominator, hit
/// or miss (ψ_s = 1 / λ_s). Wrong: for tests only.
pub fn nllr_as_printed(entries: &[Entry], lists: &[ListModel]) -> f64 {
    entries
        .iter()
        .zip(lists)
        .map(|(e, l)| {
            let numerator = match e {
                Entry::Miss => (1.0 - l.pd).ln(),
                Entry::Hit { log_likelihood } => l.pd.ln() + log_likelihood,
            };
            // ln of 1/ψ_s = ln λ_s, for every list.
            -(numerator - l.clutter_density.ln())
        })
        .sum()
}

#[cfg(test)]
/// ln N(z; mean, var) of a scalar measurement.
pub fn log_normal(z: f64, mean: f64, var: f64) -> f64 {
    -0.5 * ((z - mean).powi(2) / var + (std::f64::consts::TAU * var).ln())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTS: [ListModel; 3] = [
        ListModel {
            pd: 0.9,
            clutter_density: 0.05,
        },
        ListModel {
            pd: 0.8,
            clutter_density: 0.2,
        },
        ListModel {
            pd: 0.7,
            clutter_density: 1.5,
        },
    ];

    /// C3: a 1-D Gaussian hit against its closed form, a miss at -ln(1 - P_D), the empty tuple
    /// at 0.
    #[test]
    fn the_cost_has_its_closed_forms() {
        let (z, mean, var) = (2.3, 2.0, 0.04);
        let hit = nllr(
            &[Entry::Hit {
                log_likelihood: log_normal(z, mean, var),
            }],
            &LISTS[..1],
        );
        let closed = -(0.9f64.ln())
            + 0.05f64.ln()
            + 0.5 * (std::f64::consts::TAU * var).ln()
            + 0.5 * (z - mean).powi(2) / var;
        assert!((hit - closed).abs() < 1e-12, "{hit} against {closed}");
        let miss = nllr(&[Entry::Miss], &LISTS[1..2]);
        assert!((miss + 0.2f64.ln()).abs() < 1e-12);
        assert_eq!(nllr(&[], &[]), 0.0);
        // A likely hit is cheaper than a miss; an unlikely one dearer.
        let near = Entry::Hit {
            log_likelihood: log_normal(2.0, 2.0, 0.04),
        };
        let far = Entry::Hit {
            log_likelihood: log_normal(3.0, 2.0, 0.04),
        };
        let miss0 = nllr(&[Entry::Miss], &LISTS[..1]);
        assert!(nllr(&[near], &LISTS[..1]) < miss0 && miss0 < nllr(&[far], &LISTS[..1]));
    }

    /// C3: measuring in other units (z and its spread times k, the clutter density over k) leaves
    /// every tuple's cost as it was; the printed form's cost of any tuple with a miss moves.
    #[test]
    fn the_cost_does_not_depend_on_units_and_the_printed_one_does() {
        let (z, mean, var) = ([1.2, -0.4, 3.0], [1.0, -0.5, 2.5], [0.09, 0.01, 0.25]);
        let tuple = |k: f64, hits: [bool; 3]| -> (Vec<Entry>, Vec<ListModel>) {
            let entries = (0..3)
                .map(|s| {
                    if hits[s] {
                        Entry::Hit {
                            log_likelihood: log_normal(k * z[s], k * mean[s], k * k * var[s]),
                        }
                    } else {
                        Entry::Miss
                    }
                })
                .collect();
            let lists = LISTS
                .iter()
                .map(|l| ListModel {
                    clutter_density: l.clutter_density / k,
                    ..*l
                })
                .collect();
            (entries, lists)
        };
        for hits in [
            [true; 3],
            [true, false, true],
            [false; 3],
            [false, true, false],
        ] {
            let (e1, l1) = tuple(1.0, hits);
            let (e2, l2) = tuple(1000.0, hits);
            assert!((nllr(&e1, &l1) - nllr(&e2, &l2)).abs() < 1e-9, "{hits:?}");
            let printed = (nllr_as_printed(&e1, &l1) - nllr_as_printed(&e2, &l2)).abs();
            if hits.iter().all(|&h| h) {
                assert!(printed < 1e-9);
            } else {
                assert!(
                    printed > 1.0,
                    "{hits:?}: the printed form moved by {printed}"
                );
            }
        }
    }
}
