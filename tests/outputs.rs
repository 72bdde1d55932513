//! Outputs that survive faults, without hardware: a serial port on a pseudo-terminal that is
//! unplugged and plugged back mid-run, and a UDP peer that is absent for a while.

mod common;

use std::net::UdpSocket;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sonotrack::output::SerialFormat;
use sonotrack::output::serial::SerialSink;
use sonotrack::output::udp::UdpSink;
use sonotrack::output::{Message, MessageKind, SinkRunner};

fn msg(i: u64) -> Arc<Message> {
    Arc::new(Message::json_only(
        MessageKind::Track,
        Some(1),
        i as f64,
        format!("{{\"i\":{i}}}"),
    ))
}

/// A pseudo-terminal pair: the master (our end) and the slave's path.
fn pty() -> (OwnedFd, String) {
    let (mut master, mut slave) = (0, 0);
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: openpty writes two descriptors and a NUL-terminated name into the buffers given
    // (128 bytes is more than any pty path); no termios or window size is passed.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            name.as_mut_ptr(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: the name buffer was NUL-terminated by openpty.
    let path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    // The slave end is opened by the sink itself; ours is closed.
    // SAFETY: both descriptors were just returned by openpty and are owned here.
    unsafe {
        libc::close(slave);
        (OwnedFd::from_raw_fd(master), path)
    }
}

/// Read what arrives on a pty master within `wait`.
fn read_master(fd: &OwnedFd, wait: Duration) -> String {
    use std::os::fd::AsRawFd;
    let mut out = Vec::new();
    let end = Instant::now() + wait;
    while Instant::now() < end {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, 50) };
        if n > 0 && p.revents & libc::POLLIN != 0 {
            let mut buf = [0u8; 4096];
            // SAFETY: reading into a local buffer of the given length.
            let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if r > 0 {
                out.extend_from_slice(&buf[..r as usize]);
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn serial_port_unplugged_and_replugged_mid_run() {
    let dir = common::tmp_dir("serial-pty");
    let link = dir.join("ttySONOTRACK");
    let (m1, s1) = pty();
    std::os::unix::fs::symlink(&s1, &link).unwrap();
    let sink = SerialSink::new(link.to_str().unwrap(), 115_200, SerialFormat::Jsonl, &[]);
    let mut runner = SinkRunner::spawn("serial:test".into(), Box::new(sink), false, None);
    for i in 0..5 {
        runner.send(&msg(i));
    }
    let got = read_master(&m1, Duration::from_millis(800));
    assert!(
        got.contains("{\"i\":0}") && got.contains("{\"i\":4}"),
        "{got:?}"
    );
    // Unplug: the far end goes away and the device node with it.
    drop(m1);
    std::fs::remove_file(&link).unwrap();
    let t = Instant::now();
    for i in 5..40 {
        runner.send(&msg(i));
        std::thread::sleep(Duration::from_millis(20));
    }
    // Sending never blocked the caller while the port was gone.
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(runner.stats.write_errors.load(Ordering::Relaxed) > 0);
    // Replug: a new device at the same path; the sink reopens it after its backoff.
    let (m2, s2) = pty();
    std::os::unix::fs::symlink(&s2, &link).unwrap();
    let mut got2 = String::new();
    for i in 40..200 {
        runner.send(&msg(i));
        got2.push_str(&read_master(&m2, Duration::from_millis(50)));
        if got2.contains("\"i\":") {
            break;
        }
    }
    assert!(
        got2.contains("\"i\":"),
        "nothing after the replug: {got2:?}"
    );
    let errors = runner.stats.write_errors.load(Ordering::Relaxed);
    let sent = runner.stats.sent.load(Ordering::Relaxed);
    eprintln!("serial: {sent} sent, {errors} dropped while unplugged");
    assert!(sent >= 6);
}

#[test]
fn udp_peer_absent_for_a_while() {
    // A port nobody listens on (bound, then released).
    let port = {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let sink = UdpSink::open(&addr).unwrap();
    let mut runner = SinkRunner::spawn(format!("udp:{addr}"), Box::new(sink), false, None);
    let t = Instant::now();
    for i in 0..50 {
        runner.send(&msg(i));
        std::thread::sleep(Duration::from_millis(2));
    }
    runner.flush(Duration::from_secs(2));
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "sending to an absent peer blocked"
    );
    // The peer comes up: datagrams arrive again.
    let rx = UdpSocket::bind(&addr).unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = 0;
    let mut buf = [0u8; 256];
    for i in 50..100 {
        runner.send(&msg(i));
        if rx.recv(&mut buf).is_ok() {
            got += 1;
        }
    }
    assert!(got > 10, "only {got} datagrams after the peer came back");
    eprintln!(
        "udp: {} sent, {} failed while the peer was away",
        runner.stats.sent.load(Ordering::Relaxed),
        runner.stats.write_errors.load(Ordering::Relaxed)
    );
}
