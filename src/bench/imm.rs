//! The tracker's IMM filter (`tracker.filter = "imm"`, [`crate::track::filter::imm`]:
//! one cubature filter per motion model, with data association over each pair's peaks), timed
//! as `--what pf` times the particle filters.

use super::{BenchOptions, Row, time_median};
use crate::bench::workload::{pf_init, pf_measurement, pf_params};
use crate::error::Result;
use crate::track::filter::imm::ImmFilter;
use crate::track::{Estimate, FilterBank, TrackInit, TrackStep};

/// Tracks stepped in one call (spread over the cores).
const IMM_TRACKS: usize = 1024;

/// [`IMM_TRACKS`] tracks of the tracker's three models on the five-hydrophone pier array
/// (10 pairs, 4 peaks each), one step each.
pub fn rows(opts: &BenchOptions) -> Result<Vec<Row>> {
    let mut p = pf_params(16, 3);
    p.slots = IMM_TRACKS;
    let mut f = ImmFilter::new(p.clone());
    let steps: Vec<TrackStep> = (0..IMM_TRACKS as u32)
        .map(|slot| TrackStep::fixed(slot, 0.05, 0.01))
        .collect();
    for t in &steps {
        f.init_track(&TrackInit {
            slot: t.slot,
            ..pf_init()
        })?;
    }
    let mut out = vec![Estimate::new(3); IMM_TRACKS];
    let mut frame = 0u64;
    let (s, reps) = time_median(opts.budget_s, 3, || {
        frame += 1;
        let m = pf_measurement(&p, frame);
        let t = std::time::Instant::now();
        f.step(&m, &steps, &mut out)?;
        Ok(t.elapsed().as_secs_f64())
    })?;
    Ok(vec![Row::per_ns(
        "imm",
        "cpu",
        format!(
            "{IMM_TRACKS} tracks, the tracker's 3 models (cubature, 7 states), 5 sensors, 10 pairs x 4 peaks, f64, {} threads",
            rayon::current_num_threads()
        ),
        s,
        IMM_TRACKS,
        "ns/track-step",
        reps,
    )])
}
