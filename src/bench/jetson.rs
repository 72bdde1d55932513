//! Projections of the CUDA bench figures to the Jetson boards the daemon ships for: estimates
//! to plan with until the figures are measured on a board.
//!
//! Each CUDA figure (device time `t`, bytes moved `B`) is split into a fixed part and a
//! variable part. The fixed part is the smallest time of its stage's grid on the measuring GPU
//! (a single tiny frame or step: launches and dependent latency), and scales with the clock.
//! The variable part scales with FP32 lane-cycles (SMs x lanes x clock) or, where the board's
//! memory would take longer, is the time to move `B` at the board's memory bandwidth (at the
//! fraction of its specification the measuring GPU's copy reached):
//!
//! ```text
//! t_board = t_fixed x clock_ref / clock_board
//!         + max((t - t_fixed) x lane_cycles_ref / lane_cycles_board, B / bandwidth_board)
//! ```
//!
//! The live path and the replay also spend time outside the device figures (input checks,
//! copies, launches, the host's share of the tracker); that rest is scaled by the clock ratio as
//! a stand-in for the boards' slower cores and launch path. Integrated GPUs share memory with
//! the CPU and launch kernels more slowly than a discrete GPU, so the estimates are more likely
//! low than high.

use crate::bench::Row;
use crate::gpu::spec::GpuSpec;

/// The Jetson boards, by NVIDIA's module specifications (maximum GPU clock of the module's
/// default power modes). Orin Nano's "Super" mode (JetPack 6.2) raises its GPU clock to
/// 1.02 GHz and its memory to 102 GB/s.
pub fn jetson_boards() -> Vec<GpuSpec> {
    let b = |name: &str, sms, lanes, clock_ghz, memory_gb_s| GpuSpec {
        name: name.into(),
        sms,
        lanes_per_sm: lanes,
        clock_ghz,
        memory_gb_s,
    };
    vec![
        b("AGX Orin 64GB", 16, 128, 1.3, 204.8),
        b("Orin NX 16GB", 8, 128, 0.918, 102.4),
        b("Orin Nano 8GB", 8, 128, 0.625, 68.0),
        b("Xavier NX", 6, 64, 1.1, 59.7),
    ]
}

/// One device figure to project.
#[derive(Clone, Copy, Debug)]
pub struct Figure {
    pub device_us: f64,
    pub bytes: f64,
    /// The stage's fixed part (its smallest figure on the measuring GPU).
    pub fixed_us: f64,
}

/// The figure on `board`, measured on `reference` whose device-to-device copy reached
/// `copy_gb_s`.
pub fn project_us(f: Figure, reference: &GpuSpec, copy_gb_s: f64, board: &GpuSpec) -> f64 {
    let clock = reference.clock_ghz / board.clock_ghz;
    let lanes = reference.lane_cycles() / board.lane_cycles();
    let efficiency = (copy_gb_s / reference.memory_gb_s).clamp(0.1, 1.0);
    let fixed = f.fixed_us.min(f.device_us);
    let memory_us = f.bytes / (board.memory_gb_s * efficiency * 1e3);
    fixed * clock + ((f.device_us - fixed) * lanes).max(memory_us)
}

fn cuda_row<'a>(rows: &'a [Row], stage: &str, params: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.backend == "cuda" && r.stage == stage && r.params.starts_with(params))
}

/// The smallest cell of each stage's grid, whose time is taken as the stage's fixed part.
const SMALLEST: [(&str, &str); 2] = [("gcc", "4 ch x 1024,"), ("pf", "2048 particles")];

/// A stage's fixed part: the smallest device time among its smallest cells (gcc: single
/// frames). Without them (a run of a few large cells) it is taken as zero, which scales the
/// whole figure by lane-cycles or bandwidth: an overestimate for small figures only.
fn fixed_part(rows: &[Row], stage: &str) -> f64 {
    let Some(&(_, smallest)) = SMALLEST.iter().find(|(s, _)| *s == stage) else {
        return 0.0;
    };
    rows.iter()
        .filter(|r| r.backend == "cuda" && r.stage == stage && r.params.starts_with(smallest))
        .map(|r| r.median_us)
        .min_by(f64::total_cmp)
        .unwrap_or(0.0)
}

/// The frames of a batch row ("... batch 64: ...").
fn batch_of(params: &str) -> Option<f64> {
    let rest = params.split("batch ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|&b| b > 0.0)
}

/// Projections of every CUDA figure in `rows` onto each of `boards`: rows of stage
/// "projection", backend the board, params the figure they project, in the figure's own unit.
pub fn project(rows: &[Row], reference: &GpuSpec, boards: &[GpuSpec]) -> Vec<Row> {
    let copy = cuda_row(rows, "copy", "device-to-device")
        .and_then(|r| r.gb_s)
        .unwrap_or(reference.memory_gb_s);
    let figure = |r: &Row, fixed: f64| Figure {
        device_us: r.median_us,
        bytes: r.gb_s.unwrap_or(0.0) * r.median_us * 1e3,
        fixed_us: fixed,
    };
    let (g, p) = (fixed_part(rows, "gcc"), fixed_part(rows, "pf"));
    let mut out = Vec::new();
    for board in boards {
        let proj = |r: &Row, fixed: f64| project_us(figure(r, fixed), reference, copy, board);
        let clock = reference.clock_ghz / board.clock_ghz;
        for r in rows.iter().filter(|r| r.backend == "cuda") {
            let (us, per_unit) = match r.stage.as_str() {
                "gcc" => match batch_of(&r.params) {
                    Some(b) => {
                        let t = proj(r, g);
                        (t, t / b)
                    }
                    None => {
                        let t = proj(r, g);
                        (t, t)
                    }
                },
                "pf" => {
                    let t = proj(r, p);
                    let n = r.median_us / (r.per_unit * 1e-3).max(1e-12);
                    (t, t * 1e3 / n.max(1.0))
                }
                "live" => {
                    let (Some(gr), Some(pr)) = (
                        cuda_row(rows, "gcc", "4 ch x 4096, 6 pairs"),
                        cuda_row(rows, "pf", "2048 particles x 1 models"),
                    ) else {
                        continue;
                    };
                    let rest = (r.median_us - gr.median_us - pr.median_us).max(0.0);
                    let t = rest * clock + proj(gr, g) + proj(pr, p);
                    (t, t)
                }
                "replay" => {
                    let Some(pr) = cuda_row(rows, "pf", "262144 particles x 4 models") else {
                        continue;
                    };
                    let rest = (r.median_us - pr.median_us).max(0.0);
                    let t = rest * clock + proj(pr, p);
                    (t, r.per_unit * t / r.median_us.max(1e-12))
                }
                _ => continue,
            };
            out.push(Row {
                stage: "projection".into(),
                backend: board.name.clone(),
                params: format!("{} {}", r.stage, r.params),
                median_us: us,
                per_unit,
                unit: r.unit.clone(),
                gb_s: None,
                wall_us: None,
                reps: 0,
            });
        }
    }
    out
}

/// The projections as one table: a line per figure, the measured figure and a column per
/// board (in the figure's unit: us per frame, ns per particle, or % of real time).
pub fn print(rows: &[Row], projected: &[Row], reference: &GpuSpec, boards: &[GpuSpec]) {
    if projected.is_empty() {
        return;
    }
    println!(
        "\nProjection to the Jetson boards from the {} figures above (estimates, not measurements; \
         model in src/project.rs):",
        reference.name
    );
    for (stage, smallest) in SMALLEST {
        let has_stage = rows.iter().any(|r| r.backend == "cuda" && r.stage == stage);
        if has_stage && fixed_part(rows, stage) == 0.0 {
            println!(
                "(no `{stage} {}` cell in this run: the {stage} figures are scaled whole, which \
                 overstates small ones; run the full grid for their fixed part)",
                smallest.trim_end_matches(',')
            );
        }
    }
    print!("{:<52} {:>12}", "figure (per unit)", "measured");
    for b in boards {
        print!(" {:>14}", b.name);
    }
    println!();
    for r in rows
        .iter()
        .filter(|r| r.backend == "cuda" && r.stage != "copy")
    {
        let key = format!("{} {}", r.stage, r.params);
        let cells: Vec<&Row> = boards
            .iter()
            .filter_map(|b| {
                projected
                    .iter()
                    .find(|p| p.backend == b.name && p.params == key)
            })
            .collect();
        if cells.len() != boards.len() {
            continue;
        }
        let unit = if r.unit.starts_with('%') {
            "%"
        } else {
            r.unit.as_str()
        };
        let name: String = format!("{key} ({unit})").chars().take(52).collect();
        print!("{name:<52} {:>12.2}", r.per_unit);
        for c in cells {
            print!(" {:>14.2}", c.per_unit);
        }
        println!();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> GpuSpec {
        GpuSpec {
            name: "H100".into(),
            sms: 132,
            lanes_per_sm: 128,
            clock_ghz: 1.98,
            memory_gb_s: 3350.0,
        }
    }

    fn row(stage: &str, params: &str, us: f64, per_unit: f64, gb_s: Option<f64>) -> Row {
        Row {
            stage: stage.into(),
            backend: "cuda".into(),
            params: params.into(),
            median_us: us,
            per_unit,
            unit: "us/frame".into(),
            gb_s,
            wall_us: None,
            reps: 1,
        }
    }

    #[test]
    fn a_board_like_the_reference_gets_the_same_figures() {
        let r = h100();
        let f = Figure {
            device_us: 140.0,
            bytes: 150e6,
            fixed_us: 30.0,
        };
        // The copy reached the specification, so memory time (45 us) stays below compute.
        let t = project_us(f, &r, r.memory_gb_s, &r);
        assert!((t - 140.0).abs() < 1e-9, "{t}");
    }

    #[test]
    fn parts_scale_with_clock_lanes_and_bandwidth() {
        let r = h100();
        let mut b = r.clone();
        b.clock_ghz = r.clock_ghz / 2.0; // fixed part x2, lane-cycles / 2
        b.sms = r.sms / 2; // lane-cycles / 4 in all
        let f = Figure {
            device_us: 50.0,
            bytes: 0.0,
            fixed_us: 10.0,
        };
        let t = project_us(f, &r, r.memory_gb_s, &b);
        assert!((t - (20.0 + 40.0 * 4.0)).abs() < 1e-9, "{t}");
        // A memory-bound figure: moving 10 MB at the board's 10 GB/s (1000 us) takes longer
        // than the scaled compute (160 us).
        b.memory_gb_s = 10.0;
        let g = Figure {
            device_us: 50.0,
            bytes: 1e7,
            fixed_us: 10.0,
        };
        let t = project_us(g, &r, r.memory_gb_s, &b);
        assert!((t - (20.0 + 1000.0)).abs() < 1e-9, "{t}");
    }

    #[test]
    fn every_cuda_figure_is_projected_onto_every_board() {
        let rows = vec![
            row(
                "copy",
                "device-to-device, 256 MiB",
                160.0,
                2885.0,
                Some(2885.0),
            ),
            row("gcc", "4 ch x 4096, 6 pairs", 40.0, 40.0, Some(23.0)),
            row(
                "gcc",
                "16 ch x 4096, batch 64: 138169 frames/s",
                463.0,
                7.24,
                Some(1800.0),
            ),
            row("pf", "2048 particles x 1 models", 30.0, 14.6, Some(5.0)),
            row("pf", "262144 particles x 4 models", 55.0, 0.21, Some(380.0)),
            row(
                "live",
                "tetra 4 ch x 4096 + 2000 particles x 1",
                100.0,
                100.0,
                None,
            ),
            row("replay", "pier_five, 262144 particles", 100.0, 0.234, None),
        ];
        let boards = jetson_boards();
        let p = project(&rows, &h100(), &boards);
        assert_eq!(p.len(), 6 * boards.len());
        for q in &p {
            let src = rows
                .iter()
                .find(|r| format!("{} {}", r.stage, r.params) == q.params)
                .unwrap();
            // Every board is slower than the H100 at everything.
            assert!(q.per_unit > src.per_unit, "{q:?}");
        }
        // The batch row's per-frame figure is its batch time over the 64 frames.
        let b = p
            .iter()
            .find(|q| q.params.contains("batch 64") && q.backend == boards[0].name)
            .unwrap();
        assert!((b.per_unit - b.median_us / 64.0).abs() < 1e-9);
        // The replay keeps its unit: % of real time grows with the frame time.
        let rp = p
            .iter()
            .find(|q| q.params.starts_with("replay") && q.backend == boards[0].name)
            .unwrap();
        assert!((rp.per_unit / 0.234 - rp.median_us / 100.0).abs() < 1e-9);
        // Without a 4 ch x 1024 cell the gcc figures have no fixed part: scaled whole.
        assert_eq!(fixed_part(&rows, "gcc"), 0.0);
        assert_eq!(fixed_part(&rows, "pf"), 30.0);
        assert_eq!(
            batch_of("16 ch x 4096, batch 16: 95694 frames/s"),
            Some(16.0)
        );
        assert_eq!(batch_of("4 ch x 4096, 6 pairs"), None);
    }
}
