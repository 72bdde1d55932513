//! The RTS smoother parallel in time: each step k is an element e_k = (E_k, g_k, L_k), the affine
//! maps x ↦ E x + g and P ↦ E P Eᵀ + L that take step k + 1's smoothed state to step k's, with
//! E_k = C_k, g_k = x̂_{k|k} − C_k x̂_{k+1|k}, L_k = P_{k|k} − C_k P_{k+1|k} C_kᵀ, and the
//! terminal element (0, x̂_{N|N}, P_{N|N}). Composition e_i • e_j = (E_i E_j, E_i g_j + g_i,
//! E_i L_j E_iᵀ + L_i) is associative, so the smoothed states — the g and L parts of
//! e_k • e_{k+1} • … • e_N — are a suffix scan, computed here in tiles of [`TILE`] elements:
//! each tile's composition (in parallel), the carries across tiles (sequential, one per tile),
//! then each tile's suffixes with its carry (in parallel). Depth O(N / TILE + TILE), work O(N).

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use super::kalman::symmetric;
use super::{Covariance, Record, SmoothError, Smoothed, gain};

/// Elements per tile (as a GPU block of the seed would hold).
pub const TILE: usize = 64;

/// One element: the map from step k + 1's smoothed state to step k's.
#[derive(Debug, Clone, PartialEq)]
pub struct Element {
    pub e: DMatrix<f64>,
    pub g: DVector<f64>,
    /// None when covariances are skipped.
    pub l: Option<DMatrix<f64>>,
}

impl Element {
    /// e_self • e_next (apply `next` first).
    pub fn then(&self, next: &Element) -> Element {
        Element {
            e: &self.e * &next.e,
            g: &self.e * &next.g + &self.g,
            l: match (&self.l, &next.l) {
                (Some(a), Some(b)) => Some(symmetric(&self.e * b * self.e.transpose() + a)),
                _ => None,
            },
        }
    }
}

/// The elements of one track's records.
pub fn elements(records: &[Record], cov: Covariance) -> Result<Vec<Element>, SmoothError> {
    let n = records.len();
    let mut out: Vec<Element> = records
        .par_iter()
        .enumerate()
        .take(n.saturating_sub(1))
        .map(|(k, r)| {
            let c = gain(r, k)?;
            let xp = r.x_pred.as_ref().ok_or(SmoothError::MissingPrediction(k))?;
            let l = match (cov, &r.p_pred) {
                (Covariance::Smooth, Some(pp)) => Some(symmetric(&r.p - &c * pp * c.transpose())),
                _ => None,
            };
            Ok(Element {
                g: &r.x - &c * xp,
                e: c,
                l,
            })
        })
        .collect::<Result<_, _>>()?;
    if let Some(last) = records.last() {
        let dim = last.x.len();
        out.push(Element {
            e: DMatrix::zeros(dim, dim),
            g: last.x.clone(),
            l: (cov == Covariance::Smooth).then(|| last.p.clone()),
        });
    }
    Ok(out)
}

/// Smooth one track's records by the parallel scan.
pub fn smooth(records: &[Record], cov: Covariance) -> Result<Vec<Smoothed>, SmoothError> {
    let elems = elements(records, cov)?;
    Ok(suffix_scan(&elems)
        .into_iter()
        .map(|s| Smoothed { x: s.g, p: s.l })
        .collect())
}

/// s_k = e_k • e_{k+1} • … • e_last for every k, in tiles.
pub fn suffix_scan(elems: &[Element]) -> Vec<Element> {
    if elems.is_empty() {
        return Vec::new();
    }
    let tiles: Vec<&[Element]> = elems.chunks(TILE).collect();
    // Each tile's composition, right to left.
    let totals: Vec<Element> = tiles.par_iter().map(|t| compose_all(t)).collect();
    // The carry into each tile: the composition of every tile after it.
    let mut carries: Vec<Option<Element>> = vec![None; tiles.len()];
    for i in (0..tiles.len().saturating_sub(1)).rev() {
        carries[i] = Some(match &carries[i + 1] {
            Some(after) => totals[i + 1].then(after),
            None => totals[i + 1].clone(),
        });
    }
    // Each tile's suffixes, composed with its carry.
    tiles
        .par_iter()
        .zip(carries.par_iter())
        .flat_map_iter(|(tile, carry)| {
            let mut out: Vec<Element> = Vec::with_capacity(tile.len());
            let mut acc = carry.clone();
            for e in tile.iter().rev() {
                let s = match &acc {
                    Some(a) => e.then(a),
                    None => e.clone(),
                };
                acc = Some(s.clone());
                out.push(s);
            }
            out.reverse();
            out
        })
        .collect()
}

/// e_0 • e_1 • … • e_last of a non-empty slice.
fn compose_all(t: &[Element]) -> Element {
    let mut acc = t[t.len() - 1].clone();
    for e in t[..t.len() - 1].iter().rev() {
        acc = e.then(&acc);
    }
    acc
}
