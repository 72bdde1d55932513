//! The logic of tracks on the curves: a track's existence probability confirms it (at
//! `confirm`) and ends it (below `delete`); it also ends when it duplicates an older track or
//! has sat at the search volume's edge for [`EDGE_S`].

use crate::track::filter::bernoulli::followers::Follower;
use crate::track::measure::curves::{DUPLICATE_M, near};
use crate::track::report::{EndReason, TrackEnd, TrackStatus};

/// A track whose mean stays within this of the search volume's faces…
pub const EDGE_M: f64 = 1.0;
/// …for this long has left it (a source beyond the volume pins the particles to its edge, where
/// the delays fit nearly as well as at the source).
pub const EDGE_S: f64 = 1.0;

/// The thresholds, and the edge rule in frames.
#[derive(Debug, Clone, Copy)]
pub struct ExistenceRule {
    pub confirm: f64,
    pub delete: f64,
    /// Frames at the edge after which a track has left the volume.
    pub edge_frames: usize,
}

impl ExistenceRule {
    pub fn new(confirm: f64, delete: f64, frame_s: f64) -> Self {
        Self {
            confirm,
            delete,
            edge_frames: (EDGE_S / frame_s).ceil() as usize,
        }
    }

    /// A confirmed track's status: confirmed while its existence holds `confirm`, else
    /// coasting.
    pub fn status(&self, t: &Follower) -> TrackStatus {
        if t.filter.p_exist() >= self.confirm {
            TrackStatus::Confirmed
        } else {
            TrackStatus::Coasting
        }
    }

    /// For each follower (`(id, follower)`, in order): None when it lives on, else its end
    /// (existence below `delete`, within [`DUPLICATE_M`] of a follower kept before it, or at
    /// the edge too long).
    pub fn ends(&self, followers: &[(u64, &Follower)]) -> Vec<Option<TrackEnd>> {
        let mut kept: Vec<&Follower> = Vec::with_capacity(followers.len());
        let mut out = Vec::with_capacity(followers.len());
        for &(id, t) in followers {
            let dup = kept.iter().any(|o| near(&o.mean, &t.mean, DUPLICATE_M));
            let left = t.edge_frames >= self.edge_frames;
            if t.filter.p_exist() < self.delete || dup || left {
                let detail = if left {
                    format!("it has sat at the search volume's edge for {EDGE_S} s")
                } else {
                    format!("existence {:.3} on the curves", t.filter.p_exist())
                };
                out.push(Some(TrackEnd {
                    id,
                    reason: if dup {
                        EndReason::Duplicate
                    } else if t.confirmed {
                        EndReason::Lost
                    } else {
                        EndReason::Unconfirmed
                    },
                    detail,
                    was_confirmed: t.confirmed,
                }));
            } else {
                kept.push(t);
                out.push(None);
            }
        }
        out
    }
}
