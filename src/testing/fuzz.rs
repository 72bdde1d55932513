//! The fuzz harness's engine, on stable Rust with no extra dependency: structured mutations of
//! seed files (numbers swapped for NaN, infinities, huge and negative values; lines duplicated,
//! dropped and spliced; bytes flipped; header fields overwritten; truncation), each case run
//! under `catch_unwind` with its time measured. The targets (one per parser and per command's
//! options) live in `tests/fuzz.rs` and the command line's own tests; the corpus is in
//! `fuzz/corpus/<target>/`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

/// Numbers a parser must survive.
pub const NASTY_NUMBERS: [&str; 22] = [
    "NaN",
    "nan",
    "inf",
    "-inf",
    "1e999",
    "-1e999",
    "-1",
    "0",
    "-0",
    "1e19",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "1e308",
    "1e-320",
    "0.5",
    "65536",
    "1e9",
    "67108864",
    "2147483647",
];

/// Fragments that break structure.
const NASTY_TOKENS: [&str; 14] = [
    "[",
    "]",
    "{",
    "}",
    "\"",
    ",",
    "\n",
    "=",
    ":",
    "\0",
    "include = [\"\"]\n",
    "[[",
    "\\u0000",
    "\u{feff}",
];

/// Integers that break binary headers.
const NASTY_INTS: [u32; 10] = [
    0,
    1,
    2,
    3,
    0xFFFE,
    0xFFFF,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
    48_000,
];

/// A small, fast generator (splitmix64): the harness needs speed and reproducibility, not
/// statistical quality.
#[derive(Debug, Clone)]
pub struct FuzzRng(u64);

impl FuzzRng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// Where the number-like runs of `data` are (digits with sign, point and exponent).
fn number_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < data.len() {
        if data[i].is_ascii_digit() {
            let mut start = i;
            if start > 0 && data[start - 1] == b'-' {
                start -= 1;
            }
            while i < data.len() && (data[i].is_ascii_digit() || b".eE+-".contains(&data[i])) {
                i += 1;
            }
            spans.push((start, i));
        } else {
            i += 1;
        }
    }
    spans
}

/// Line boundaries of `data`: (start, end including the newline).
fn line_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' {
            spans.push((start, i + 1));
            start = i + 1;
        }
    }
    if start < data.len() {
        spans.push((start, data.len()));
    }
    spans
}

/// One mutation of `data` (text-aware where `text`), splicing from `other` at times.
pub fn mutate_once(data: &mut Vec<u8>, other: &[u8], text: bool, rng: &mut FuzzRng) {
    let len = data.len();
    match rng.below(if text { 9 } else { 6 }) {
        // Flip a bit.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Delete a range.
        1 if len > 0 => {
            let a = rng.below(len);
            let b = (a + 1 + rng.below(16)).min(len);
            data.drain(a..b);
        }
        // Duplicate a range.
        2 if len > 0 => {
            let a = rng.below(len);
            let b = (a + 1 + rng.below(64)).min(len);
            let piece = data[a..b].to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, piece);
        }
        // Truncate.
        3 if len > 0 => data.truncate(rng.below(len)),
        // Splice a piece of another seed.
        4 if !other.is_empty() => {
            let a = rng.below(other.len());
            let b = (a + 1 + rng.below(128)).min(other.len());
            let at = rng.below(len + 1);
            data.splice(at..at, other[a..b].iter().copied());
        }
        // Overwrite a little-endian integer (header fields).
        5 if len >= 4 => {
            let at = rng.below(len - 3) & !1;
            let v = NASTY_INTS[rng.below(NASTY_INTS.len())];
            if rng.below(2) == 0 {
                data[at..at + 2].copy_from_slice(&(v as u16).to_le_bytes());
            } else if at + 4 <= len {
                data[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        // Swap a number for a nasty one.
        6 => {
            let spans = number_spans(data);
            if !spans.is_empty() {
                let (a, b) = spans[rng.below(spans.len())];
                let n = NASTY_NUMBERS[rng.below(NASTY_NUMBERS.len())];
                data.splice(a..b, n.bytes());
            }
        }
        // Duplicate, drop or move a whole line.
        7 => {
            let lines = line_spans(data);
            if !lines.is_empty() {
                let (a, b) = lines[rng.below(lines.len())];
                let line = data[a..b].to_vec();
                match rng.below(3) {
                    0 => {
                        data.drain(a..b);
                    }
                    1 => {
                        let (c, _) = lines[rng.below(lines.len())];
                        data.splice(c..c, line);
                    }
                    _ => {
                        let copies = 1 + rng.below(64);
                        let mut rep = Vec::with_capacity(line.len() * copies);
                        for _ in 0..copies {
                            rep.extend_from_slice(&line);
                        }
                        data.splice(b..b, rep);
                    }
                }
            }
        }
        // Insert a structural token.
        _ => {
            let t = NASTY_TOKENS[rng.below(NASTY_TOKENS.len())];
            let at = rng.below(len + 1);
            data.splice(at..at, t.bytes());
        }
    }
}

/// A case: a seed with one to four mutations (a tenth of the cases are the seed itself).
pub fn make_case(seeds: &[Vec<u8>], text: bool, rng: &mut FuzzRng) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    if rng.below(10) == 0 {
        return data;
    }
    let other = &seeds[rng.below(seeds.len())];
    for _ in 0..1 + rng.below(4) {
        mutate_once(&mut data, other, text, rng);
    }
    data
}

/// What a fuzz run found.
#[derive(Debug, Default, Clone)]
pub struct FuzzReport {
    pub cases: u64,
    /// Cases the target accepted (the rest returned an error, as they should for bad input).
    pub accepted: u64,
    /// Cases that panicked, with the panic message and the input.
    pub panics: Vec<(String, Vec<u8>)>,
    /// The slowest case and its time.
    pub slowest: Duration,
    pub slowest_case: Vec<u8>,
}

/// Run `cases` mutated cases of `target` (true: the input was accepted) from `seeds`.
pub fn run_cases(
    seeds: &[Vec<u8>],
    text: bool,
    cases: u64,
    seed: u64,
    mut target: impl FnMut(&[u8]) -> bool,
) -> FuzzReport {
    assert!(!seeds.is_empty(), "a fuzz target needs at least one seed");
    let mut rng = FuzzRng::new(seed);
    let mut rep = FuzzReport::default();
    for _ in 0..cases {
        let case = make_case(seeds, text, &mut rng);
        let t = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| target(&case)));
        let dt = t.elapsed();
        rep.cases += 1;
        match r {
            Ok(true) => rep.accepted += 1,
            Ok(false) => {}
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                if rep.panics.len() < 20 {
                    rep.panics.push((msg, case.clone()));
                }
            }
        }
        if dt > rep.slowest {
            rep.slowest = dt;
            rep.slowest_case = case;
        }
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_reproducible_and_touch_numbers() {
        let seeds = vec![b"a = 1\nb = [2.5, -3]\n".to_vec()];
        let a: Vec<Vec<u8>> = {
            let mut r = FuzzRng::new(5);
            (0..200).map(|_| make_case(&seeds, true, &mut r)).collect()
        };
        let b: Vec<Vec<u8>> = {
            let mut r = FuzzRng::new(5);
            (0..200).map(|_| make_case(&seeds, true, &mut r)).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().any(|c| {
            let s = String::from_utf8_lossy(c);
            NASTY_NUMBERS
                .iter()
                .any(|n| s.contains(n) && *n != "0" && *n != "-1")
        }));
        assert!(a.iter().any(|c| c.len() < seeds[0].len()));
        assert!(a.iter().any(|c| c.len() > seeds[0].len()));
    }

    #[test]
    fn panics_are_caught_and_kept_with_their_input() {
        let seeds = vec![b"123".to_vec()];
        let rep = run_cases(&seeds, true, 500, 1, |d| {
            if d.contains(&b'N') {
                panic!("boom");
            }
            true
        });
        let mut r = FuzzRng::new(1);
        let expected = (0..500)
            .filter(|_| make_case(&seeds, true, &mut r).contains(&b'N'))
            .count();
        assert!(expected > 0);
        assert_eq!(rep.cases, 500);
        assert_eq!(rep.accepted as usize, 500 - expected);
        assert_eq!(rep.panics.len(), expected.min(20));
        assert!(
            rep.panics
                .iter()
                .all(|(m, d)| m == "boom" && d.contains(&b'N'))
        );
    }
}
