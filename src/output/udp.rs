//! One JSON object per UDP datagram.
//!
//! The socket is connected to the receiver so that ICMP "port unreachable" comes back as an
//! error on a later send: that error is counted and the next message is tried as usual, so a
//! receiver that starts late, restarts or disappears never stops anything.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};

use crate::error::Result;
use crate::output::{Message, Sink, open_error};

pub struct UdpSink {
    socket: UdpSocket,
    peer: SocketAddr,
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
        Ok(Self { socket, peer })
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
}

impl Sink for UdpSink {
    fn send(&mut self, msg: &Message) -> std::io::Result<()> {
        self.socket.send(msg.json.as_bytes()).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn datagrams_arrive_and_an_absent_peer_only_counts_errors() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let addr = rx.local_addr().unwrap().to_string();
        let mut sink = UdpSink::open(&addr).unwrap();
        let m = Message {
            is_status: false,
            track_id: Some(1),
            t_s: 0.0,
            json: "{\"a\":1}".into(),
            nmea: None,
            ready: None,
        };
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

    #[test]
    fn unresolvable_address_names_the_output() {
        let e = UdpSink::open("no-such-host.invalid:5005")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("udp:no-such-host.invalid:5005"), "{e}");
    }
}
