//! `sonotrack bench --what fusion --broker HOST:PORT`: the fusion service under load through a
//! real broker. N simulated nodes publish M track messages each at R Hz (every node hears the
//! same M sources, as arrays covering one site do); `sonotrack fuse` runs as a child process
//! with a UDP output that this bench receives. Measured: the fused output's latency (receipt
//! minus the fusion time the message carries, less the configured `delay_s`: transport,
//! queueing and fusion), and the service's CPU time (its own rusage).

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use rumqttc::{Client, MqttOptions, QoS};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::fusion::report::parse_rfc3339;
use crate::output::rfc3339;

/// The load.
#[derive(Debug, Clone, Serialize)]
pub struct FusionLoad {
    pub nodes: usize,
    pub tracks: usize,
    pub rate_hz: f64,
    pub seconds: f64,
}

/// What was measured.
#[derive(Debug, Clone, Serialize)]
pub struct FusionBench {
    pub load: FusionLoad,
    pub reports_sent: u64,
    pub fused_messages: u64,
    /// Fused-output latency beyond `delay_s`, ms.
    pub latency_median_ms: f64,
    pub latency_p99_ms: f64,
    pub delay_s: f64,
    /// The service's CPU time over its run time (100 % is one core).
    pub cpu_pct: f64,
    pub fused_tracks_median: f64,
}

impl std::fmt::Display for FusionBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = &self.load;
        write!(
            f,
            "fusion: {} nodes x {} tracks at {} Hz for {} s through the broker: {} reports in, {} fused messages out ({} fused tracks, median a step)\n  fused-output latency beyond delay_s = {} s: median {:.1} ms, p99 {:.1} ms; the service's CPU {:.1} % of one core",
            l.nodes,
            l.tracks,
            l.rate_hz,
            l.seconds,
            self.reports_sent,
            self.fused_messages,
            self.fused_tracks_median,
            self.delay_s,
            self.latency_median_ms,
            self.latency_p99_ms,
            self.cpu_pct
        )
    }
}

const DELAY_S: f64 = 0.3;

/// Run the load against `broker` (a running broker, host:port).
pub fn run(broker: &str, load: &FusionLoad) -> Result<FusionBench> {
    let (host, port) = broker
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| Error::Usage(format!("--broker {broker}: give host:port")))?;
    let rx = UdpSocket::bind("127.0.0.1:0").map_err(io)?;
    rx.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(io)?;
    let udp = rx.local_addr().map_err(io)?;
    let dir = std::env::temp_dir().join(format!("sonotrack-bench-fusion-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io)?;
    let cfg = dir.join("fuse.toml");
    std::fs::write(
        &cfg,
        format!(
            "site = \"bench\"\nprefix = \"sonotrack-bench\"\nbroker = {{ address = \"{broker}\" }}\n\
             rate_hz = 10\ndelay_s = {DELAY_S}\nstatus_interval_s = 5\n\
             [origin]\nlatitude_deg = 53.5\nlongitude_deg = 9.9\n\
             [[output.sink]]\nkind = \"udp\"\naddress = \"{udp}\"\n"
        ),
    )
    .map_err(io)?;
    let exe = std::env::current_exe().map_err(io)?;
    let run_s = load.seconds + 2.0;
    let mut child = std::process::Command::new(exe)
        .args(["-q", "fuse", "--config"])
        .arg(&cfg)
        .args(["--seconds", &format!("{run_s}")])
        .spawn()
        .map_err(io)?;
    // (Let it connect and subscribe.)
    std::thread::sleep(Duration::from_millis(700));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let publishers: Vec<_> = (0..load.nodes)
        .map(|n| {
            let (host, stop, sent, load) = (host.clone(), stop.clone(), sent.clone(), load.clone());
            std::thread::spawn(move || publish(&host, port, n, &load, &stop, &sent))
        })
        .collect();
    let mut latencies = Vec::new();
    let mut per_step: std::collections::BTreeMap<u64, u64> = Default::default();
    let mut buf = vec![0u8; 65_536];
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < load.seconds {
        let Ok(n) = rx.recv(&mut buf) else { continue };
        let now = now_s();
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&buf[..n]) else {
            continue;
        };
        if v["type"] != "track" {
            continue;
        }
        if let Some(w) = v["wall"].as_str().and_then(parse_rfc3339) {
            latencies.push((now - w - DELAY_S) * 1e3);
        }
        if let Some(seq) = v["seq"].as_u64() {
            *per_step.entry(seq).or_default() += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for p in publishers {
        let _ = p.join();
    }
    let cpu = wait_cpu(&mut child)?;
    let _ = std::fs::remove_dir_all(&dir);
    latencies.sort_by(f64::total_cmp);
    let q = |p: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    let mut counts: Vec<u64> = per_step.values().copied().collect();
    counts.sort_unstable();
    Ok(FusionBench {
        load: load.clone(),
        reports_sent: sent.load(Ordering::Relaxed),
        fused_messages: latencies.len() as u64,
        latency_median_ms: q(0.5),
        latency_p99_ms: q(0.99),
        delay_s: DELAY_S,
        cpu_pct: 100.0 * cpu / run_s,
        fused_tracks_median: counts.get(counts.len() / 2).copied().unwrap_or(0) as f64,
    })
}

fn io(e: std::io::Error) -> Error {
    Error::Usage(format!("fusion bench: {e}"))
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One node: `load.tracks` sources on circles about their own centres, reported at
/// `load.rate_hz` with the wall time of the report.
fn publish(
    host: &str,
    port: u16,
    node: usize,
    load: &FusionLoad,
    stop: &Arc<AtomicBool>,
    sent: &AtomicU64,
) {
    let mut o = MqttOptions::new(format!("bench-node-{node}"), host, port);
    o.set_keep_alive(Duration::from_secs(5));
    let (client, mut conn) = Client::new(o, 10_000);
    let halt = stop.clone();
    let driver = std::thread::spawn(move || {
        while !halt.load(Ordering::Relaxed) {
            if let Ok(Err(_)) = conn.recv_timeout(Duration::from_millis(100)) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    let topic = format!("sonotrack-bench/bench/node{node}/tracks");
    let period = Duration::from_secs_f64(1.0 / load.rate_hz);
    let mut next = Instant::now();
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let t = start.elapsed().as_secs_f64();
        let wall = rfc3339(SystemTime::now());
        for k in 0..load.tracks {
            // Sources 40 m apart, each 5 m off its centre, a turn in 30 s.
            let a = t * std::f64::consts::TAU / 30.0 + k as f64;
            let (e, n) = (40.0 * k as f64 + 5.0 * a.cos(), 5.0 * a.sin());
            let (lat, lon) = (
                53.5 + n / 111_200.0,
                9.9 + e / (111_200.0 * 53.5f64.to_radians().cos()),
            );
            let (ve, vn) = (-5.0 * a.sin() * 0.21, 5.0 * a.cos() * 0.21);
            let json = format!(
                "{{\"type\":\"track\",\"schema\":1,\"t\":{t:.3},\"t_frame\":{t:.3},\"wall\":\"{wall}\",\"id\":{k},\"status\":\"confirmed\",\"vel_std\":[0.05,0.05,0.05],\"geo\":{{\"lat_deg\":{lat:.8},\"lon_deg\":{lon:.8},\"depth_m\":5.0,\"bearing_deg\":0,\"enu_vel_m_s\":[{ve:.4},{vn:.4},0.0],\"enu_cov\":[0.01,0,0,0.01,0,0.04]}}}}"
            );
            if client
                .try_publish(topic.as_str(), QoS::AtLeastOnce, false, json)
                .is_ok()
            {
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        next += period;
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    let _ = client.try_disconnect();
    drop(client);
    let _ = driver.join();
}

/// Wait for the child and return its CPU seconds (user + system) from its rusage.
fn wait_cpu(child: &mut std::process::Child) -> Result<f64> {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child by pid; `status` and `usage` are valid for writes.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if r != pid {
        return Err(io(std::io::Error::last_os_error()));
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Ok(secs(usage.ru_utime) + secs(usage.ru_stime))
}
