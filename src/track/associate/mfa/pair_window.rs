//! Multi-frame assignment of one sensor pair's peaks, as the particle-filter tracker uses it
//! (`tracker.association = "mfa"`): each track's TDOA on the pair is followed over the window
//! by a constant-rate Kalman filter (state: TDOA and its rate, in samples), rooted at what the
//! track predicts for the committed frame; every track's candidate tree over the window's
//! frames ([`super::tree`], branch filtering) enters one S-D assignment
//! ([`crate::math::sd_assign`]), and only the committed (first) frame's choice is used.
//!
//! Where two sources' TDOAs cross on a pair, the frame-by-frame nearest peak may be the other
//! source's; the later frames show which peak continues which track's rate.

use nalgebra::{DMatrix, DVector};

use super::cost::ListModel;
use super::tree::{TreeParams, grow};
use super::window::solve_first_list;
use crate::track::smooth::kalman::LinearModel;

/// Most paths one track's tree may grow (a deeper window with many peaks is cut short).
const MAX_BRANCHES: usize = 4_096;

/// One track on the pair, at the committed frame (samples and samples per second).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairTrack {
    /// Predicted TDOA.
    pub tdoa: f64,
    /// Its variance from the track's state alone (the measurement noise not included).
    pub tdoa_var: f64,
    /// Predicted rate of the TDOA.
    pub rate: f64,
    pub rate_var: f64,
    /// Power spectral density of the rate's random walk (samples² / s³).
    pub accel_psd: f64,
}

/// One frame's peaks on the pair (samples), with the list's detection and clutter.
#[derive(Debug, Clone, PartialEq)]
pub struct PairList {
    pub peaks: Vec<f64>,
    pub model: ListModel,
}

/// The window's constants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairWindow {
    /// Seconds between frames.
    pub hop_s: f64,
    /// Variance of a peak around the source's TDOA (samples²).
    pub noise_var: f64,
    /// χ² (one degree of freedom) gate on a peak's innovation.
    pub gate_chi2: f64,
}

/// Each track's peak in the first list (None: a miss), chosen over all the lists; None when
/// the S-D problem cannot be solved (the caller then decides frame by frame).
pub fn assign_over_window(
    w: &PairWindow,
    tracks: &[PairTrack],
    lists: &[PairList],
) -> Option<Vec<Option<usize>>> {
    if tracks.is_empty() || lists.is_empty() {
        return Some(vec![None; tracks.len()]);
    }
    let frames: Vec<Vec<DVector<f64>>> = lists
        .iter()
        .map(|l| {
            l.peaks
                .iter()
                .map(|&p| DVector::from_vec(vec![p]))
                .collect()
        })
        .collect();
    let params = TreeParams {
        gate_chi2: w.gate_chi2,
        lists: lists.iter().map(|l| l.model).collect(),
        max_branches: MAX_BRANCHES,
    };
    let mut trees = Vec::with_capacity(tracks.len());
    for tr in tracks {
        let model = LinearModel::constant_velocity(1, w.hop_s, tr.accel_psd, w.noise_var);
        // The root is one hop before the committed frame (the tree predicts to each frame).
        let x0 = DVector::from_vec(vec![tr.tdoa - tr.rate * w.hop_s, tr.rate]);
        let p0 = DMatrix::from_row_slice(2, 2, &[tr.tdoa_var, 0.0, 0.0, tr.rate_var]);
        trees.push(grow(&model, &x0, &p0, &frames, &params)?);
    }
    solve_first_list(trees, &frames).map(|(taken, _)| taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: ListModel = ListModel {
        pd: 0.9,
        clutter_density: 0.01,
    };

    fn list(peaks: &[f64]) -> PairList {
        PairList {
            peaks: peaks.to_vec(),
            model: LIST,
        }
    }

    fn track(tdoa: f64, rate: f64) -> PairTrack {
        PairTrack {
            tdoa,
            tdoa_var: 1.0,
            rate,
            rate_var: 1.0,
            accel_psd: 1.0,
        }
    }

    const W: PairWindow = PairWindow {
        hop_s: 0.05,
        noise_var: 0.25,
        gate_chi2: 9.0,
    };

    /// C7 (a) on a pair: two tracks whose TDOAs cross (one rising at 40 samples/s, one
    /// falling); at the committed frame the first track's prediction is nearer the second
    /// source's peak. Frame by frame the peaks go to the wrong tracks; over three lists the
    /// next frames' peaks show which continues which rate, and the choice is the right one.
    #[test]
    fn later_frames_undo_the_nearest_choice_at_a_crossing() {
        // Truth: A at 0.6 + 2k (rising), B at -0.6 - 2k (falling), k = 0, 1, 2. The tracks
        // predict A at -0.3 and B at +0.3 (each nearer the other's peak).
        let tracks = [track(-0.3, 40.0), track(0.3, -40.0)];
        let frames = [list(&[0.6, -0.6]), list(&[2.6, -2.6]), list(&[4.6, -4.6])];
        let one = assign_over_window(&W, &tracks, &frames[..1]).unwrap();
        assert_eq!(one, vec![Some(1), Some(0)], "frame by frame: swapped");
        let three = assign_over_window(&W, &tracks, &frames).unwrap();
        assert_eq!(three, vec![Some(0), Some(1)], "over the window: kept");
    }

    /// A clean window agrees with the single frame; a track with no peak in its gate misses;
    /// no tracks or no lists give an answer of the right length.
    #[test]
    fn plain_cases() {
        let tracks = [track(0.0, 0.0), track(20.0, 0.0)];
        let frames = [list(&[0.1, 50.0]), list(&[0.0]), list(&[-0.1, 50.0])];
        let got = assign_over_window(&W, &tracks, &frames).unwrap();
        assert_eq!(got, vec![Some(0), None]);
        assert_eq!(assign_over_window(&W, &[], &frames).unwrap(), vec![]);
        assert_eq!(
            assign_over_window(&W, &tracks, &[]).unwrap(),
            vec![None, None]
        );
    }
}
