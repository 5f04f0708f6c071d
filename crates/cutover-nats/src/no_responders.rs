//! A second, write-only connection that answers a request with the status
//! line a server writes when nobody listens: `NATS/1.0 503`, empty body.
//!
//! The commit window's bridge (`engine::bridge`) answers the publishes it
//! cannot store exactly (those without a `Nats-Msg-Id`) the way the server
//! would have answered them had the bridge not listened. Only a status line
//! with an empty body is read as "no responders" by every client (nats.go
//! `(*Conn).request` checks `Status == "503"` and an empty body; nats.js
//! `request` `m.headers?.code === 503`, a code set only from the status
//! line; nats-py `Client.request`; async-nats `Connection::try_read_op`
//! parses the status from the version line only); a `Status: 503` header is
//! a syntax error to nats.js, a JSON error another error class in three of
//! four clients. The server passes a client's header block on unchanged
//! across routes (client.go: `removeHeaderStatusIfPresent` is not on that
//! path), so the answer reaches a publisher on any node.
//!
//! async-nats cannot write a status line (`HeaderMap::to_bytes` always starts
//! `NATS/1.0\r\n`, and header names and values reject spaces and CR/LF), so
//! this speaks the client protocol itself: INFO, TLS when asked for, CONNECT
//! with the same credentials as the runner's connection (token, user and
//! password, nkey or creds signing the INFO nonce), PING/PONG, then one
//! `HPUB` per answer.

use crate::connect::{server_urls, ConnectOptions, UrlAuth};
use crate::error::{Error, Result};
use async_nats::rustls;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The header block of a "no responders" answer (16 bytes, no body).
const STATUS_503: &[u8] = b"NATS/1.0 503\r\n\r\n";

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Sends "no responders" to reply subjects; cheap to clone. The connection
/// closes when the last clone is dropped.
#[derive(Clone)]
pub struct Responder {
    tx: mpsc::UnboundedSender<String>,
}

impl Responder {
    /// Answers `reply` with "no responders" (queued; written at once).
    pub fn no_responders(&self, reply: &str) {
        let _ = self.tx.send(reply.to_string());
    }
}

impl ConnectOptions {
    /// Opens the answering connection to the first server of the list that
    /// takes it, with these options' credentials and TLS.
    pub async fn responder(&self) -> Result<Responder> {
        let o = self.clone().resolve()?;
        let server = o.server_url();
        let (urls, url_auth) = server_urls(&server, &crate::connect::redact_urls(&server))?;
        let timeout = o.timeout.unwrap_or(Duration::from_secs(5));
        let mut last = String::from("no server URL");
        for url in &urls {
            let r = tokio::time::timeout(timeout, open(&o, url, url_auth.as_ref())).await;
            match r {
                Ok(Ok(io)) => return Ok(start(io)),
                Ok(Err(e)) => last = e,
                Err(_) => last = format!("no answer within {timeout:?}"),
            }
        }
        Err(Error::Connect { server: crate::connect::redact_urls(&server), reason: last })
    }
}

/// The host and port of a server URL (`nats://h:p`, `tls://h:p`, `h:p`, `h`).
fn host_port(url: &str) -> (String, u16, bool) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("nats", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
            (h.to_string(), p.parse().unwrap_or(4222))
        }
        _ => (authority.to_string(), 4222),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    (host, port, scheme == "tls")
}

async fn open(
    o: &ConnectOptions,
    url: &str,
    url_auth: Option<&UrlAuth>,
) -> std::result::Result<Pin<Box<dyn Io>>, String> {
    let (host, port, tls_scheme) = host_port(url);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("connection refused or unreachable ({e})"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut r = BufReader::new(tcp);
    let info = read_info(&mut r).await?;
    let want_tls = tls_scheme
        || o.tlsca.is_some()
        || o.tlscert.is_some()
        || info["tls_required"].as_bool().unwrap_or(false);
    let mut io: Pin<Box<dyn Io>> = match want_tls {
        false => Box::pin(r),
        true => {
            let cfg = tls_config(o).await?;
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| format!("TLS server name {host:?}: {e}"))?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
                .connect(name, r.into_inner())
                .await
                .map_err(|e| format!("TLS failed: {e}; check --tlsca/--tlscert/--tlskey"))?;
            Box::pin(BufReader::new(tls))
        }
    };
    let connect = connect_json(o, url_auth, info["nonce"].as_str().unwrap_or(""))?;
    io.write_all(format!("CONNECT {connect}\r\nPING\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    io.flush().await.map_err(|e| e.to_string())?;
    // The first PONG says the server took the CONNECT; `-ERR` says why not.
    let mut line = vec![];
    loop {
        line.clear();
        if !read_line(&mut io, &mut line).await? {
            return Err("the server closed the connection after CONNECT".into());
        }
        match String::from_utf8_lossy(&line).trim_end() {
            "PONG" => return Ok(io),
            "PING" => io.write_all(b"PONG\r\n").await.map_err(|e| e.to_string())?,
            l if l.starts_with("-ERR") => return Err(format!("the server refused it: {l}")),
            _ => {}
        }
    }
}

/// Reads one line into `buf` byte by byte (the stream is buffered: plain or
/// TLS, each behind a `BufReader`); `Ok(false)` at the end of the stream.
/// Cancel-safe: a byte read is in `buf` at once, so a line read halfway
/// when the answer branch of `start`'s select wins is finished next time.
async fn read_line<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> std::result::Result<bool, String> {
    loop {
        let mut b = [0u8; 1];
        let n = tokio::io::AsyncReadExt::read(r, &mut b).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(false);
        }
        buf.push(b[0]);
        if b[0] == b'\n' {
            return Ok(true);
        }
    }
}

async fn read_info(
    r: &mut BufReader<tokio::net::TcpStream>,
) -> std::result::Result<serde_json::Value, String> {
    let mut line = String::new();
    r.read_line(&mut line).await.map_err(|e| e.to_string())?;
    let json = line.trim_end().strip_prefix("INFO ").ok_or_else(|| {
        format!(
            "the server's first line is not INFO: {:?}",
            line.chars().take(40).collect::<String>()
        )
    })?;
    serde_json::from_str(json).map_err(|e| format!("the server's INFO is not JSON: {e}"))
}

/// CONNECT as async-nats sends it (connector.rs): headers on, the same
/// credentials; an nkey or creds signs the nonce (base64url, no padding).
fn connect_json(
    o: &ConnectOptions,
    url_auth: Option<&UrlAuth>,
    nonce: &str,
) -> std::result::Result<String, String> {
    let mut c = serde_json::json!({
        "verbose": false, "pedantic": false, "lang": "rust", "version": env!("CARGO_PKG_VERSION"),
        "protocol": 1, "headers": true, "no_responders": true, "echo": false,
        "name": "nats-cutover answers",
    });
    match url_auth {
        Some(UrlAuth::Token(t)) => c["auth_token"] = t.clone().into(),
        Some(UrlAuth::UserPassword(u, p)) => {
            c["user"] = u.clone().into();
            c["pass"] = p.clone().into();
        }
        None => {
            if let Some(u) = &o.user {
                c["user"] = u.clone().into();
                c["pass"] = o.password.clone().unwrap_or_default().into();
            }
            if let Some(t) = &o.token {
                c["auth_token"] = t.clone().into();
            }
        }
    }
    let sign = |seed: &str| -> std::result::Result<(String, String), String> {
        let kp = nkeys::KeyPair::from_seed(seed).map_err(|e| format!("the nkey seed: {e}"))?;
        let sig = kp.sign(nonce.as_bytes()).map_err(|e| format!("signing the nonce: {e}"))?;
        Ok((kp.public_key(), URL_SAFE_NO_PAD.encode(sig)))
    };
    if let Some(p) = &o.creds {
        let text = std::fs::read_to_string(p).map_err(|e| format!("--creds: {e}"))?;
        let (jwt, seed) = creds(&text).ok_or("--creds holds no user JWT and seed")?;
        let (_, sig) = sign(seed)?;
        c["jwt"] = jwt.into();
        c["sig"] = sig.into();
    } else if let Some(p) = &o.nkey {
        let text = std::fs::read_to_string(p).map_err(|e| format!("--nkey: {e}"))?;
        let seed = text.lines().map(str::trim).find(|l| l.starts_with('S')).unwrap_or("");
        let (public, sig) = sign(seed)?;
        c["nkey"] = public.into();
        c["sig"] = sig.into();
    }
    Ok(c.to_string())
}

/// A creds file's user JWT and seed: the first non-empty line after each
/// `-----BEGIN ...-----` decoration (async-nats auth_utils.rs reads the same).
fn creds(text: &str) -> Option<(&str, &str)> {
    let mut blocks = vec![];
    let mut lines = text.lines().map(str::trim);
    while let Some(l) = lines.next() {
        if l.starts_with("---") && l.contains("BEGIN") {
            if let Some(v) = lines.by_ref().find(|l| !l.is_empty()) {
                blocks.push(v);
            }
        }
    }
    Some((blocks.first()?, blocks.get(1)?))
}

/// The TLS client config: the given CA, else the platform's roots; the
/// client certificate when given (as connect.rs `with_tls` gives async-nats).
async fn tls_config(o: &ConnectOptions) -> std::result::Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    match &o.tlsca {
        Some(ca) => {
            for c in CertificateDer::pem_file_iter(ca).map_err(|e| format!("--tlsca: {e}"))? {
                roots.add(c.map_err(|e| format!("--tlsca: {e}"))?).map_err(|e| e.to_string())?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let b = rustls::ClientConfig::builder().with_root_certificates(roots);
    match (&o.tlscert, &o.tlskey) {
        (Some(c), Some(k)) => {
            let certs = CertificateDer::pem_file_iter(c)
                .map_err(|e| format!("--tlscert: {e}"))?
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| format!("--tlscert: {e}"))?;
            let key = PrivateKeyDer::from_pem_file(k).map_err(|e| format!("--tlskey: {e}"))?;
            b.with_client_auth_cert(certs, key).map_err(|e| format!("--tlscert/--tlskey: {e}"))
        }
        _ => Ok(b.with_no_client_auth()),
    }
}

/// The connection's task: answers PINGs, writes each answer, ends when every
/// [`Responder`] is dropped or the server closes the connection.
fn start(io: Pin<Box<dyn Io>>) -> Responder {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let (mut r, mut w) = tokio::io::split(io);
    tokio::spawn(async move {
        let mut line = vec![];
        loop {
            tokio::select! {
                reply = rx.recv() => {
                    let Some(reply) = reply else { break };
                    let n = STATUS_503.len();
                    let mut op = format!("HPUB {reply} {n} {n}\r\n").into_bytes();
                    op.extend_from_slice(STATUS_503);
                    op.extend_from_slice(b"\r\n");
                    if w.write_all(&op).await.is_err() || w.flush().await.is_err() {
                        break;
                    }
                }
                n = read_line(&mut r, &mut line) => {
                    if !matches!(n, Ok(true)) {
                        break;
                    }
                    if line.starts_with(b"PING") && w.write_all(b"PONG\r\n").await.is_err() {
                        break;
                    }
                    line.clear();
                }
            }
        }
        let _ = w.shutdown().await;
    });
    Responder { tx }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_give_host_port_and_tls() {
        assert_eq!(host_port("nats://127.0.0.1:4333"), ("127.0.0.1".into(), 4333, false));
        assert_eq!(host_port("tls://nats.internal:1/"), ("nats.internal".into(), 1, true));
        assert_eq!(host_port("localhost"), ("localhost".into(), 4222, false));
        assert_eq!(host_port("nats://[::1]:4223"), ("::1".into(), 4223, false));
    }

    #[test]
    fn a_creds_file_gives_its_jwt_and_seed() {
        let text = "-----BEGIN NATS USER JWT-----\neyJ0.x.y\n------END NATS USER JWT------\n\n*** IMPORTANT ***\n\n-----BEGIN USER NKEY SEED-----\nSUAAA\n------END USER NKEY SEED------\n";
        assert_eq!(creds(text), Some(("eyJ0.x.y", "SUAAA")));
        assert_eq!(creds("nothing"), None);
    }

    #[test]
    fn the_answer_is_the_servers_no_responders_status_line() {
        assert_eq!(STATUS_503.len(), 16);
        assert!(STATUS_503.starts_with(b"NATS/1.0 503\r\n"));
    }
}
