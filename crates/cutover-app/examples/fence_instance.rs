//! The library's fence instance as a program, for the conformance check
//! (`scripts/protocol-check.py --instance-cmd`, docs/protocol.md,
//! *Conformance*): `cutover_app::fence::consume` with a handler that writes
//! what it processes.
//!
//!     fence_instance --server URL --stream S --consumer C --instance ID
//!                    --out FILE [--app-version V] [--work-ms 0]
//!
//! Prints `ready` once registered; writes `{"begin": id, "stream", "seq"}`
//! before handling a message and `{"id", "stream", "seq", "delivered",
//! "instance", "acked": true, "t_ms"}` once handled (the library then sends
//! its double ack, asked again until the server confirms it); exits 0 on
//! SIGTERM after a last `{"done": true, "acked", "fenced_off"}` line, its
//! registration deleted.

use cutover_app::fence::{consume, FenceOptions};
use cutover_app::instance::InstanceOptions;
use cutover_app::worker::Outcome;
use serde_json::json;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), async_nats::Error> {
    let args: Vec<String> = std::env::args().collect();
    let need = |n: &str| arg(&args, n).ok_or_else(|| format!("{n} is required"));
    let (server, stream, consumer) = (need("--server")?, need("--stream")?, need("--consumer")?);
    let (instance, out) = (need("--instance")?, need("--out")?);
    let version = arg(&args, "--app-version").unwrap_or_else(|| "1".into());
    let work = Duration::from_millis(arg(&args, "--work-ms").map_or(Ok(0), |w| w.parse())?);
    let file = std::fs::OpenOptions::new().create(true).append(true).open(&out)?;
    let file = Arc::new(Mutex::new(file));
    let write = {
        let file = file.clone();
        move |v: serde_json::Value| {
            let mut f = file.lock().unwrap();
            let _ = writeln!(f, "{v}");
        }
    };
    let client = async_nats::connect(&server).await?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::spawn(async move {
        term.recv().await;
        let _ = tx.send(true);
    });
    let opts = FenceOptions::new(InstanceOptions::new(&instance, &version));
    let id = instance.clone();
    let line = write.clone();
    println!("ready");
    let handler = move |m: async_nats::jetstream::Message| {
        let (line, id) = (line.clone(), id.clone());
        async move {
            let info =
                m.info().ok().map(|i| (i.stream.to_string(), i.stream_sequence, i.delivered));
            let (stream, seq, delivered) = info.unwrap_or_default();
            let msg_id = m
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Msg-Id"))
                .map(|v| v.to_string())
                .unwrap_or_default();
            line(json!({"begin": msg_id, "stream": stream, "seq": seq}));
            if !work.is_zero() {
                tokio::time::sleep(work).await;
            }
            let t_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
            line(
                json!({"id": msg_id, "stream": stream, "seq": seq, "delivered": delivered, "instance": id, "acked": true, "t_ms": t_ms}),
            );
            (Outcome::Ack, m)
        }
    };
    let done = consume(client, &stream, &consumer, opts, rx, handler).await?;
    write(json!({"done": true, "acked": done.acked, "fenced_off": done.fenced_off}));
    Ok(())
}
