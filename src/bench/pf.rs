//! Particle-filter step timings over a grid of particle and model counts.

use std::time::Instant;

use super::{BenchOptions, Row, median, pick, time_two_passes};
use crate::bench::workload::{pf_init, pf_measurement, pf_params};
use crate::error::Result;
use crate::track::filter::particle::CpuParticleFilter;
use crate::track::{Estimate, FilterBank, TrackStep};

/// One filter step's timing: medians over the timed steps.
pub struct PfTiming {
    /// Seconds per step on the device clock where there is one, else the wall clock.
    pub s: f64,
    /// Wall seconds per step.
    pub wall_s: f64,
    /// Achieved device-memory bandwidth (GB/s): the median over the device-timed steps of each
    /// step's own bytes over its own device time. Steps that resample move more bytes and take
    /// longer than those that do not, so a step's bytes are only ever divided by that step's
    /// time. None where the backend has no device clock.
    pub gb_s: Option<f64>,
    pub reps: usize,
}

/// Time one filter step (see [`PfTiming`]).
pub fn time_pf(pf: &mut dyn FilterBank, budget_s: f64) -> Result<PfTiming> {
    let p = pf.params().clone();
    let mut init = pf_init();
    init.model_probs = vec![1.0 / p.n_models() as f32; p.n_models()];
    pf.init_track(&init)?;
    let mut est = vec![Estimate::new(p.n_models())];
    let mut k = 0u64;
    let mut rates = Vec::new();
    let (s, wall_s, reps) = time_two_passes(
        pf,
        budget_s,
        |f, on| f.set_device_timing(on),
        |f| {
            // The source moves steadily (2 m/s, as the prior): the common step, with
            // resampling whenever the effective sample size falls low enough.
            k += 1;
            let m = pf_measurement(&p, k);
            let t = Instant::now();
            f.step(&m, &[TrackStep::fixed(0, 0.05, 0.01)], &mut est)?;
            let wall = t.elapsed().as_secs_f64();
            let dev = f.last_device_time_s();
            if let (Some(d), Some(by)) = (dev, f.bytes_per_step()) {
                if d > 0.0 {
                    rates.push(by as f64 / d / 1e9);
                }
            }
            Ok((wall, dev))
        },
    )?;
    Ok(PfTiming {
        s,
        wall_s,
        gb_s: median(&mut rates),
        reps,
    })
}

/// One step of one track over the grid of particle and model counts.
pub(super) fn rows(opts: &BenchOptions, backends: &[&str]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let (parts, models): (&[usize], &[usize]) = if opts.quick {
        (&[2048, 16_384], &[1, 4])
    } else {
        (&[2048, 16_384, 262_144, 1 << 20, 1 << 22], &[1, 4, 16])
    };
    let (parts, models) = (pick(parts, &opts.pf_particles), pick(models, &opts.models));
    for &n in &parts {
        for &l in &models {
            let p = pf_params(n, l);
            for &b in backends {
                let mut pf: Box<dyn FilterBank> = match b {
                    "cuda" => crate::gpu::particle_filter(p.clone())?,
                    _ => Box::new(CpuParticleFilter::new(p.clone())),
                };
                let t = time_pf(pf.as_mut(), opts.budget_s)?;
                rows.push(Row {
                    stage: "pf".into(),
                    backend: b.into(),
                    params: format!("{n} particles x {l} models"),
                    median_us: t.s * 1e6,
                    per_unit: t.s * 1e9 / n as f64,
                    unit: "ns/particle".into(),
                    gb_s: t.gb_s,
                    wall_us: Some(t.wall_s * 1e6),
                    reps: t.reps,
                });
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::faults::PosingFilter;

    /// Steps that alternate between a short one that moves few bytes and a long one that moves
    /// many (as steps without and with resampling do), at the same rate of 2 GB/s.
    fn alternating(step: u64) -> (f64, u64) {
        if step % 2 == 0 {
            (300e-6, 600_000)
        } else {
            (100e-6, 200_000)
        }
    }

    /// A step's bytes are divided by that step's own time, not by the median step's: the
    /// figure is the device's rate whichever kind of step came last.
    #[test]
    fn filter_bandwidth_pairs_each_step_with_its_own_time() {
        let mut pf = PosingFilter::timed_by(pf_params(256, 1), alternating);
        let t = time_pf(&mut pf, 0.05).unwrap();
        let gb_s = t.gb_s.unwrap();
        assert!((gb_s - 2.0).abs() < 1e-9, "{gb_s} GB/s");
        assert!(t.s == 100e-6 || t.s == 300e-6, "median step {} s", t.s);
        assert!(t.reps >= 3);
    }

    /// A host backend has no device clock and no bandwidth figure.
    #[test]
    fn cpu_filter_has_no_bandwidth() {
        let mut pf = CpuParticleFilter::new(pf_params(256, 1));
        let t = time_pf(&mut pf, 0.02).unwrap();
        assert!(t.gb_s.is_none());
        assert!(t.s > 0.0 && t.wall_s > 0.0);
    }
}
