//! Position streams read back: the JSON Lines a replay or a live sink writes, as the track
//! reports of each frame.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::track::manager::TrackStatus;
use crate::track::report::EstimateKind;

/// One track report, as read back from a position stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub id: u64,
    /// Emission time of the state.
    pub t: f64,
    pub pos: [f64; 3],
    /// Model probabilities in configuration order (empty when unknown).
    pub models: Vec<f32>,
    /// The reported position covariance, upper triangle (xx, xy, xz, yy, yz, zz, m²), as in the
    /// stream's `pos_cov`; None when the report has none.
    pub cov: Option<[f64; 6]>,
    /// Direction mode: the range (m) where the report gives one (the stream's `range_m`).
    pub range_m: Option<f64>,
    /// Direction mode with curved wavefronts: the inverse range (1/m) and its standard
    /// deviation (the stream's `inv_range` and `inv_range_std`).
    pub inv_range: Option<[f64; 2]>,
    /// A direction report (the stream's message carries `az_deg`): `pos` is a unit vector.
    pub direction: bool,
    /// The track's status (the stream's `status`; None in streams without one).
    pub status: Option<TrackStatus>,
    /// Line mode: the report carries a mirror point across the axis (the stream's `mirror`),
    /// so its side is not decided.
    pub ambiguous: bool,
}

/// The reports of one frame.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrameReports {
    pub seq: u64,
    /// Arrival time of the frame centre.
    pub t_frame: f64,
    pub reports: Vec<Report>,
}

/// Most frames a stream may span (the frames without a report are filled in, so a sequence
/// number sizes memory): two days at 23 frames per second.
pub const MAX_STREAM_FRAMES: u64 = 4_000_000;

/// Read a JSON Lines position stream: track messages grouped by frame; status lines give the
/// number of frames processed, so frames without any report are counted too.
pub fn read_stream(path: &Path, kind: EstimateKind) -> Result<Vec<FrameReports>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: path.into(),
        source: e,
    })?;
    parse_stream_of(&text, kind).map_err(|(line, problem)| Error::Scene {
        path: path.into(),
        problem: format!("line {line}: {problem}"),
        fix: "give the JSON Lines written by `sonotrack replay --out` or a live JSONL/UDP sink"
            .into(),
    })
}

/// Whether a stream's reports are directions (`Some(true)`) or 3-D positions (`Some(false)`);
/// None when it has no reports; an error naming the two kinds when it mixes them.
pub fn stream_holds_directions(
    frames: &[FrameReports],
) -> std::result::Result<Option<bool>, String> {
    let mut kinds = frames.iter().flat_map(|f| &f.reports).map(|r| r.direction);
    let Some(first) = kinds.next() else {
        return Ok(None);
    };
    if kinds.any(|k| k != first) {
        return Err(
            "the stream mixes direction reports (with `az_deg`) and 3-D positions; evaluate each run's stream on its own"
                .into(),
        );
    }
    Ok(Some(first))
}

/// Parse a position stream's filtered reports (see `read_stream`).
pub fn parse_stream(text: &str) -> std::result::Result<Vec<FrameReports>, (usize, String)> {
    parse_stream_of(text, EstimateKind::Filtered)
}

/// Parse one estimate of a position stream: the track messages (filtered), or the smoothed
/// messages of that `estimate`.
pub fn parse_stream_of(
    text: &str,
    kind: EstimateKind,
) -> std::result::Result<Vec<FrameReports>, (usize, String)> {
    let mut by_seq: BTreeMap<u64, FrameReports> = BTreeMap::new();
    let mut frames_in = 0u64;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| (i + 1, format!("not JSON: {e}")))?;
        let ty = v.get("type").and_then(|t| t.as_str());
        match ty {
            Some("track" | "smoothed") => {
                let smoothed = ty == Some("smoothed");
                if estimate_of(&v, smoothed).map_err(|e| (i + 1, e))? != kind {
                    continue;
                }
                let (seq, t_frame, report) = track_report(&v).map_err(|e| (i + 1, e))?;
                let e = by_seq.entry(seq).or_insert_with(|| FrameReports {
                    seq,
                    ..Default::default()
                });
                e.t_frame = t_frame;
                e.reports.push(report);
            }
            Some("status") => {
                if let Some(x) = v.get("frames_in") {
                    let n = frame_count(x).map_err(|e| (i + 1, format!("`frames_in` {e}")))?;
                    frames_in = frames_in.max(n);
                }
            }
            // (A track's end carries no position to score, nor the fusion service's status.)
            Some("deleted" | "fusion_status") => {}
            Some(other) => return Err((i + 1, format!("unknown message type `{other}`"))),
            None => return Err((i + 1, "message without `type`".into())),
        }
    }
    Ok(with_empty_frames(by_seq, frames_in))
}

/// Which estimate a track (or, `smoothed`, a smoothed) message carries: its `estimate`;
/// without one, a track message is filtered and a smoothed one smoothed.
fn estimate_of(v: &serde_json::Value, smoothed: bool) -> std::result::Result<EstimateKind, String> {
    match (v.get("estimate").and_then(|e| e.as_str()), smoothed) {
        (None, false) | (Some("filtered"), false) => Ok(EstimateKind::Filtered),
        (None, true) | (Some("smoothed"), true) => Ok(EstimateKind::Smoothed),
        (Some("lagged"), true) => Ok(EstimateKind::Lagged),
        (Some(e), _) => Err(format!(
            "`estimate` \"{e}\" in a `{}` message (track messages are \"filtered\", smoothed ones \"smoothed\" or \"lagged\")",
            if smoothed { "smoothed" } else { "track" }
        )),
    }
}

/// A frame sequence number or count: an integer from 0 to [`MAX_STREAM_FRAMES`].
fn frame_count(x: &serde_json::Value) -> std::result::Result<u64, String> {
    let n = x
        .as_u64()
        .ok_or_else(|| format!("is {x}, not a non-negative integer"))?;
    if n > MAX_STREAM_FRAMES {
        return Err(format!(
            "is {n}: a stream of at most {MAX_STREAM_FRAMES} frames is scored (split a longer one)"
        ));
    }
    Ok(n)
}

/// A track message's frame sequence number, frame time and report.
fn track_report(v: &serde_json::Value) -> std::result::Result<(u64, f64, Report), String> {
    let num = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_f64())
            .ok_or_else(|| format!("track message without `{k}`"))
    };
    let pos = v
        .get("pos")
        .and_then(|p| p.as_array())
        .filter(|a| a.len() == 3)
        .and_then(|a| Some([a[0].as_f64()?, a[1].as_f64()?, a[2].as_f64()?]))
        .ok_or_else(|| "track message without a 3-element `pos`".to_string())?;
    let seq = v
        .get("seq")
        .ok_or_else(|| "track message without `seq`".to_string())
        .and_then(|x| frame_count(x).map_err(|e| format!("`seq` {e}")))?;
    let t_frame = num("t_frame")?;
    let report = Report {
        id: num("id")? as u64,
        t: num("t")?,
        pos,
        models: Vec::new(),
        cov: position_covariance(v)?,
        range_m: range_of(v)?,
        inv_range: inverse_range_of(v)?,
        direction: v.get("az_deg").is_some(),
        status: status_of(v)?,
        ambiguous: v.get("mirror").is_some_and(|m| !m.is_null()),
    };
    Ok((seq, t_frame, report))
}

/// `status`: tentative, confirmed or coasting, where given.
fn status_of(v: &serde_json::Value) -> std::result::Result<Option<TrackStatus>, String> {
    match v.get("status") {
        None => Ok(None),
        Some(s) => match s.as_str() {
            Some("tentative") => Ok(Some(TrackStatus::Tentative)),
            Some("confirmed") => Ok(Some(TrackStatus::Confirmed)),
            Some("coasting") => Ok(Some(TrackStatus::Coasting)),
            _ => Err("track message whose `status` is not tentative, confirmed or coasting".into()),
        },
    }
}

/// `pos_cov`: streams written before the covariance was reported have none (they are scored
/// without the consistency check); one that is there must be six numbers.
fn position_covariance(v: &serde_json::Value) -> std::result::Result<Option<[f64; 6]>, String> {
    let Some(p) = v.get("pos_cov") else {
        return Ok(None);
    };
    p.as_array()
        .filter(|a| a.len() == 6)
        .and_then(|a| {
            let mut c = [0.0; 6];
            for (x, y) in c.iter_mut().zip(a) {
                *x = y.as_f64()?;
            }
            Some(c)
        })
        .map(Some)
        .ok_or_else(|| {
            "track message whose `pos_cov` is not 6 numbers (xx, xy, xz, yy, yz, zz)".to_string()
        })
}

/// `range_m`, a positive number where given.
fn range_of(v: &serde_json::Value) -> std::result::Result<Option<f64>, String> {
    let Some(r) = v.get("range_m") else {
        return Ok(None);
    };
    r.as_f64()
        .filter(|r| *r > 0.0)
        .map(Some)
        .ok_or_else(|| "track message whose `range_m` is not a positive number".to_string())
}

/// `inv_range` and `inv_range_std`: together, or not at all.
fn inverse_range_of(v: &serde_json::Value) -> std::result::Result<Option<[f64; 2]>, String> {
    let (a, b) = (v.get("inv_range"), v.get("inv_range_std"));
    if a.is_none() && b.is_none() {
        return Ok(None);
    }
    let non_negative =
        |x: Option<&serde_json::Value>| x.and_then(|x| x.as_f64()).filter(|x| *x >= 0.0);
    match (non_negative(a), non_negative(b)) {
        (Some(a), Some(b)) => Ok(Some([a, b])),
        _ => Err(
            "track message whose `inv_range` and `inv_range_std` are not both non-negative numbers"
                .to_string(),
        ),
    }
}

/// The frames in sequence order, with the frames that had no report filled in: frame times are
/// regular in the sequence number, so t_frame = a + b seq is fitted to the frames that had one.
/// The last frame is the later of the last report's and the status messages' count.
fn with_empty_frames(mut by_seq: BTreeMap<u64, FrameReports>, frames_in: u64) -> Vec<FrameReports> {
    if by_seq.is_empty() {
        return Vec::new();
    }
    let pts: Vec<(f64, f64)> = by_seq.values().map(|f| (f.seq as f64, f.t_frame)).collect();
    let n = pts.len() as f64;
    let (mx, my) = pts
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let sxx: f64 = pts.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let last = by_seq
        .keys()
        .next_back()
        .copied()
        .unwrap_or(0)
        .max(frames_in.saturating_sub(1));
    if slope <= 0.0 {
        // One frame only: no spacing to infer.
        return by_seq.into_values().collect();
    }
    let mut out = Vec::with_capacity(last as usize + 1);
    for seq in 0..=last {
        out.push(by_seq.remove(&seq).unwrap_or_else(|| FrameReports {
            seq,
            t_frame: my + slope * (seq as f64 - mx),
            reports: Vec::new(),
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One stream carries filtered, smoothed and lagged estimates of the same frames: each is
    /// read on its own; a message naming an estimate its type cannot carry is an error.
    #[test]
    fn each_estimate_of_a_stream_is_read_on_its_own() {
        let text = r#"{"type":"track","estimate":"filtered","t":0.1,"t_frame":0.1,"seq":0,"id":3,"pos":[1,2,3]}
{"type":"track","t":0.2,"t_frame":0.2,"seq":1,"id":3,"pos":[1,2,4]}
{"type":"smoothed","estimate":"lagged","t":0.1,"t_frame":0.1,"seq":0,"id":3,"pos":[5,2,3]}
{"type":"smoothed","estimate":"smoothed","t":0.1,"t_frame":0.1,"seq":0,"id":3,"pos":[6,2,3]}
{"type":"smoothed","t":0.2,"t_frame":0.2,"seq":1,"id":3,"pos":[6,2,4]}
"#;
        let x = |k, i: usize| parse_stream_of(text, k).unwrap()[i].reports[0].pos[0];
        assert_eq!(parse_stream(text).unwrap().len(), 2);
        assert_eq!(x(EstimateKind::Filtered, 0), 1.0);
        assert_eq!(x(EstimateKind::Lagged, 0), 5.0);
        assert_eq!(x(EstimateKind::Smoothed, 0), 6.0);
        assert_eq!(x(EstimateKind::Smoothed, 1), 6.0);
        let lagged = parse_stream_of(text, EstimateKind::Lagged).unwrap();
        assert_eq!(lagged.len(), 1);
        let bad = r#"{"type":"track","estimate":"lagged","t":0.1,"t_frame":0.1,"seq":0,"id":3,"pos":[1,2,3]}"#;
        let (line, problem) = parse_stream(bad).unwrap_err();
        assert_eq!(line, 1);
        assert!(problem.contains("`estimate`"), "{problem}");
    }

    #[test]
    fn stream_parsing_fills_frames_without_reports() {
        let text = r#"{"type":"status","t":1.0,"frames_in":6}
{"type":"track","t":0.1,"t_frame":0.125,"seq":1,"id":3,"pos":[1,2,3],"pos_cov":[1,0,0,2,0,3]}
{"type":"track","t":0.2,"t_frame":0.25,"seq":2,"id":3,"pos":[1,2,3]}
{"type":"track","t":0.45,"t_frame":0.5,"seq":4,"id":3,"pos":[1,2,3]}
"#;
        let f = parse_stream(text).unwrap();
        assert_eq!(f.len(), 6);
        assert!(f[3].reports.is_empty());
        assert_eq!(f[1].reports[0].cov, Some([1.0, 0.0, 0.0, 2.0, 0.0, 3.0]));
        assert_eq!(f[2].reports[0].cov, None);
        assert!((f[3].t_frame - 0.375).abs() < 1e-12);
        assert!((f[0].t_frame - 0.0).abs() < 1e-12);
        assert_eq!(parse_stream("{\"type\":\"x\"}").unwrap_err().0, 1);
        assert!(parse_stream("{\"type\":\"track\",\"seq\":1}").is_err());
        assert!(parse_stream("not json").is_err());
        // Sequence numbers and frame counts size the frames filled in: huge, fractional or
        // negative ones are errors naming the line, never an allocation (reliability issue).
        let good =
            "{\"type\":\"track\",\"t\":0.1,\"t_frame\":0.1,\"seq\":SEQ,\"id\":3,\"pos\":[1,2,3]}";
        for seq in [
            "1e19",
            "9223372036854775807",
            "1000000000000",
            "-1",
            "1.5",
            "\"7\"",
        ] {
            let text = format!("{}\n{}", good.replace("SEQ", "1"), good.replace("SEQ", seq));
            let (line, problem) = parse_stream(&text).unwrap_err();
            assert_eq!(line, 2, "{seq}");
            assert!(problem.contains("`seq`"), "{seq}: {problem}");
        }
        let status = "{\"type\":\"status\",\"frames_in\":18446744073709551615}";
        let (line, problem) =
            parse_stream(&format!("{}\n{status}", good.replace("SEQ", "1"))).unwrap_err();
        assert_eq!(line, 2);
        assert!(problem.contains("frames_in"), "{problem}");
        // A covariance that is there but malformed is an error naming the line, not a report
        // scored without it.
        let bad = "{\"type\":\"track\",\"t\":0.1,\"t_frame\":0.1,\"seq\":1,\"id\":3,\"pos\":[1,2,3],\"pos_cov\":[1,0,0,2,0]}";
        let (line, problem) = parse_stream(&format!("\n{bad}\n")).unwrap_err();
        assert_eq!(line, 2);
        assert!(problem.contains("`pos_cov`"), "{problem}");
        // A direction's range: read where given, an error naming the line where malformed.
        let ranged = "{\"type\":\"track\",\"t\":0.1,\"t_frame\":0.1,\"seq\":1,\"id\":3,\"pos\":[1,0,0],\"range_m\":12.5}";
        let f = parse_stream(ranged).unwrap();
        assert_eq!(f.last().unwrap().reports[0].range_m, Some(12.5));
        for bad in ["\"far\"", "-2"] {
            let line = ranged.replace("12.5", bad);
            let (_, problem) = parse_stream(&line).unwrap_err();
            assert!(problem.contains("`range_m`"), "{bad}: {problem}");
        }
        // The inverse range and its spread: read together; one without the other, or a
        // negative or non-numeric one, is an error naming the line.
        let inv = ranged.replace("}", ",\"inv_range\":0.08,\"inv_range_std\":0.004}");
        let f = parse_stream(&inv).unwrap();
        assert_eq!(f.last().unwrap().reports[0].inv_range, Some([0.08, 0.004]));
        assert_eq!(parse_stream(ranged).unwrap()[0].reports[0].inv_range, None);
        for bad in [
            ",\"inv_range\":0.08}",
            ",\"inv_range_std\":0.004}",
            ",\"inv_range\":-0.1,\"inv_range_std\":0.004}",
            ",\"inv_range\":0.08,\"inv_range_std\":\"wide\"}",
        ] {
            let line = format!("\n\n{}", ranged.replace("}", bad));
            let (n, problem) = parse_stream(&line).unwrap_err();
            assert_eq!(n, 3, "{bad}");
            assert!(problem.contains("`inv_range`"), "{bad}: {problem}");
        }
    }

    /// A stream says what it holds: direction reports carry `az_deg`; mixing the two kinds is
    /// an error, an empty stream holds neither.
    #[test]
    fn streams_say_whether_they_hold_directions() {
        let three_d =
            "{\"type\":\"track\",\"t\":0.1,\"t_frame\":0.1,\"seq\":1,\"id\":3,\"pos\":[5,1,-2]}";
        let direction = "{\"type\":\"track\",\"t\":0.2,\"t_frame\":0.2,\"seq\":2,\"id\":3,\"pos\":[0.6,0.8,0],\"az_deg\":53.13,\"el_deg\":0}";
        let kind = |text: &str| stream_holds_directions(&parse_stream(text).unwrap());
        assert_eq!(kind(three_d), Ok(Some(false)));
        assert_eq!(kind(direction), Ok(Some(true)));
        assert_eq!(kind(""), Ok(None));
        let mixed = kind(&format!("{three_d}\n{direction}")).unwrap_err();
        assert!(mixed.contains("mixes"), "{mixed}");
    }
}
