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
    }
}
