use super::*;
use crate::testing::mfa::pair_cost_input;
use crate::track::mfa::cost::{Entry, nllr};
use nalgebra::{DMatrix, DVector};

/// Every cost is the corrected NLLR of one hit with ln N from nalgebra's inverse, within 1e-9;
/// +∞ exactly where the squared distance passes the gate.
#[test]
fn pair_costs_are_the_nllr_of_one_hit() {
    let (mut inside, mut outside) = (0, 0);
    for (seed, n, m) in [(1u32, 4, 2), (2, 6, 3), (3, 2, 1), (4, 6, 2)] {
        let inp = pair_cost_input(seed, n, m, 9, 14);
        inp.check().unwrap();
        let cost = pair_costs(&inp);
        let h = DMatrix::from_row_slice(m, n, &inp.h);
        let r = DMatrix::from_row_slice(m, m, &inp.r);
        for t in 0..inp.tracks() {
            let x = DVector::from_column_slice(&inp.x[t * n..(t + 1) * n]);
            let p = DMatrix::from_row_slice(n, n, &inp.p[t * n * n..(t + 1) * n * n]);
            let s = &h * &p * h.transpose() + &r;
            let s_inv = s.clone().try_inverse().unwrap();
            for j in 0..inp.measurements() {
                let nu = DVector::from_column_slice(&inp.z[j * m..(j + 1) * m]) - &h * &x;
                let d2 = nu.dot(&(&s_inv * &nu));
                let got = cost[t * inp.measurements() + j];
                if d2 > inp.gate_chi2 {
                    assert_eq!(got, f64::INFINITY);
                    outside += 1;
                    continue;
                }
                let ll = -0.5 * (d2 + s.determinant().ln() + m as f64 * std::f64::consts::TAU.ln());
                let want = nllr(&[Entry::Hit { log_likelihood: ll }], &[inp.list]);
                assert!(
                    (got - want).abs() <= 1e-9 * (1.0 + want.abs()),
                    "{got} {want}"
                );
                inside += 1;
            }
        }
    }
    assert!(
        inside > 20 && outside > 20,
        "{inside} inside, {outside} outside the gate"
    );
}

#[test]
fn malformed_inputs_are_refused() {
    let good = pair_cost_input(1, 4, 2, 3, 4);
    assert!(good.check().is_ok());
    let mut bad = good.clone();
    bad.p.pop();
    assert!(bad.check().unwrap_err().contains('P'));
    let mut big = good.clone();
    big.m = 4;
    assert!(big.check().is_err());
    let mut pd = good;
    pd.list.pd = 1.0;
    assert!(pd.check().is_err());
}
