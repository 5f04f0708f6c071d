//! An application on the library: a pull consumer that follows the
//! application protocol (docs/protocol.md), so `nats-cutover run --mode fence`
//! (or drain) moves it to the new stream without a redeploy and without a stop.
//!
//! ```sh
//! cargo run -p cutover-app --example fence_consumer -- nats://127.0.0.1:4222 ORDERS worker [--guard]
//! ```
//!
//! Each message's id and where it came from is printed; with `--guard` each
//! message id is claimed in KV bucket `ORDERS_SEEN` first (10-minute TTL), so a
//! redelivered message is not processed twice. Ctrl-C stops it (its
//! registration is removed).

use async_nats::jetstream::Message;
use cutover_app::fence::{consume, FenceOptions};
use cutover_app::idempotency::{Claim, Guard};
use cutover_app::instance::InstanceOptions;
use cutover_app::worker::Outcome;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), async_nats::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [server, stream, consumer, rest @ ..] = args.as_slice() else {
        eprintln!("usage: fence_consumer SERVER_URL STREAM CONSUMER [--guard]");
        std::process::exit(2);
    };
    let client = async_nats::connect(server.as_str()).await?;
    let guard = match rest.iter().any(|a| a == "--guard") {
        true => Some(Guard::open(client.clone(), "ORDERS_SEEN", Duration::from_secs(600)).await?),
        false => None,
    };
    let id = format!("example-{}", std::process::id());
    let opts = FenceOptions::new(InstanceOptions::new(&id, env!("CARGO_PKG_VERSION")));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = stop_tx.send(true);
    });
    let done = consume(client, stream, consumer, opts, stop, |m| handle(m, guard.clone())).await?;
    eprintln!("stopped: {done:?}");
    Ok(())
}

/// Processes one message (here: prints it), guarded if asked.
async fn handle(m: Message, guard: Option<Guard>) -> (Outcome, Message) {
    let msg_id = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")).map(|v| v.to_string());
    if let (Some(g), Some(msg_id)) = (&guard, &msg_id) {
        match g.claim(msg_id).await {
            Ok(Claim::First) => {}
            Ok(Claim::Done) => return (Outcome::Ack, m), // processed already
            // Being processed elsewhere (or the guard is unreachable): later.
            Ok(Claim::Busy) | Err(_) => return (Outcome::NakAfter(Duration::from_secs(5)), m),
        }
    }
    let from = m.info().map(|i| format!("{} #{}", i.stream, i.stream_sequence)).unwrap_or_default();
    println!("{} from {from}", msg_id.as_deref().unwrap_or("(no id)"));
    if let (Some(g), Some(msg_id)) = (&guard, &msg_id) {
        if g.done(msg_id).await.is_err() {
            let _ = g.release(msg_id).await;
            return (Outcome::Nak, m);
        }
    }
    (Outcome::Ack, m)
}
