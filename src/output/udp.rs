//! One JSON object, or one message's NMEA sentences, per UDP datagram (NMEA over UDP is what
//! OpenCPN and most chart plotters listen for, conventionally on port 10110).
//!
//! The socket is connected to the receiver so that ICMP "port unreachable" comes back as an
//! error on a later send: that error is counted and the next message is tried as usual, so a
//! receiver that starts late, restarts or disappears never stops anything.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};

use crate::error::Result;
use crate::output::nmea::SentenceKind;
use crate::output::{Message, SerialFormat, Sink, open_error};

pub struct UdpSink {
    socket: UdpSocket,
    peer: SocketAddr,
    format: SerialFormat,
    sentences: Vec<SentenceKind>,
    /// Messages the last error lost (see [`Sink::lost_by`]).
    lost: u64,
}

impl UdpSink {
    pub fn open(address: &str) -> Result<Self> {
        let name = format!("udp:{address}");
        let peer = address
            .to_socket_addrs()
            .map_err(|e| {
                open_error(
                    &name,
                    format!("cannot resolve `{address}`: {e}"),
                    "give host:port with a resolvable host or an IP address",
                )
            })?
            .next()
            .ok_or_else(|| {
                open_error(
                    &name,
                    format!("`{address}` resolves to no address"),
                    "give host:port with an IP address",
                )
            })?;
        let bind: SocketAddr = if peer.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            ([0u16; 8], 0).into()
        };
        let socket = UdpSocket::bind(bind).map_err(|e| {
            open_error(
                &name,
                format!("cannot open a UDP socket: {e}"),
                "check the network configuration",
            )
        })?;
        socket.connect(peer).map_err(|e| {
            open_error(
                &name,
                format!("cannot address {peer}: {e}"),
                "check the route to the receiver",
            )
        })?;
        // A send must never wait for the network.
        socket.set_nonblocking(true).map_err(|e| {
            open_error(
                &name,
                format!("cannot make the socket non-blocking: {e}"),
                "report this as a bug",
            )
        })?;
        Ok(Self {
            socket,
            peer,
            format: SerialFormat::Jsonl,
            sentences: Vec::new(),
            lost: 1,
        })
    }

    /// Send `format`: JSON, or the NMEA sentences of `sentences`.
    pub fn with_format(mut self, format: SerialFormat, sentences: &[SentenceKind]) -> Self {
        self.format = format;
        self.sentences = sentences.to_vec();
        self
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
}

impl Sink for UdpSink {
    /// "Connection refused" is the ICMP reply to an earlier datagram, which was counted as
    /// sent but never arrived, and this send did not go out: two lost. (While the peer is away
    /// sends fail and succeed alternately, so this counts every message.)
    fn send(&mut self, msg: &Message) -> std::io::Result<()> {
        let r = match self.format {
            SerialFormat::Jsonl => self.socket.send(msg.json.as_bytes()).map(|_| ()),
            SerialFormat::Nmea => {
                let text: String = msg.nmea.of(&self.sentences).collect();
                if text.is_empty() {
                    return Ok(());
                }
                self.socket.send(text.as_bytes()).map(|_| ())
            }
        };
        if let Err(e) = &r {
            self.lost = if e.kind() == std::io::ErrorKind::ConnectionRefused {
                2
            } else {
                1
            };
        }
        r
    }

    /// A refusal still pending (the last datagram's ICMP reply, with no send after it to
    /// report it) is that datagram lost.
    fn flush(&mut self) -> std::io::Result<()> {
        match self.socket.take_error() {
            Ok(Some(e)) => {
                self.lost = 1;
                Err(e)
            }
            _ => Ok(()),
        }
    }

    fn lost_by(&mut self, _e: &std::io::Error) -> u64 {
        self.lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::MessageKind;
    use std::time::Duration;

    #[test]
    fn datagrams_arrive_and_an_absent_peer_only_counts_errors() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let addr = rx.local_addr().unwrap().to_string();
        let mut sink = UdpSink::open(&addr).unwrap();
        let m = Message::json_only(MessageKind::Track, Some(1), 0.0, "{\"a\":1}".into());
        sink.send(&m).unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"{\"a\":1}");
        drop(rx);
        // Nobody listens now: sends may fail (ICMP) but never panic or block.
        for _ in 0..20 {
            let _ = sink.send(&m);
        }
    }

    /// While the peer is away every message is counted as dropped, not every other one
    /// (reliability issue): the ICMP refusal of each datagram is reported by the next send, or
    /// by the flush for the last.
    #[test]
    fn every_message_to_an_absent_peer_is_counted() {
        let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = gone.local_addr().unwrap().to_string();
        drop(gone);
        let sink = UdpSink::open(&addr).unwrap();
        let mut r =
            crate::output::runner::SinkRunner::spawn("udp".into(), Box::new(sink), true, None);
        let n: u32 = 40;
        for i in 0..n {
            let m = std::sync::Arc::new(Message::json_only(
                MessageKind::Track,
                Some(1),
                f64::from(i),
                "{\"a\":1}".into(),
            ));
            r.send(&m);
            // Time for the ICMP reply to come back before the next send.
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(20));
        r.flush(Duration::from_secs(2));
        assert_eq!(r.stats.drops(), u64::from(n));
    }

    #[test]
    fn unresolvable_address_names_the_output() {
        let e = UdpSink::open("no-such-host.invalid:5005")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("udp:no-such-host.invalid:5005"), "{e}");
    }
}
