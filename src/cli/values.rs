//! Checks for numbers given on the command line: each option's value is parsed with one of
//! these, so a NaN, an infinity or a value out of range is refused by name before it can size
//! an allocation, bound a loop or divide.

/// A finite number.
fn finite(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("`{s}` is not a finite number"))
    }
}

/// A finite number in `lo..=hi`.
fn within(s: &str, lo: f64, hi: f64, what: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is out of range: {what}"))
    }
}

/// A finite number greater than 0 and at most `hi`.
fn positive_up_to(s: &str, hi: f64, what: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v > 0.0 && v <= hi {
        Ok(v)
    } else {
        Err(format!("{v} is out of range: {what}"))
    }
}

/// Seconds into a file or a time span: 0 to 10 days.
pub fn seconds(s: &str) -> Result<f64, String> {
    within(s, 0.0, 864_000.0, "use 0 to 864000 s")
}

/// A duration to simulate or run: more than 0, at most a day.
pub fn duration(s: &str) -> Result<f64, String> {
    positive_up_to(s, 86_400.0, "use more than 0 and at most 86400 s")
}

/// A distance threshold or OSPA cut-off: more than 0, at most 1,000 km.
pub fn metres(s: &str) -> Result<f64, String> {
    positive_up_to(s, 1e6, "use more than 0 and at most 1e6 m")
}

/// An OSPA order: 1 (the mean distance) to 20.
pub fn ospa_order(s: &str) -> Result<f64, String> {
    within(s, 1.0, 20.0, "use 1 to 20 (1: mean distance, 2: RMS)")
}

/// A pace relative to real time: more than 0, at most 1000.
pub fn pace(s: &str) -> Result<f64, String> {
    positive_up_to(s, 1000.0, "use more than 0 and at most 1000 (x real time)")
}

/// A signal-to-noise ratio in dB: -100 to 200.
pub fn decibels(s: &str) -> Result<f64, String> {
    within(s, -100.0, 200.0, "use -100 to 200 dB")
}

/// A time budget for one benchmark cell: more than 0, at most an hour.
pub fn budget(s: &str) -> Result<f64, String> {
    positive_up_to(s, 3600.0, "use more than 0 and at most 3600 s")
}

/// Any finite number (a coordinate).
pub fn coordinate(s: &str) -> Result<f64, String> {
    within(s, -1e7, 1e7, "use a finite number within 1e7")
}

/// A whole number in `lo..=hi`.
fn count_within(s: &str, lo: u64, hi: u64, what: &str) -> Result<u64, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is out of range: {what}"))
    }
}

/// Scenes of a trial: 1 to 10,000.
pub fn runs(s: &str) -> Result<u32, String> {
    count_within(s, 1, 10_000, "use 1 to 10000 scenes").map(|v| v as u32)
}

/// A scene index of a trial: 0 to 9,999.
pub fn scene_index(s: &str) -> Result<u32, String> {
    count_within(s, 0, 9_999, "use 0 to 9999").map(|v| v as u32)
}

/// Particles per track (the configuration's range): 64 to 4,194,304.
pub fn particles(s: &str) -> Result<usize, String> {
    count_within(s, 64, 1 << 22, "use 64 to 4194304 particles").map(|v| v as usize)
}

/// Particles of one benchmark cell (all of one bank): 64 to 16,777,216.
pub fn bench_particles(s: &str) -> Result<usize, String> {
    count_within(s, 64, 1 << 24, "use 64 to 16777216 particles").map(|v| v as usize)
}

/// Channels of a benchmark cell: 2 to 64.
pub fn channels(s: &str) -> Result<usize, String> {
    count_within(s, 2, 64, "use 2 to 64 channels").map(|v| v as usize)
}

/// A frame length of a benchmark cell: 64 to 65,536 samples.
pub fn frame_samples(s: &str) -> Result<usize, String> {
    count_within(s, 64, 65_536, "use 64 to 65536 samples").map(|v| v as usize)
}

/// Motion models of a benchmark cell: 1 to 16.
pub fn models(s: &str) -> Result<usize, String> {
    count_within(s, 1, 16, "use 1 to 16 models").map(|v| v as usize)
}

/// A sample rate: 1 kHz to 1 MHz.
pub fn sample_rate(s: &str) -> Result<u32, String> {
    count_within(s, 1000, 1_000_000, "use 1000 to 1000000 Hz").map(|v| v as u32)
}

/// Grid points along each axis of a map: 8 to 2,000.
pub fn resolution(s: &str) -> Result<usize, String> {
    count_within(s, 8, 2000, "use 8 to 2000 points per axis").map(|v| v as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_and_out_of_range_values_are_refused() {
        for bad in ["NaN", "nan", "inf", "-inf", "1e999", "x", ""] {
            assert!(seconds(bad).is_err(), "{bad}");
            assert!(metres(bad).is_err(), "{bad}");
            assert!(ospa_order(bad).is_err(), "{bad}");
            assert!(pace(bad).is_err(), "{bad}");
            assert!(decibels(bad).is_err(), "{bad}");
        }
        assert!(metres("0").is_err());
        assert!(pace("0").is_err());
        assert!(ospa_order("1e308").is_err());
        assert!(ospa_order("0.5").is_err());
        assert!(seconds("-1").is_err());
        assert!(duration("0").is_err());
        assert_eq!(seconds("2.5"), Ok(2.5));
        assert_eq!(ospa_order("2"), Ok(2.0));
        assert_eq!(pace("1"), Ok(1.0));
        assert!(seconds("1e9").unwrap_err().contains("out of range"));
        assert!(runs("4000000000").is_err());
        assert!(runs("0").is_err());
        assert!(resolution("1000000").is_err());
        assert!(bench_particles("100000000000").is_err());
        assert!(channels("1").is_err());
        assert_eq!(runs("20"), Ok(20));
        assert_eq!(resolution("120"), Ok(120));
    }
}
