//! An MQTT broker connection as the configuration describes it: address, client id,
//! credentials and TLS. Shared by the node's MQTT output and `sonotrack fuse`.
//!
//! TLS is rustls with the `ring` provider (no system OpenSSL, so the board build stays static
//! apart from glibc). Credentials are only ever sent as configured: a broker that refuses them
//! is an error naming the broker and the fix, retried with backoff, never a fallback to an
//! anonymous connection.

use std::sync::Arc;
use std::time::Duration;

use rumqttc::{MqttOptions, TlsConfiguration, Transport};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

/// Where a broker is and how to log in to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerConfig {
    /// `host:port` of the broker (1883 plain, 8883 with TLS, by convention).
    pub address: String,
    /// The MQTT client id (the broker keeps the persistent session under it). Default: derived
    /// from the node's site and name, or `sonotrack-fuse-<site>` for the fusion service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The password, inline (prefer `password_file`, which keeps it out of the configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// A file whose first line is the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<String>,
    /// TLS: the PEM file of the certificate authorities the broker's certificate must chain
    /// to. Given, the connection is TLS and the broker is verified against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// TLS client authentication: a PEM certificate and its PEM private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_file: Option<String>,
    /// Seconds between keep-alive pings; the broker declares the client gone (and sends its
    /// last will) after 1.5 times this without traffic.
    #[serde(default = "default_keep_alive")]
    pub keep_alive_s: f64,
}

fn default_keep_alive() -> f64 {
    5.0
}

/// A configuration problem: the key (relative to the broker's table), what is wrong, the fix.
pub type Problem = (&'static str, String, &'static str);

/// Most bytes of a topic level we build (site and node names).
const MAX_LEVEL: usize = 64;

/// Largest MQTT packet a client sends or takes (bytes): a larger one arriving costs the
/// connection (the client refuses it before reading it).
pub const MAX_PACKET_BYTES: usize = 1 << 20;

/// A topic level a node or site may be called: 1-64 letters, digits, `-`, `_` or `.`. No
/// wildcards, separators or control characters can reach a topic this way.
pub fn topic_level_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LEVEL
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A topic prefix: levels of [`topic_level_ok`] joined by `/`.
pub fn topic_prefix_ok(s: &str) -> bool {
    s.split('/').all(topic_level_ok)
}

impl BrokerConfig {
    /// A plain connection to `address` with no credentials.
    pub fn plain(address: &str) -> Self {
        Self {
            address: address.into(),
            client_id: None,
            username: None,
            password: None,
            password_file: None,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            keep_alive_s: default_keep_alive(),
        }
    }

    /// The first problem with these settings, if any (files are read when connecting).
    pub fn problem(&self) -> Option<Problem> {
        if split_address(&self.address).is_none() {
            return Some((
                "address",
                format!("`{}`", self.address),
                "write host:port, e.g. \"127.0.0.1:1883\"",
            ));
        }
        if let Some(id) = &self.client_id {
            if id.is_empty() || id.len() > 128 || id.chars().any(char::is_control) {
                return Some((
                    "client_id",
                    format!("`{id}`"),
                    "use 1-128 printable characters, unique on the broker",
                ));
            }
        }
        if self.password.is_some() && self.password_file.is_some() {
            return Some((
                "password_file",
                "both password and password_file are given".into(),
                "keep one (password_file keeps the secret out of the configuration)",
            ));
        }
        if self.username.is_none() && (self.password.is_some() || self.password_file.is_some()) {
            return Some((
                "username",
                "a password without a username".into(),
                "add username = \"...\"",
            ));
        }
        if self.client_cert_file.is_some() != self.client_key_file.is_some() {
            return Some((
                "client_key_file",
                "a client certificate needs its key and the key its certificate".into(),
                "give both client_cert_file and client_key_file, or neither",
            ));
        }
        if self.client_cert_file.is_some() && self.ca_file.is_none() {
            return Some((
                "ca_file",
                "client certificates are a TLS feature and TLS is off".into(),
                "add ca_file with the broker's certificate authority",
            ));
        }
        if !(self.keep_alive_s >= 1.0 && self.keep_alive_s <= 3600.0) {
            return Some((
                "keep_alive_s",
                format!("{}", self.keep_alive_s),
                "use 1-3600 seconds",
            ));
        }
        None
    }

    /// rumqttc options for this broker: a persistent session (`clean_session` false) or a clean
    /// one, the keep alive, the packet limit ([`MAX_PACKET_BYTES`]), credentials, TLS. Reads
    /// the password and certificate files.
    pub fn options(&self, default_id: &str, persistent: bool) -> Result<MqttOptions, String> {
        let (host, port) = split_address(&self.address)
            .ok_or_else(|| format!("broker address `{}` is not host:port", self.address))?;
        let id = self.client_id.clone().unwrap_or_else(|| default_id.into());
        let mut o = MqttOptions::new(id, host, port);
        o.set_clean_session(!persistent);
        // (Whole seconds: the protocol's unit.)
        o.set_keep_alive(Duration::from_secs(
            self.keep_alive_s.round().max(1.0) as u64
        ));
        o.set_max_packet_size(MAX_PACKET_BYTES, MAX_PACKET_BYTES);
        if let Some(user) = &self.username {
            o.set_credentials(user.clone(), self.password()?);
        }
        if let Some(ca) = &self.ca_file {
            let config = self.tls_config(ca)?;
            o.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
                Arc::new(config),
            )));
        }
        Ok(o)
    }

    /// Whether the connection carries credentials over plain TCP.
    pub fn credentials_in_clear(&self) -> bool {
        self.username.is_some() && self.ca_file.is_none()
    }

    fn password(&self) -> Result<String, String> {
        match (&self.password, &self.password_file) {
            (Some(p), _) => Ok(p.clone()),
            (None, Some(f)) => {
                let text = std::fs::read_to_string(f)
                    .map_err(|e| format!("cannot read password_file `{f}`: {e}"))?;
                Ok(text.lines().next().unwrap_or("").to_string())
            }
            (None, None) => Ok(String::new()),
        }
    }

    fn tls_config(&self, ca: &str) -> Result<rustls::ClientConfig, String> {
        let mut roots = rustls::RootCertStore::empty();
        let certs = read_certs(ca)?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!("ca_file `{ca}` holds no usable certificate"));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?
            .with_root_certificates(roots);
        match (&self.client_cert_file, &self.client_key_file) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert)?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("cannot read client_key_file `{key}`: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("client certificate: {e}"))
            }
            _ => Ok(builder.with_no_client_auth()),
        }
    }
}

fn read_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read `{path}`: {e}"))?
        .collect();
    let certs = certs.map_err(|e| format!("`{path}` is not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err(format!("`{path}` holds no PEM certificate"));
    }
    Ok(certs)
}

/// `host:port` (an IPv6 host in brackets) into its parts.
fn split_address(a: &str) -> Option<(String, u16)> {
    let (host, port) = a.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().ok()?;
    (!host.is_empty() && port > 0).then(|| (host.to_string(), port))
}

/// Exponential backoff between reconnection attempts: 0.25 s doubling to 30 s.
#[derive(Debug, Clone, Copy)]
pub struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Self(Self::FIRST)
    }
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(250);
    const MOST: Duration = Duration::from_secs(30);

    /// The wait before the next attempt (and double the one after).
    pub fn next_wait(&mut self) -> Duration {
        let w = self.0;
        self.0 = (self.0 * 2).min(Self::MOST);
        w
    }

    pub fn reset(&mut self) {
        self.0 = Self::FIRST;
    }
}

/// What a failed connection attempt means for the user, with the fix.
pub fn explain(e: &rumqttc::ConnectionError, address: &str) -> String {
    use rumqttc::{ConnectReturnCode, ConnectionError};
    match e {
        ConnectionError::ConnectionRefused(
            ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized,
        ) => format!(
            "broker {address} refused the credentials: check username and password (password_file)"
        ),
        ConnectionError::ConnectionRefused(c) => {
            format!("broker {address} refused the connection ({c:?})")
        }
        ConnectionError::Io(io) => {
            format!("broker {address} unreachable ({io}): is it running, and is the address right?")
        }
        ConnectionError::Tls(t) => format!(
            "TLS with broker {address} failed ({t}): check ca_file and the broker's certificate"
        ),
        other => format!("broker {address}: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_levels() {
        assert_eq!(
            split_address("127.0.0.1:1883"),
            Some(("127.0.0.1".into(), 1883))
        );
        assert_eq!(split_address("[::1]:8883"), Some(("::1".into(), 8883)));
        assert_eq!(split_address("broker"), None);
        assert_eq!(split_address("broker:0"), None);
        assert!(topic_level_ok("north-pier_2.a"));
        for bad in ["", "a/b", "+", "#", "a b", "é", &"x".repeat(65)] {
            assert!(!topic_level_ok(bad), "{bad}");
        }
        assert!(topic_prefix_ok("sonotrack/v1"));
        assert!(!topic_prefix_ok("sonotrack//v1"));
        assert!(!topic_prefix_ok("a/#"));
    }

    #[test]
    fn settings_checks_name_the_key() {
        let ok = BrokerConfig::plain("localhost:1883");
        assert!(ok.problem().is_none());
        let key = |b: BrokerConfig| b.problem().map(|p| p.0);
        assert_eq!(key(BrokerConfig::plain("localhost")), Some("address"));
        let mut b = ok.clone();
        b.password = Some("x".into());
        assert_eq!(key(b.clone()), Some("username"));
        b.username = Some("u".into());
        assert_eq!(key(b.clone()), None);
        b.password_file = Some("/f".into());
        assert_eq!(key(b), Some("password_file"));
        let mut b = ok.clone();
        b.client_cert_file = Some("c.pem".into());
        assert_eq!(key(b.clone()), Some("client_key_file"));
        b.client_key_file = Some("k.pem".into());
        assert_eq!(key(b), Some("ca_file"));
        let mut b = ok;
        b.keep_alive_s = 0.2;
        assert_eq!(key(b), Some("keep_alive_s"));
    }

    #[test]
    fn missing_tls_files_are_named() {
        let mut b = BrokerConfig::plain("localhost:8883");
        b.ca_file = Some("/nonexistent/ca.pem".into());
        let e = b.options("x", true).err().unwrap_or_default();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
        let mut b = BrokerConfig::plain("localhost:1883");
        b.username = Some("u".into());
        b.password_file = Some("/nonexistent/pw".into());
        let e = b.options("x", true).err().unwrap_or_default();
        assert!(e.contains("password_file"), "{e}");
    }

    #[test]
    fn backoff_doubles_to_its_cap() {
        let mut b = Backoff::default();
        let w: Vec<_> = (0..10).map(|_| b.next_wait().as_millis()).collect();
        assert_eq!(&w[..4], &[250, 500, 1000, 2000]);
        assert_eq!(w[9], 30_000);
        b.reset();
        assert_eq!(b.next_wait().as_millis(), 250);
    }
}
