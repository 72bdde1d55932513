//! A turning array's heading, frame by frame: a `time_s,heading_deg` table for replays
//! (`heading.csv` in a scene directory, or `array.heading_input.file`) and NMEA 0183 heading
//! sentences (HDT, HDG, THS) over UDP for live runs. Headings are those of the array frame's +y
//! axis, degrees clockwise from north, in [0, 360).

use std::net::UdpSocket;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};
pub use crate::math::geo::{turn_deg, wrap_deg};

/// Largest heading file read (bytes): a day of rows at 10 Hz is about 20 MB.
pub const MAX_HEADING_FILE_BYTES: u64 = 64 << 20;

/// Headings over time, sorted by time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeadingTable {
    rows: Vec<(f64, f64)>,
}

impl HeadingTable {
    /// Rows of (seconds from the start, heading in degrees), in time order.
    pub fn from_rows(rows: Vec<(f64, f64)>) -> Self {
        Self { rows }
    }

    pub fn rows(&self) -> &[(f64, f64)] {
        &self.rows
    }

    /// Read a `time_s,heading_deg` file (a header line is skipped).
    pub fn load(path: &Path) -> Result<Self> {
        let fix = "heading.csv holds rows time_s,heading_deg (seconds from the recording's start, increasing; degrees clockwise from north)";
        let len = std::fs::metadata(path).at(path)?.len();
        if len > MAX_HEADING_FILE_BYTES {
            return Err(Error::Scene {
                path: path.into(),
                problem: format!("{len} bytes (at most {MAX_HEADING_FILE_BYTES})"),
                fix: "thin the heading rows to 10 per second or fewer".into(),
            });
        }
        let text = std::fs::read_to_string(path).at(path)?;
        Self::parse(&text).map_err(|(line, problem)| Error::Scene {
            path: path.into(),
            problem: format!("line {line}: {problem}"),
            fix: fix.into(),
        })
    }

    pub fn parse(text: &str) -> std::result::Result<Self, (usize, String)> {
        let mut rows: Vec<(f64, f64)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || (i == 0 && line.chars().next().is_some_and(char::is_alphabetic)) {
                continue;
            }
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            if f.len() != 2 {
                return Err((i + 1, format!("{} fields, expected 2", f.len())));
            }
            let num = |s: &str| match s.parse::<f64>() {
                Ok(v) if v.is_finite() && v.abs() <= 1e9 => Ok(v),
                Ok(_) => Err((i + 1, format!("`{s}` is not a finite number within 1e9"))),
                Err(e) => Err((i + 1, format!("`{s}`: {e}"))),
            };
            let (t, h) = (num(f[0])?, num(f[1])?);
            if rows.last().is_some_and(|r| t <= r.0) {
                return Err((i + 1, format!("time {t} s does not follow the row before")));
            }
            rows.push((t, wrap_deg(h)));
        }
        if rows.is_empty() {
            return Err((1, "no rows".into()));
        }
        Ok(Self { rows })
    }

    /// The heading at `t` (s): interpolated the short way round between rows, held before the
    /// first row and after the last.
    pub fn at(&self, t: f64) -> Option<f64> {
        let i = self.rows.partition_point(|r| r.0 <= t);
        if i == 0 {
            return self.rows.first().map(|r| r.1);
        }
        if i == self.rows.len() {
            return self.rows.last().map(|r| r.1);
        }
        let (t0, h0) = self.rows[i - 1];
        let (t1, h1) = self.rows[i];
        let a = (t - t0) / (t1 - t0);
        Some(wrap_deg(h0 + a * turn_deg(h0, h1)))
    }

    /// The rows as `heading.csv` text.
    pub fn to_csv(&self) -> String {
        let mut s = String::from("time_s,heading_deg\n");
        for (t, h) in &self.rows {
            s += &format!("{t:.4},{h:.4}\n");
        }
        s
    }
}

/// A true heading from one NMEA 0183 sentence: `$--HDT,h,T`, `$--THS,h,A` (A autonomous, E
/// estimated; M, S and V are refused), or `$--HDG,h,dev,E|W,var,E|W` (magnetic, corrected by
/// its deviation and variation; without a variation it is no true heading and is refused). A
/// checksum, when present, must match. None for anything else.
pub fn parse_nmea_heading(line: &str) -> Option<f64> {
    let line = line.trim();
    let body = line.strip_prefix('$').or_else(|| line.strip_prefix('!'))?;
    let (body, sum) = match body.split_once('*') {
        Some((b, s)) => (b, Some(s)),
        None => (body, None),
    };
    if let Some(s) = sum {
        let want = u8::from_str_radix(s.get(..2)?, 16).ok()?;
        if body.bytes().fold(0u8, |a, b| a ^ b) != want {
            return None;
        }
    }
    let f: Vec<&str> = body.split(',').collect();
    let kind = f.first().filter(|k| k.len() == 5)?.get(2..)?;
    let num = |i: usize| {
        f.get(i)
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|v| v.is_finite())
    };
    let signed = |i: usize| {
        let v = num(i)?;
        match f.get(i + 1).copied() {
            Some("E") => Some(v),
            Some("W") => Some(-v),
            _ => None,
        }
    };
    let h = match kind {
        "HDT" => (f.get(2).copied() == Some("T")).then(|| num(1))??,
        "THS" => matches!(f.get(2).copied(), Some("A" | "E")).then(|| num(1))??,
        "HDG" => num(1)? + signed(2).unwrap_or(0.0) + signed(4)?,
        _ => return None,
    };
    (-360.0..=720.0).contains(&h).then(|| wrap_deg(h))
}

/// Live NMEA heading sentences over UDP, received on a thread of their own.
pub struct HeadingListener {
    /// The latest heading received, with when it came.
    latest: Arc<Mutex<Option<(f64, Instant)>>>,
    /// Datagram lines that held no usable heading sentence.
    pub malformed: Arc<AtomicU64>,
    pub received: Arc<AtomicU64>,
    stale: Duration,
    addr: std::net::SocketAddr,
}

impl HeadingListener {
    /// Bind `addr` and start receiving. A heading older than `stale_s` is not used.
    pub fn start(addr: &str, stale_s: f64) -> Result<Self> {
        let sock = UdpSocket::bind(addr).map_err(|e| {
            Error::Config(crate::error::ConfigError::new(
                "the configuration",
                "array.heading_input.udp_listen",
                format!("cannot listen on {addr}: {e}"),
                "use a free local address and port, e.g. \"0.0.0.0:10110\"",
            ))
        })?;
        let bound = sock.local_addr().at(Path::new(addr))?;
        let latest = Arc::new(Mutex::new(None));
        let malformed = Arc::new(AtomicU64::new(0));
        let received = Arc::new(AtomicU64::new(0));
        let (l, m, r) = (latest.clone(), malformed.clone(), received.clone());
        std::thread::Builder::new()
            .name("heading-udp".into())
            .spawn(move || receive(sock, l, m, r))
            .at(Path::new(addr))?;
        log::info!("heading: listening for NMEA HDT/HDG/THS on udp {bound}");
        Ok(Self {
            latest,
            malformed,
            received,
            stale: Duration::from_secs_f64(stale_s),
            addr: bound,
        })
    }

    /// The address bound (with the port the system chose for port 0).
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// The latest heading, unless it is older than the staleness limit.
    pub fn current(&self) -> Option<f64> {
        // A poisoned lock only means the receiving thread panicked mid-store; its value is
        // still a plain number.
        let g = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        g.filter(|(_, at)| at.elapsed() <= self.stale)
            .map(|(h, _)| h)
    }
}

/// The receiving loop: each datagram's lines, the last good heading kept. Ends when the socket
/// fails for good.
fn receive(
    sock: UdpSocket,
    latest: Arc<Mutex<Option<(f64, Instant)>>>,
    malformed: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
) {
    let mut buf = [0u8; 2048];
    loop {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::error!("heading: the UDP socket failed ({e}); no more headings");
                return;
            }
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match parse_nmea_heading(line) {
                Some(h) => {
                    received.fetch_add(1, Ordering::Relaxed);
                    let mut g = latest.lock().unwrap_or_else(|e| e.into_inner());
                    *g = Some((h, Instant::now()));
                }
                None => {
                    if malformed.fetch_add(1, Ordering::Relaxed) == 0 {
                        log::warn!(
                            "heading: ignoring {line:?} (not an HDT, HDG or THS sentence with a valid checksum); later ones are counted"
                        );
                    }
                }
            }
        }
    }
}

/// Where a pipeline's headings come from.
pub enum HeadingFeed {
    Table(HeadingTable),
    Live(HeadingListener),
}

impl HeadingFeed {
    /// The heading for the frame centred at `t_s` (seconds from the stream's start); None
    /// when a live heading is missing or stale.
    pub fn at(&self, t_s: f64) -> Option<f64> {
        match self {
            Self::Table(t) => t.at(t_s),
            Self::Live(l) => l.current(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_interpolates_the_short_way_round() {
        let t = HeadingTable::parse("time_s,heading_deg\n0,350\n10,10\n20,90\n").unwrap();
        assert_eq!(t.at(-1.0), Some(350.0));
        assert!((t.at(5.0).unwrap() - 0.0).abs() < 1e-9);
        assert!((t.at(2.5).unwrap() - 355.0).abs() < 1e-9);
        assert!((t.at(15.0).unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(t.at(99.0), Some(90.0));
        let back = HeadingTable::parse(&t.to_csv()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn a_bad_table_names_its_line() {
        for (text, line, what) in [
            ("0,10\n0,20\n", 2, "does not follow"),
            ("0,10\n1,nan\n", 2, "not a finite"),
            ("0,10,3\n", 1, "3 fields"),
            ("time_s,heading_deg\n", 1, "no rows"),
            ("0,ten\n", 1, "`ten`"),
        ] {
            let (l, p) = HeadingTable::parse(text).unwrap_err();
            assert_eq!(l, line, "{text:?}: {p}");
            assert!(p.contains(what), "{text:?}: {p}");
        }
    }

    #[test]
    fn turns_take_the_short_way() {
        assert_eq!(turn_deg(350.0, 10.0), 20.0);
        assert_eq!(turn_deg(10.0, 350.0), -20.0);
        assert_eq!(turn_deg(0.0, 180.0), 180.0);
        assert_eq!(wrap_deg(-90.0), 270.0);
        assert_eq!(wrap_deg(720.0), 0.0);
    }

    /// An NMEA sentence with its checksum.
    fn nmea(body: &str) -> String {
        let sum = body.bytes().fold(0u8, |a, b| a ^ b);
        format!("${body}*{sum:02X}")
    }

    #[test]
    fn nmea_headings_are_read_and_checked() {
        assert_eq!(parse_nmea_heading(&nmea("GPHDT,274.07,T")), Some(274.07));
        assert_eq!(parse_nmea_heading("$HEHDT,12.5,T"), Some(12.5));
        assert_eq!(parse_nmea_heading(&nmea("INTHS,359.5,A")), Some(359.5));
        // Magnetic 98.3, deviation 1.2 W, variation 5.0 E: true 102.1.
        let h = parse_nmea_heading(&nmea("HCHDG,98.3,1.2,W,5.0,E")).unwrap();
        assert!((h - 102.1).abs() < 1e-9, "{h}");
        let h = parse_nmea_heading(&nmea("HCHDG,2.0,,,5.0,W")).unwrap();
        assert!((h - 357.0).abs() < 1e-9, "{h}");
        // No variation: not a true heading.
        assert_eq!(parse_nmea_heading(&nmea("HCHDG,98.3,,,,")), None);
        // A wrong checksum, a simulated or invalid THS, other sentences, junk.
        assert_eq!(parse_nmea_heading("$GPHDT,274.07,T*00"), None);
        assert_eq!(parse_nmea_heading(&nmea("INTHS,10.0,V")), None);
        assert_eq!(parse_nmea_heading(&nmea("GPGGA,1,2,3")), None);
        assert_eq!(parse_nmea_heading(&nmea("GPHDT,,T")), None);
        assert_eq!(parse_nmea_heading(&nmea("GPHDT,nan,T")), None);
        assert_eq!(parse_nmea_heading("HDT"), None);
        assert_eq!(parse_nmea_heading("$*"), None);
        assert_eq!(parse_nmea_heading("$GPHDT,10,T*Z"), None);
    }

    #[test]
    fn the_listener_keeps_the_latest_heading_and_counts_junk() {
        let l = HeadingListener::start("127.0.0.1:0", 5.0).unwrap();
        assert_eq!(l.current(), None);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let body = format!("junk\n{}\n{}\n", nmea("GPHDT,10.0,T"), nmea("GPHDT,20.0,T"));
        tx.send_to(body.as_bytes(), l.local_addr()).unwrap();
        let start = Instant::now();
        while l.received.load(Ordering::Relaxed) < 2 && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(l.current(), Some(20.0));
        assert_eq!(l.malformed.load(Ordering::Relaxed), 1);
        let feed = HeadingFeed::Live(l);
        assert_eq!(feed.at(123.0), Some(20.0));
    }

    #[test]
    fn a_stale_heading_is_not_used() {
        let l = HeadingListener::start("127.0.0.1:0", 0.05).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(nmea("GPHDT,10.0,T").as_bytes(), l.local_addr())
            .unwrap();
        let start = Instant::now();
        while l.received.load(Ordering::Relaxed) < 1 && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(l.current(), None);
    }
}
