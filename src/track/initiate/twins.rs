//! The mirror twins of a turning line array's tracks, as the tracker keeps them (the twin
//! itself is [`super::mirror`]): a twin started beside each new track, each frame's evidence
//! weighed between the two, a twin started again when a decided track passes end-fire, and
//! the mirror point every report of a line array in a known plane carries.

use nalgebra::Vector3;

use crate::dsp::geometry::ArrayGeometry;
use crate::error::BackendError;
use crate::track::initiate::mirror::{MirrorVerdict, Twin, mirrored_init};
use crate::track::motion::models::Kinematics;
use crate::track::report::{TrackReport, TrackStatus, mirror_across, report};
use crate::track::state::Track;
use crate::track::{Estimate, FilterBank, FilterParams, LineAxes, TrackInit, TrackStep};

/// A turning line array's track this close to its axis (degrees) may go on to either side:
/// its side is open again (see [`Twins::rearm`]).
pub const ENDFIRE_DEG: f64 = 2.0;

/// The twins' settings and counters.
#[derive(Debug, Clone)]
pub struct Twins {
    /// Line mode: the axis and the half-plane the directions are kept in.
    line: Option<LineAxes>,
    /// A turning array (`array.heading_input`).
    turning: bool,
    /// Twins decided (the track's side, the twin's), and births that found no slot for one.
    pub kept: u64,
    pub taken: u64,
    pub without_slot: u64,
}

/// A slot no track or twin holds, other than `besides`.
pub fn free_slot(tracks: &[Track], slots: usize, besides: Option<u32>) -> Option<u32> {
    (0..slots as u32).find(|s| {
        besides != Some(*s)
            && tracks
                .iter()
                .all(|t| t.slot != *s && t.twin.as_ref().is_none_or(|w| w.slot != *s))
    })
}

impl Twins {
    pub fn new(line: Option<LineAxes>, turning: bool) -> Self {
        Self {
            line,
            turning,
            kept: 0,
            taken: 0,
            without_slot: 0,
        }
    }

    /// The axes when tracks get twins: a turning line array in a known plane.
    fn twinned(&self) -> Option<LineAxes> {
        self.line.filter(|l| l.plane && l.keep_side)
    }

    /// A twin for the track started by `init` with estimate `est`: the mirror of both across
    /// the axis, in `slot` (None, and counted, when there is no slot; None for arrays without
    /// twins).
    pub fn start(
        &mut self,
        bank: &mut dyn FilterBank,
        init: &TrackInit,
        est: &Estimate,
        slot: Option<u32>,
        heading_deg: Option<f64>,
    ) -> Result<Option<Twin>, BackendError> {
        let Some(line) = self.twinned() else {
            return Ok(None);
        };
        let Some(slot) = slot else {
            self.without_slot += 1;
            return Ok(None);
        };
        let m = mirrored_init(init, &line.side, slot);
        bank.init_track(&m)?;
        let mut e = est.clone();
        e.mean = m.mean;
        Ok(Some(Twin::new(slot, e, heading_deg)))
    }

    /// Weigh each twin's evidence against its track's this frame (`est[i]`, `steps[i]`: the
    /// track's new estimate and step); where the margin is reached, the winner keeps the track
    /// (and its ID) and the loser's slot is freed.
    pub fn weigh(
        &mut self,
        tracks: &mut [Track],
        est: &mut [Estimate],
        steps: &mut [TrackStep],
        heading_deg: Option<f64>,
        t_centre_s: f64,
    ) {
        for (i, t) in tracks.iter_mut().enumerate() {
            let evidence = est[i].log_evidence;
            let dt = f64::from(steps[i].dt_s);
            let Some(w) = t.twin.as_mut() else { continue };
            match w.weigh(evidence, heading_deg, dt) {
                MirrorVerdict::Undecided => continue,
                MirrorVerdict::TrackWins => {
                    log::info!(
                        "track {}: its side of the array is decided at {t_centre_s:.2} s (the mirror is {:.1} nats less likely)",
                        t.id,
                        -w.log_odds
                    );
                    self.kept += 1;
                }
                MirrorVerdict::TwinWins => {
                    log::info!(
                        "track {}: its mirror across the array's axis is decided at {t_centre_s:.2} s ({:.1} nats more likely); the track moves there",
                        t.id,
                        w.log_odds
                    );
                    std::mem::swap(&mut est[i], &mut w.est);
                    t.slot = w.slot;
                    steps[i].slot = w.slot;
                    self.taken += 1;
                }
            }
            t.twin = None;
            t.side_decided = true;
        }
    }

    /// A turning line array: a track whose side was decided and that now passes within
    /// [`ENDFIRE_DEG`] (or three of its spreads) of the axis gets a new twin, since a source
    /// there may go on to either side; its report says so.
    pub fn rearm(
        &mut self,
        bank: &mut dyn FilterBank,
        tracks: &mut [Track],
        slots: usize,
        reports: &mut [TrackReport],
        seq: u64,
        heading_deg: Option<f64>,
    ) -> Result<(), BackendError> {
        let Some(line) = self.twinned() else {
            return Ok(());
        };
        for i in 0..tracks.len() {
            let t = &tracks[i];
            if !t.side_decided || t.twin.is_some() {
                continue;
            }
            let Some(r) = reports.iter_mut().find(|r| r.id == t.id) else {
                continue;
            };
            let Some([cone, sd]) = r.cone_deg() else {
                continue;
            };
            if cone.min(180.0 - cone) > ENDFIRE_DEG.max(3.0 * sd) {
                continue;
            }
            let init = restart(t.slot, seq, &t.est);
            let slot = free_slot(tracks, slots, Some(init.slot));
            let Some(twin) = self.start(bank, &init, &t.est.clone(), slot, heading_deg)? else {
                continue;
            };
            log::info!(
                "track {}: at {cone:.1}° from the array's axis its side is open again",
                tracks[i].id
            );
            let t = &mut tracks[i];
            t.twin = Some(twin);
            t.side_decided = false;
            r.mirror = Some(mirror_across(&r.position, &line.axis));
            r.mirror_prob = Some(0.5);
        }
        Ok(())
    }

    /// Report `r` of track `t`: its mirror point (a turning line array's twin, while
    /// undecided, with its probability; else [`mirror_of`]) and the array's heading.
    pub fn annotate(
        &self,
        t: &Track,
        r: &mut TrackReport,
        heading_deg: Option<f64>,
        params: &FilterParams,
        volume: &Volume,
    ) {
        r.heading_deg = heading_deg.filter(|_| self.turning);
        if !self.turning {
            r.mirror = mirror_of(self.line, volume, r);
            return;
        }
        match &t.twin {
            Some(w) => {
                let m = report(
                    t.id,
                    t.t_state_s,
                    &w.est,
                    TrackStatus::Tentative,
                    r.seq,
                    r.t_frame_s,
                    None,
                    Kinematics::of(params),
                    params.line,
                );
                r.mirror = Some(m.position);
                r.mirror_prob = Some(w.prob());
            }
            None if !t.side_decided => r.mirror = mirror_of(self.line, volume, r),
            None => {}
        }
    }
}

/// How to start (or restart) a slot's particles again from estimate `e` (mean, covariance and
/// model probabilities), keyed by `frame`.
pub fn restart(slot: u32, frame: u64, e: &Estimate) -> TrackInit {
    TrackInit {
        slot,
        frame,
        mean: e.mean,
        chol: crate::math::linalg::cholesky6(&e.cov),
        speed_ball_m_s: 0.0,
        model_probs: e.model_probs.clone(),
        // Each particle keeps the inverse range it draws from the estimate.
        inv_range_max: -1.0,
    }
}

/// Where a mirror can lie: the array and the search volume.
pub struct Volume<'a> {
    pub geo: &'a ArrayGeometry,
    pub bounds: Option<([f64; 3], [f64; 3])>,
}

/// Line mode with the sources in a known plane: the mirror of report `r`'s direction across
/// the axis, unless the search volume rules a source there out (at the reported range, or at
/// every range out to the volume's far corner when there is none).
fn mirror_of(line: Option<LineAxes>, v: &Volume, r: &TrackReport) -> Option<[f64; 3]> {
    let line = line.filter(|l| l.plane)?;
    let m = mirror_across(&r.position, &line.axis);
    let Some((lo, hi)) = v.bounds else {
        return Some(m);
    };
    let c = v.geo.centroid();
    let inside = |d: f64| (0..3).all(|k| (lo[k]..=hi[k]).contains(&(c[k] + m[k] * d)));
    let possible = match r.range_m() {
        Some(d) => inside(d),
        None => {
            let far = (Vector3::from(hi) - Vector3::from(lo)).norm();
            let mut d = 0.5 * v.geo.aperture_m().max(0.05);
            let mut any = false;
            while d <= 2.0 * far && !any {
                any = inside(d);
                d *= 1.25;
            }
            any
        }
    };
    possible.then_some(m)
}
