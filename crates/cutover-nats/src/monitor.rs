//! The server's monitoring endpoint (`http: HOST:PORT` in its configuration):
//! what an application account cannot ask over NATS. Only `/varz`'s
//! JetStream sync setting is read (see `cutover_core::durability`).
//!
//! A plain HTTP/1.0 GET over a TCP stream: one request, no TLS (a monitoring
//! port behind TLS, `https:`, is refused by name), no dependency.

use crate::error::{Error, Result};
use cutover_core::durability::SyncSetting;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `http://HOST:PORT[/...]` → `HOST:PORT`.
fn authority(url: &str) -> Result<String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        Error::Input(format!(
            "--monitor {url:?} is not an http:// URL: give the server's monitoring address, e.g. http://127.0.0.1:8222 (the `http` setting of nats-server; https is not supported)"
        ))
    })?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || !host.contains(':') {
        return Err(Error::Input(format!(
            "--monitor {url:?} names no HOST:PORT: e.g. http://127.0.0.1:8222"
        )));
    }
    Ok(host.to_string())
}

/// GET `path` on the monitoring endpoint `url`: the body of a 200 answer.
async fn get(url: &str, path: &str, timeout: Duration) -> Result<Vec<u8>> {
    let host = authority(url)?;
    let fail = |reason: String| Error::Connect { server: url.to_string(), reason };
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(&host).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes()).await?;
        let mut answer = vec![];
        s.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| fail(format!("the monitoring endpoint did not answer within {timeout:?}")))?
        .map_err(|e| fail(format!("cannot read the monitoring endpoint: {e}")))?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| fail("the monitoring endpoint's answer is not HTTP".into()))?;
    let status = String::from_utf8_lossy(&answer[..split]);
    let status = status.lines().next().unwrap_or_default().to_string();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(fail(format!("GET {path} answered {status:?}")));
    }
    Ok(answer[split + 4..].to_vec())
}

/// The JetStream sync setting from `/varz`.
pub async fn sync_setting(url: &str, timeout: Duration) -> Result<SyncSetting> {
    let body = get(url, "/varz", timeout).await?;
    let varz: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| Error::Decode { what: format!("{url}/varz"), reason: e.to_string() })?;
    let config = &varz["jetstream"]["config"];
    if config.is_null() {
        return Err(Error::Decode {
            what: format!("{url}/varz"),
            reason: "it shows no JetStream configuration: is JetStream enabled on that server, and is it the server the plan reads?".into(),
        });
    }
    Ok(SyncSetting {
        always: config["sync_always"].as_bool().unwrap_or(false),
        interval_ns: config["sync_interval"].as_i64().unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_with_a_port_are_taken() {
        assert_eq!(authority("http://127.0.0.1:8222").unwrap(), "127.0.0.1:8222");
        assert_eq!(authority("http://h:1/varz").unwrap(), "h:1");
        let e = authority("https://h:1").unwrap_err().to_string();
        assert!(e.contains("is not an http:// URL"), "{e}");
        assert!(authority("http://h").unwrap_err().to_string().contains("names no HOST:PORT"));
    }
}
