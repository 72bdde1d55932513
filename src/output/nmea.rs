//! NMEA-0183-style sentences for small serial receivers.
//!
//! `$PSNTR,t,id,status,x,y,z,vx,vy,vz,sd,model*HH` per track and `$PSNTS,t,frames_in,
//! frames_dropped,backend,tracks*HH` per status ("P" marks a proprietary sentence; "SNT" is
//! sonotrack's mnemonic). `status` is T (tentative), C (confirmed) or K (coasting); `sd` is the
//! RMS position standard deviation in metres; HH is the XOR of every character between `$` and
//! `*`, in upper-case hex. Lines end in CR LF. Sentences stay under NMEA's 82-character limit for
//! positions within ±99999 m.

use crate::output::{StatusMessage, TrackMessage};
use crate::track::manager::TrackStatus;

/// XOR checksum of a sentence body (between `$` and `*`).
pub fn checksum(body: &str) -> u8 {
    body.bytes().fold(0u8, |a, b| a ^ b)
}

fn wrap(body: String) -> String {
    format!("${body}*{:02X}\r\n", checksum(&body))
}

pub fn track_sentence(m: &TrackMessage) -> String {
    let status = match m.status {
        TrackStatus::Tentative => 'T',
        TrackStatus::Confirmed => 'C',
        TrackStatus::Coasting => 'K',
    };
    let sd = (m.pos_std[0].powi(2) + m.pos_std[1].powi(2) + m.pos_std[2].powi(2)).sqrt();
    let model: String = m
        .model
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect();
    wrap(format!(
        "PSNTR,{:.3},{},{},{:.3},{:.3},{:.3},{:.2},{:.2},{:.2},{:.3},{}",
        m.t, m.id, status, m.pos[0], m.pos[1], m.pos[2], m.vel[0], m.vel[1], m.vel[2], sd, model
    ))
}

pub fn status_sentence(m: &StatusMessage) -> String {
    wrap(format!(
        "PSNTS,{:.3},{},{},{},{}",
        m.t, m.frames_in, m.frames_dropped, m.backend, m.tracks
    ))
}

/// Check a received sentence's checksum (for receivers and tests).
pub fn verify(line: &str) -> bool {
    let line = line.trim_end();
    let Some(body) = line.strip_prefix('$') else {
        return false;
    };
    let Some((body, cs)) = body.rsplit_once('*') else {
        return false;
    };
    u8::from_str_radix(cs, 16).is_ok_and(|v| v == checksum(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_checksum() {
        // A classic GPS sentence with a published checksum.
        assert!(verify(
            "$GPGGA,092750.000,5321.6802,N,00630.3372,W,1,8,1.03,61.7,M,55.2,M,,*76"
        ));
        assert!(!verify(
            "$GPGGA,092750.000,5321.6802,N,00630.3372,W,1,8,1.03,61.7,M,55.2,M,,*77"
        ));
        let s = wrap("PSNTS,1.000,10,0,cpu,1".into());
        assert!(verify(&s) && s.ends_with("\r\n"));
    }
}
