//! A Mosquitto broker on a free loopback port and an MQTT subscriber that records what it
//! gets, for the MQTT output and fusion tests.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rumqttc::{Client, Event, MqttOptions, Packet, QoS};

/// Whether `mosquitto` can run here. CI installs it and sets SONOTRACK_REQUIRE_MOSQUITTO=1, so
/// there its absence fails the test; elsewhere the test says it is skipped.
pub fn mosquitto_available() -> bool {
    let ok = Command::new("mosquitto")
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ok {
        assert!(
            std::env::var_os("SONOTRACK_REQUIRE_MOSQUITTO").is_none(),
            "mosquitto is not installed (apt-get install mosquitto)"
        );
        eprintln!("skipped: mosquitto is not installed (apt-get install mosquitto)");
    }
    ok
}

/// A free loopback TCP port (bound, noted, released).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A running broker; killed when dropped.
pub struct Broker {
    pub port: u16,
    dir: PathBuf,
    extra: String,
    child: Option<Child>,
}

impl Broker {
    /// Start Mosquitto on a free port with persistence under `dir`, anonymous clients allowed
    /// unless `extra` (more mosquitto.conf lines) says otherwise.
    pub fn start(dir: &Path, extra: &str) -> Self {
        let mut b = Self {
            port: free_port(),
            dir: dir.to_path_buf(),
            extra: extra.to_string(),
            child: None,
        };
        b.restart();
        b
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Start it (again, on the same port and persistence file).
    pub fn restart(&mut self) {
        let anon = if self.extra.contains("allow_anonymous") {
            ""
        } else {
            "allow_anonymous true\n"
        };
        let conf = self.dir.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "listener {} 127.0.0.1\n{anon}persistence true\npersistence_location {}/\nlog_dest stderr\n{}\n",
                self.port,
                self.dir.display(),
                self.extra
            ),
        )
        .unwrap();
        let child = Command::new("mosquitto")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("mosquitto.log")).unwrap())
            .spawn()
            .expect("mosquitto starts");
        self.child = Some(child);
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "mosquitto did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop it as a service manager would (SIGTERM: it saves its sessions), and wait.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child by pid.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let _ = c.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A subscriber that records every (topic, payload) it receives, with a persistent session
/// (QoS 1), reconnecting as needed.
pub struct Subscriber {
    pub got: Arc<Mutex<Vec<(String, String)>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    pub subscribed: Arc<AtomicBool>,
}

impl Subscriber {
    pub fn start(address: &str, filter: &str, id: &str) -> Self {
        Self::start_with(address, filter, id, None)
    }

    pub fn start_with(address: &str, filter: &str, id: &str, login: Option<(&str, &str)>) -> Self {
        let (host, port) = address.rsplit_once(':').unwrap();
        let mut o = MqttOptions::new(id, host, port.parse::<u16>().unwrap());
        o.set_clean_session(false);
        o.set_keep_alive(Duration::from_secs(5));
        if let Some((u, p)) = login {
            o.set_credentials(u, p);
        }
        let (client, mut conn) = Client::new(o, 100);
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let subscribed = Arc::new(AtomicBool::new(false));
        let handle = {
            let (got, stop, subscribed) = (got.clone(), stop.clone(), subscribed.clone());
            let filter = filter.to_string();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match conn.recv_timeout(Duration::from_millis(100)) {
                        Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => {
                            client.subscribe(&filter, QoS::AtLeastOnce).unwrap();
                        }
                        Ok(Ok(Event::Incoming(Packet::SubAck(_)))) => {
                            subscribed.store(true, Ordering::Relaxed);
                        }
                        Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                            got.lock().unwrap().push((
                                p.topic.clone(),
                                String::from_utf8_lossy(&p.payload).into_owned(),
                            ));
                        }
                        Ok(Ok(_)) | Err(_) => {}
                        Ok(Err(_)) => std::thread::sleep(Duration::from_millis(100)),
                    }
                }
            })
        };
        let s = Self {
            got,
            stop,
            handle: Some(handle),
            subscribed,
        };
        let start = Instant::now();
        while !s.subscribed.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    /// Payloads received on topics ending in `suffix`.
    pub fn on(&self, suffix: &str) -> Vec<String> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t.ends_with(suffix))
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Wait until `pred` holds of what was received, at most `wait`.
    pub fn wait_for(&self, wait: Duration, pred: impl Fn(&[(String, String)]) -> bool) -> bool {
        let start = Instant::now();
        loop {
            if pred(&self.got.lock().unwrap()) {
                return true;
            }
            if start.elapsed() > wait {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Publish each payload (QoS 1, in order) to `topic` and wait until the broker has them all.
#[allow(dead_code)]
pub fn publish(address: &str, id: &str, topic: &str, payloads: &[Vec<u8>]) {
    let (host, port) = address.rsplit_once(':').unwrap();
    let mut o = MqttOptions::new(id, host, port.parse::<u16>().unwrap());
    o.set_max_packet_size(8 << 20, 8 << 20);
    let (client, mut conn) = Client::new(o, 10);
    for p in payloads {
        client
            .publish(topic, QoS::AtLeastOnce, false, p.clone())
            .unwrap();
    }
    let mut acked = 0;
    let start = Instant::now();
    while acked < payloads.len() && start.elapsed() < Duration::from_secs(10) {
        if let Ok(Ok(Event::Incoming(Packet::PubAck(_)))) =
            conn.recv_timeout(Duration::from_millis(100))
        {
            acked += 1;
        }
    }
    assert_eq!(acked, payloads.len(), "the broker acknowledged them");
    let _ = client.disconnect();
}
