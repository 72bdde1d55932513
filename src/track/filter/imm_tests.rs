use super::*;
use crate::bench::workload::{pf_init, pf_params};
use crate::rng::philox::{PhiloxStream, Stream};

/// A source at `x` (7 components) seen by every pair as one peak at its TDOA plus noise of
/// `sigma_s` (or exactly, with `noise` None), and a clutter peak drawn over the pair's lags.
fn frame_of(
    p: &FilterParams,
    x: &[f32; 7],
    frame: u64,
    noise: Option<&mut PhiloxStream>,
) -> TdoaMeasurement {
    let k = LikelihoodConsts::new(p, p.tdoa_std_s);
    let mut pred = vec![0.0; p.pairs.len()];
    likelihood::predict_tdoas(p, &k, x, 0.0, &mut pred);
    let mut m = TdoaMeasurement::empty(frame, p.pairs.len(), 2, p.tdoa_std_s);
    let ratio = 200.0;
    let mut draw = noise;
    for (pi, t) in pred.iter().enumerate() {
        let (e, clutter) = match draw.as_deref_mut() {
            Some(r) => (r.normal_f64() as f32, (r.uniform_f64() as f32 - 0.5) * 0.02),
            None => (0.0, 0.01),
        };
        m.tdoa_s[2 * pi] = t + e * p.tdoa_std_s;
        m.amp[2 * pi] = 0.9 * ratio;
        m.tdoa_s[2 * pi + 1] = clutter;
        m.amp[2 * pi + 1] = 0.05 * ratio;
        m.floor[pi] = 0.1;
    }
    m
}

#[test]
fn the_markov_matrix_comes_back_from_its_cumulative_rows() {
    let p = pf_params(16, 3);
    let pi = markov_from_cdf(&p.transition_cdf, 3);
    for row in &pi {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-6, "{row:?}");
        assert!(row.iter().all(|v| *v >= 0.0));
    }
    // Mostly stay: the diagonal dominates.
    assert!((0..3).all(|i| pi[i][i] > 0.5), "{pi:?}");
}

#[test]
fn follows_a_straight_source_with_honest_covariance() {
    // The pier array, a source 20 m out at 1.5 m/s, 0.1 s frames, one true peak per pair with
    // the configured noise and one clutter peak; the prior 1 m and 0.5 m/s off.
    let mut p = pf_params(16, 3);
    p.slots = 1;
    let mut f = ImmFilter::new(p.clone());
    let mut init = pf_init();
    init.mean = [-19.0, 6.0, -11.0, 1.0, 0.5, 0.0];
    for (i, row) in init.chol.iter_mut().enumerate() {
        row[i] = if i < 3 { 1.0 } else { 0.5 };
    }
    f.init_track(&init).unwrap();
    let mut r = PhiloxStream::new(7, 0, Stream::Simulate);
    let mut est = vec![Estimate::new(3)];
    let (mut sq, mut nees, mut n) = (0.0, 0.0, 0.0);
    for frame in 1..=300u64 {
        let t = frame as f32 * 0.1;
        let x = [-20.0 + 1.5 * t, 5.0, -10.0, 1.5, 0.0, 0.0, 0.0];
        let m = frame_of(&p, &x, frame, Some(&mut r));
        f.step(&m, &[TrackStep::fixed(0, 0.1, 0.0)], &mut est)
            .unwrap();
        let e = &est[0];
        assert!(e.log_evidence.is_finite());
        assert!((e.model_probs.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        if frame > 50 {
            let d = nalgebra::Vector3::new(
                e.mean[0] - f64::from(x[0]),
                e.mean[1] - f64::from(x[1]),
                e.mean[2] - f64::from(x[2]),
            );
            let c = nalgebra::Matrix3::from_fn(|a, b| e.cov[a][b]);
            sq += d.norm_squared();
            nees += d.dot(&(c.try_inverse().unwrap() * d));
            n += 1.0;
        }
    }
    let rmse = (sq / n).sqrt();
    let nees = nees / n;
    eprintln!(
        "IMM filter, straight source: RMSE {rmse:.4} m, position NEES {nees:.2} (3 if honest)"
    );
    assert!(rmse < 0.1, "RMSE {rmse}");
    assert!((0.5..8.0).contains(&nees), "NEES {nees}");
}

#[test]
fn a_peak_outside_the_gate_changes_nothing() {
    let p = pf_params(16, 1);
    let f = ImmFilter::new(p.clone());
    let k = LikelihoodConsts::new(&p, p.tdoa_std_s);
    let prior = f.prior(&pf_init());
    let x = to_f32(&prior.x);
    let mut m = frame_of(&p, &x, 0, None);
    // Only pair 0's true peak, moved a second away.
    m.tdoa_s[0] += 1.0;
    m.amp[1] = 0.0;
    let mut mode = prior.clone();
    let l = f.update_pair(&k, 0.0, &m, 0, &mut mode).unwrap();
    assert_eq!(mode, prior);
    assert!((l - 0.1f64.ln()).abs() < 1e-6, "{l}");
}

#[test]
fn a_sure_peak_is_the_plain_cubature_update() {
    // Floor 0, one peak at the prediction: the pair's spread shrinks as S⁻¹ says and the mean
    // stays; the log ratio is ln(amp σ/√S).
    let p = pf_params(16, 1);
    let f = ImmFilter::new(p.clone());
    let k = LikelihoodConsts::new(&p, p.tdoa_std_s);
    let prior = f.prior(&pf_init());
    let pair = p.pairs[0];
    // The cubature mean and spread of the predicted range difference.
    let moments = |md: &Mode| {
        let pts = cubature::points(&md.x, &cubature::factor(&md.p).unwrap());
        let h: Vec<SVector<f64, 1>> = pts
            .iter()
            .map(|q| SVector::<f64, 1>::new(f.range_difference(&k, q, pair, 0.0)))
            .collect();
        let (m, v) = cubature::moments(&h);
        (m[0], v[(0, 0)])
    };
    let (zhat, before) = moments(&prior);
    let c = f64::from(p.speed_of_sound_m_s);
    let mut m = TdoaMeasurement::empty(0, p.pairs.len(), 1, p.tdoa_std_s);
    m.tdoa_s[0] = (zhat / c) as f32;
    m.amp[0] = 100.0;
    m.floor[0] = 0.0;
    let mut mode = prior.clone();
    let l = f.update_pair(&k, 0.0, &m, 0, &mut mode).unwrap();
    let r = (f64::from(p.tdoa_std_s) * c).powi(2);
    let after = moments(&mode).1;
    let want = before * r / (before + r);
    assert!(
        (after - want).abs() < 0.02 * want,
        "after {after}, want {want}"
    );
    // (The peak is an f32 TDOA: it sits within 1e-6 m of the prediction, not on it.)
    assert!(
        (mode.x - prior.x).norm() < 1e-5,
        "{}",
        (mode.x - prior.x).norm()
    );
    let s = before + r;
    assert!((l - (100.0 * (r / s).sqrt()).ln()).abs() < 1e-6, "{l}");
}

#[test]
fn particles_round_trip_through_the_cubature_points() {
    let p = pf_params(16, 3);
    let mut f = ImmFilter::new(p.clone());
    f.init_track(&pf_init()).unwrap();
    let before = f.read_particles(0).unwrap();
    f.write_particles(0, &before).unwrap();
    let after = f.read_particles(0).unwrap();
    for (a, b) in before.state.iter().zip(&after.state) {
        assert!((a - b).abs() < 1e-4 * (1.0 + a.abs()), "{a} {b}");
    }
    assert!(f.read_particles(5).is_err());
    let empty = Particles {
        state: vec![],
        model: vec![],
        log_weight: vec![],
    };
    assert!(f.write_particles(0, &empty).is_err());
    let mut dead = before.clone();
    dead.log_weight.fill(f32::NEG_INFINITY);
    assert!(f.write_particles(0, &dead).is_err());
    // A step of a slot with no track is an error, not a panic.
    let m = TdoaMeasurement::empty(0, p.pairs.len(), 1, p.tdoa_std_s);
    let mut est = vec![Estimate::new(3)];
    assert!(
        f.step(&m, &[TrackStep::fixed(3, 0.1, 0.0)], &mut est)
            .is_err()
    );
}

#[test]
fn many_tracks_at_once_give_what_one_at_a_time_gives() {
    // 20 tracks (spread over the cores) against the same tracks stepped one per call.
    let mut p = pf_params(16, 3);
    p.slots = 20;
    let (mut together, mut alone) = (ImmFilter::new(p.clone()), ImmFilter::new(p.clone()));
    let steps: Vec<TrackStep> = (0..20u32).map(|s| TrackStep::fixed(s, 0.1, 0.0)).collect();
    for t in &steps {
        let mut init = pf_init();
        init.slot = t.slot;
        init.mean[0] += f64::from(t.slot) * 0.3;
        together.init_track(&init).unwrap();
        alone.init_track(&init).unwrap();
    }
    let mut r = PhiloxStream::new(3, 0, Stream::Simulate);
    let mut a = vec![Estimate::new(3); 20];
    let mut b = vec![Estimate::new(3); 1];
    for frame in 1..=5u64 {
        let x = [-16.0 + 0.2 * frame as f32, 3.0, -12.0, 2.0, 0.0, 0.0, 0.0];
        let m = frame_of(&p, &x, frame, Some(&mut r));
        together.step(&m, &steps, &mut a).unwrap();
        for (t, want) in steps.iter().zip(&a) {
            alone.step(&m, std::slice::from_ref(t), &mut b).unwrap();
            assert_eq!(&b[0], want);
        }
    }
}
