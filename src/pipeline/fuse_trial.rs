//! `sonotrack trial` of a two-array family: each scene is heard by two arrays, each replayed
//! in memory as a node would run it (georeferenced, its own stream), and the two streams are
//! fused by the fusion service's own parser and [`Fuser`] at 10 Hz of stream time. Each
//! array alone and the fusion are scored against the same truth.

use serde::Serialize;

use crate::analysis::stream::parse_stream;
use crate::analysis::trial::{FamilySummary, SceneScore, score_scene, summarise};
use crate::analysis::truth::Truth;
use crate::audio::sim::family::FamilySpec;
use crate::audio::sim::{SceneSpec, SimSource};
use crate::config::Config;
use crate::error::{Error, IoContext, Result};
use crate::fusion::engine::{FuseParams, Fuser};
use crate::fusion::report::{Payload, TimeBase, parse_timed};
use crate::gpu::BackendChoice;
use crate::math::geo::Origin;
use crate::output::{DeletedMessage, FrameStamp};
use crate::pipeline::fuse::{fused_end, fused_message};
use crate::pipeline::replay::{ReplayOptions, replay_source};
use crate::pipeline::trial::{TrialOptions, scoring_of};

/// Fused estimates per second of stream time.
const FUSE_RATE_HZ: f64 = 10.0;

/// One scene: each array alone and fused.
#[derive(Debug, Clone, Serialize)]
pub struct TwoArrayScene {
    pub index: u32,
    /// Where the second array's origin is in the first's frame (m).
    pub second_at_m: [f64; 3],
    pub first: SceneScore,
    pub second: SceneScore,
    pub fused: SceneScore,
}

/// The trial's result.
#[derive(Debug, Clone, Serialize)]
pub struct TwoArrayReport {
    pub family: String,
    pub seed: u64,
    pub runs: u32,
    pub sets: Vec<String>,
    pub first: FamilySummary,
    pub second: FamilySummary,
    pub fused: FamilySummary,
    /// Per scene: fused RMSE over the better array's (None where a stream had no track).
    pub fused_over_better: Vec<Option<f64>>,
    pub scenes: Vec<TwoArrayScene>,
}

impl std::fmt::Display for TwoArrayReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "family {} ({} scenes, seed {}): each array alone and fused",
            self.family, self.runs, self.seed
        )?;
        writeln!(
            f,
            "scene  second array at (m)   RMSE first  second  fused   fused/better  ids first second fused"
        )?;
        for (s, r) in self.scenes.iter().zip(&self.fused_over_better) {
            writeln!(
                f,
                "{:>5}  ({:>6.1}, {:>6.1})     {:>10}  {:>6}  {:>6}  {:>12}  {:>9} {:>6} {:>5}",
                s.index,
                s.second_at_m[0],
                s.second_at_m[1],
                opt(s.first.rmse, 3),
                opt(s.second.rmse, 3),
                opt(s.fused.rmse, 3),
                opt(*r, 2),
                s.first.id_switches,
                s.second.id_switches,
                s.fused.id_switches
            )?;
        }
        writeln!(f, "first array:  {}", self.first)?;
        writeln!(f, "second array: {}", self.second)?;
        writeln!(f, "fused:        {}", self.fused)?;
        let mut r: Vec<f64> = self.fused_over_better.iter().flatten().copied().collect();
        r.sort_by(f64::total_cmp);
        if let (Some(best), Some(worst)) = (r.first(), r.last()) {
            let mean = r.iter().sum::<f64>() / r.len() as f64;
            write!(
                f,
                "fused RMSE / the better array's: mean {mean:.2}, median {:.2}, best {best:.2}, worst {worst:.2}",
                r[r.len() / 2]
            )?;
        }
        Ok(())
    }
}

/// `x` with `decimals`, or "-".
fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
}

/// Run `o.runs` scenes of a family with a `[second_array]`.
pub fn run_two_array_trial(family: &FamilySpec, o: &TrialOptions) -> Result<TwoArrayReport> {
    use rayon::prelude::*;
    if o.runs == 0 {
        return Err(Error::Usage("--runs must be at least 1".into()));
    }
    let scenes: Vec<Result<TwoArrayScene>> = (0..o.runs)
        .into_par_iter()
        .map(|i| run_two_array_scene(family, o, i))
        .collect();
    let scenes = scenes.into_iter().collect::<Result<Vec<_>>>()?;
    let first_cfg = node_config(&family.draw(o.seed, 0), o)?;
    let scoring = scoring_of(family, &first_cfg, false);
    let pick = |f: fn(&TwoArrayScene) -> &SceneScore| {
        summarise(
            &scenes.iter().map(|s| f(s).clone()).collect::<Vec<_>>(),
            &scoring,
        )
    };
    Ok(TwoArrayReport {
        family: family.name.clone(),
        seed: o.seed,
        runs: o.runs,
        sets: o.sets.clone(),
        first: pick(|s| &s.first),
        second: pick(|s| &s.second),
        fused: pick(|s| &s.fused),
        fused_over_better: scenes
            .iter()
            .map(|s| {
                let better = match (s.first.rmse, s.second.rmse) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                Some(s.fused.rmse? / better?)
            })
            .collect(),
        scenes,
    })
}

/// A node's configuration for `spec` (georeferenced at its origin), with the trial's settings.
fn node_config(spec: &SceneSpec, o: &TrialOptions) -> Result<Config> {
    let cfg = Config::for_scene(spec).with_overrides(&o.sets)?;
    cfg.validate(&spec.description)?;
    Ok(cfg)
}

/// One array's replay of its scene: its score (in its own frame) and its stream.
fn run_node(
    spec: SceneSpec,
    family: &FamilySpec,
    o: &TrialOptions,
    index: u32,
    name: &str,
) -> Result<(SceneScore, String)> {
    let cfg = node_config(&spec, o)?;
    let mut sim = SimSource::new(spec)?;
    let truth = Truth::from_rows(&sim.truth());
    let path = std::env::temp_dir().join(format!(
        "sonotrack-fuse-trial-{}-{index}-{name}.jsonl",
        std::process::id()
    ));
    let opts = ReplayOptions {
        backend: o.backend.unwrap_or(BackendChoice::Cpu),
        progress: false,
        bound: false,
        warmup_s: family.scoring.warmup_s,
        out: Some(path.display().to_string()),
        ..ReplayOptions::default()
    };
    let summary = replay_source(&cfg, &mut sim, 0, Some(&truth), &opts)?;
    let text = std::fs::read_to_string(&path).at(&path)?;
    let _ = std::fs::remove_file(&path);
    let scoring = scoring_of(family, &cfg, false);
    let score = score_scene(index, &summary.frames, &truth, &scoring, summary.load());
    Ok((score, text))
}

/// Simulate scene `index` for both arrays, replay each, fuse and score.
pub fn run_two_array_scene(
    family: &FamilySpec,
    o: &TrialOptions,
    index: u32,
) -> Result<TwoArrayScene> {
    let mut spec = family.draw(o.seed, index);
    let (Some(origin), Some(b)) = (spec.origin, spec.other_arrays.pop()) else {
        return Err(Error::Usage(format!(
            "family {} has no [second_array]: fusion trials need one",
            family.name
        )));
    };
    let second = spec.heard_by(&b);
    let truth = Truth::from_rows(&SimSource::new(spec.clone())?.truth());
    let cfg = node_config(&spec, o)?;
    let (first, text_a) = run_node(spec, family, o, index, "a")?;
    let (second, text_b) = run_node(second, family, o, index, "b")?;
    let fused_text = fuse_streams(
        &[("a", &text_a), ("b", &text_b)],
        &origin,
        family.duration_s,
    );
    let frames = parse_stream(&fused_text)
        .map_err(|(line, e)| Error::Usage(format!("fused stream line {line}: {e}")))?;
    let scoring = scoring_of(family, &cfg, false);
    let fused = score_scene(index, &frames, &truth, &scoring, 0.0);
    Ok(TwoArrayScene {
        index,
        second_at_m: b.at_m,
        first,
        second,
        fused,
    })
}

/// Fuse node streams (JSON Lines, stream time) at [`FUSE_RATE_HZ`] into a fused stream in the
/// first array's frame (`origin`), as `sonotrack fuse` would publish it.
fn fuse_streams(nodes: &[(&str, &str)], origin: &Origin, duration_s: f64) -> String {
    let mut reports: Vec<(f64, String, Payload)> = Vec::new();
    for (name, text) in nodes {
        for line in text.lines() {
            let p = parse_timed(name, line.as_bytes(), origin, TimeBase::Stream);
            let t = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v["t_frame"].as_f64().or(v["t"].as_f64()))
                .unwrap_or(0.0);
            reports.push((t, (*name).to_string(), p));
        }
    }
    reports.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut fuser = Fuser::new(FuseParams {
        // (The simulated arrays are placed exactly.)
        survey_std_m: 0.0,
        ..FuseParams::default()
    });
    let mut out = String::new();
    let mut next = reports.into_iter().peekable();
    let steps = (duration_s * FUSE_RATE_HZ).floor() as u64;
    for seq in 0..=steps {
        let t = seq as f64 / FUSE_RATE_HZ;
        // Everything heard up to the fusion time (a live service trails by `delay_s` for it).
        while let Some((_, node, p)) = next.next_if(|r| r.0 <= t + 1e-9) {
            match p {
                Payload::Track(nt) => fuser.report(*nt),
                Payload::Deleted(id) => fuser.ended(&node, id),
                Payload::Ignored(_) => {}
            }
        }
        let step = fuser.step(t);
        let stamp = FrameStamp {
            wall: None,
            power: None,
            reports: step.tracks.len(),
            origin: Some(origin),
        };
        for e in &step.tracks {
            let m = fused_message(e, seq, t, origin, &stamp);
            out.push_str(&serde_json::to_string(&m).unwrap_or_default());
            out.push('\n');
        }
        for (id, why) in &step.ended {
            let m = DeletedMessage::new(&fused_end(*id, *why), seq, t, None);
            out.push_str(&serde_json::to_string(&m).unwrap_or_default());
            out.push('\n');
        }
    }
    // (How many steps there were, so that the steps without a fused track count as misses.)
    out.push_str(&format!(
        "{{\"type\":\"status\",\"frames_in\":{}}}\n",
        steps + 1
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::track::report::EstimateKind;

    fn options() -> TrialOptions {
        TrialOptions {
            runs: 1,
            seed: 3,
            sets: Vec::new(),
            backend: Some(BackendChoice::Cpu),
            progress: false,
            estimate: EstimateKind::Filtered,
        }
    }

    /// The second array hears the same source: its truth, moved by where it sits, is the
    /// first array's, and it sits 30-80 m from the first array's centre.
    #[test]
    fn the_second_array_hears_the_same_source() {
        let family = FamilySpec::find("two-array").unwrap();
        for index in 0..5 {
            let first = family.draw(7, index);
            let at = first.other_arrays[0].at_m;
            let second = first.heard_by(&first.other_arrays[0]);
            let ta = Truth::from_rows(&SimSource::new(first.clone()).unwrap().truth());
            let tb = Truth::from_rows(&SimSource::new(second.clone()).unwrap().truth());
            for t in [0.0, 17.5, 59.0] {
                let (a, b) = (ta.at(0, t).unwrap(), tb.at(0, t).unwrap());
                for k in 0..3 {
                    assert!((b[k] + at[k] - a[k]).abs() < 1e-9, "scene {index} t {t}");
                }
            }
            let c = |s: &[[f64; 3]]| {
                let n = s.len() as f64;
                [0, 1].map(|k| s.iter().map(|p| p[k]).sum::<f64>() / n)
            };
            let (ca, cb) = (c(&first.sensors_m), c(&second.sensors_m));
            let d = (cb[0] + at[0] - ca[0]).hypot(cb[1] + at[1] - ca[1]);
            assert!((30.0..=80.0).contains(&d), "scene {index}: {d} m apart");
        }
    }

    /// One short scene end to end: both arrays track, the fusion holds one id, and its error
    /// is no worse than the worse array's.
    #[test]
    fn a_short_two_array_scene_fuses() {
        let family = FamilySpec::find("two-array")
            .unwrap()
            .with_duration(12.0)
            .unwrap();
        let s = run_two_array_scene(&family, &options(), 0).unwrap();
        let (a, b, f) = (
            s.first.rmse.unwrap(),
            s.second.rmse.unwrap(),
            s.fused.rmse.unwrap(),
        );
        assert!(f <= a.max(b), "fused {f} against {a} and {b}");
        assert_eq!(s.fused.id_switches, 0);
        let within = s.fused.within_pct.unwrap();
        assert!(within > 90.0, "{within}");
    }
}
