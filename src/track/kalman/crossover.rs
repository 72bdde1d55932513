//! Where a bank moves from the CPU to the GPU: both backends' time for one predict + update of
//! banks of growing size, measured on the machine in hand (launches, the measurements' upload and
//! the count's readback included for the GPU), and the smallest size from which the GPU is the
//! faster at every larger size measured. The chooser uses the measured size, never a constant.

use std::time::Instant;

use super::bank::{BankError, BankModel, FilterBank};

/// Bank sizes measured, smallest first (the measurement stops once the GPU has won at two sizes
/// in a row).
pub const SIZES: [usize; 10] = [1, 4, 16, 64, 256, 1024, 4096, 16_384, 65_536, 262_144];

/// One measured size: seconds per predict + update on each backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub filters: usize,
    pub cpu_s: f64,
    pub gpu_s: f64,
}

/// The measurement and its decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossover {
    pub points: Vec<Point>,
    /// The smallest bank the GPU serves; None when the CPU was faster at the largest size
    /// measured.
    pub size: Option<usize>,
}

impl Crossover {
    /// Whether a bank of `filters` filters goes to the GPU.
    pub fn gpu_for(&self, filters: usize) -> bool {
        self.size.is_some_and(|s| filters >= s)
    }
}

/// The smallest measured size from which the GPU is faster at that size and every larger one.
pub fn decide(points: &[Point]) -> Option<usize> {
    let mut size = None;
    for p in points.iter().rev() {
        if p.gpu_s < p.cpu_s {
            size = Some(p.filters);
        } else {
            break;
        }
    }
    size
}

/// A start every bank of n states can take: x = 0, P = I (n×n, row-major).
pub fn unit_start(n: usize) -> (Vec<f32>, Vec<f32>) {
    let p0 = (0..n * n)
        .map(|e| if e / n == e % n { 1.0 } else { 0.0 })
        .collect();
    (vec![0.0; n], p0)
}

/// Median seconds of `reps` steps of `bank` (after one warm-up step).
pub fn time_step(bank: &mut dyn FilterBank, z: &[f32], reps: usize) -> Result<f64, BankError> {
    bank.step(z)?;
    let mut times: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            bank.step(z).map(|_| t.elapsed().as_secs_f64())
        })
        .collect::<Result<_, _>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Measure both backends on `model` over [`SIZES`]; `make_gpu` builds a GPU bank of a size.
/// Stops after two sizes in a row where the GPU wins (the CPU only grows slower from there).
pub fn measure(
    model: &BankModel,
    make_gpu: &mut dyn FnMut(usize) -> Result<Box<dyn FilterBank>, BankError>,
) -> Result<Crossover, BankError> {
    let m = model.m;
    let (x0, p0) = unit_start(model.n);
    let mut points = Vec::new();
    let mut wins = 0;
    for filters in SIZES {
        let z: Vec<f32> = (0..m * filters).map(|i| (i % 7) as f32 * 0.1).collect();
        // Fewer repetitions for the large banks (the CPU takes milliseconds there).
        let reps = if filters >= 16_384 { 3 } else { 9 };
        let mut cpu = super::bank::KalmanBank::new(model.clone(), filters, &x0, &p0)?;
        let cpu_s = time_step(&mut cpu, &z, reps)?;
        let mut gpu = make_gpu(filters)?;
        let gpu_s = time_step(gpu.as_mut(), &z, reps)?;
        points.push(Point {
            filters,
            cpu_s,
            gpu_s,
        });
        wins = if gpu_s < cpu_s { wins + 1 } else { 0 };
        if wins >= 2 {
            break;
        }
    }
    Ok(Crossover {
        size: decide(&points),
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(filters: usize, cpu_s: f64, gpu_s: f64) -> Point {
        Point {
            filters,
            cpu_s,
            gpu_s,
        }
    }

    #[test]
    fn the_crossover_is_where_the_gpu_stays_faster() {
        let pts = [
            p(1, 1.0, 5.0),
            p(4, 3.0, 2.0),
            p(16, 4.0, 5.0),
            p(64, 9.0, 5.0),
        ];
        // A win at 4 followed by a loss at 16 does not count.
        assert_eq!(decide(&pts), Some(64));
        assert_eq!(decide(&pts[..3]), None);
        assert_eq!(decide(&[p(1, 2.0, 1.0)]), Some(1));
        assert_eq!(decide(&[]), None);
        let c = Crossover {
            points: pts.to_vec(),
            size: Some(64),
        };
        assert!(c.gpu_for(64) && c.gpu_for(1000) && !c.gpu_for(63));
        assert!(
            !Crossover {
                points: vec![],
                size: None
            }
            .gpu_for(1 << 30)
        );
    }

    /// The measurement runs end to end with the CPU standing in for the GPU (no GPU here): the
    /// two are as fast, so the decision may fall either way, but every size is measured in order.
    #[test]
    fn measuring_with_a_stand_in_covers_the_sizes_in_order() {
        let model = BankModel {
            n: 2,
            m: 1,
            f: vec![1.0, 0.1, 0.0, 1.0],
            q: vec![0.01, 0.0, 0.0, 0.01],
            h: vec![1.0, 0.0],
            r: vec![1.0],
        };
        let m2 = model.clone();
        let mut make = move |filters: usize| -> Result<Box<dyn FilterBank>, BankError> {
            Ok(Box::new(super::super::bank::KalmanBank::new(
                m2.clone(),
                filters,
                &[0.0, 0.0],
                &[1.0, 0.0, 0.0, 1.0],
            )?))
        };
        let c = measure(&model, &mut make).unwrap();
        assert!(!c.points.is_empty());
        assert!(c.points.windows(2).all(|w| w[0].filters < w[1].filters));
        assert!(c.points.iter().all(|p| p.cpu_s > 0.0 && p.gpu_s > 0.0));
        assert_eq!(c.size, decide(&c.points));
    }
}
