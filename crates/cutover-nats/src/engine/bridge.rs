//! Publishers that never retry (`run --answer-publishes`): during the commit
//! window, while no stream may hold the publishers' subjects, the runner
//! itself takes the JetStream publishes on them and, once a stream holds the
//! subjects again (B after the commit, A after an undone one), publishes
//! each one there (same subject, headers and `Nats-Msg-Id`) and forwards that
//! stream's acknowledgement to the publisher's reply subject. The publisher
//! sees a slower ack instead of "no responders".
//!
//! Exact only for publishes with a `Nats-Msg-Id`, and only those are
//! answered: the bridge listens a little before A releases the subjects and
//! a little after B takes them, and a publish in those overlaps reaches a
//! stream *and* the bridge. With a msg-id the bridge's copy meets the
//! stored one in the duplicate window (B's window holds the ids of A's
//! messages it sourced or mirrored, and the commit waits until B holds A's
//! tail), so it is stored once and the publisher gets a second, duplicate
//! ack it ignores (a request takes the first reply). Without a msg-id nothing
//! could tell the two copies apart: such a publish is left unanswered (its
//! publisher times out, as it would have failed on "no responders").

use crate::error::Result;
use async_nats::{Client, Message};
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub(in crate::engine) struct Bridge {
    held: Arc<Mutex<Vec<Message>>>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What the bridge did.
#[derive(Debug, Default, Clone, Copy)]
pub(in crate::engine) struct Answered {
    /// Publishes stored through the bridge and acknowledged.
    pub stored: u64,
    /// Of those, already stored by a stream (the overlaps): acked as
    /// duplicates, stored once.
    pub duplicates: u64,
    /// Publishes the bridge could not store before giving up (their
    /// publishers time out).
    pub failed: u64,
}

impl Bridge {
    /// Listens on `subjects` (the publishers' subjects, A's); returns once
    /// the server has the subscriptions.
    pub(in crate::engine) async fn open(client: &Client, subjects: &[String]) -> Result<Bridge> {
        let held = Arc::new(Mutex::new(vec![]));
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = vec![];
        for s in subjects {
            let sub =
                client.subscribe(s.clone()).await.map_err(|e| crate::error::Error::Request {
                    what: format!("listen on {s} for the commit window"),
                    reason: e.to_string(),
                })?;
            tasks.push(tokio::spawn(listen(sub, held.clone(), stop_rx.clone())));
        }
        client.flush().await.map_err(|e| crate::error::Error::Request {
            what: "listen on the publishers' subjects".into(),
            reason: e.to_string(),
        })?;
        Ok(Bridge { held, stop, tasks })
    }

    /// Stops listening (a stream holds the subjects now: every later
    /// publish reaches it), then stores what was taken, in arrival order,
    /// where the subjects are now, forwarding each acknowledgement.
    pub(in crate::engine) async fn flush(self, client: &Client, within: Duration) -> Answered {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
        let held = std::mem::take(&mut *self.held.lock().unwrap());
        let deadline = Instant::now() + within;
        let mut a = Answered::default();
        for m in held {
            let Some(reply) = m.reply.clone() else { continue };
            match store(client, &m, deadline).await {
                Some(ack) => {
                    a.stored += 1;
                    if serde_json::from_slice::<serde_json::Value>(&ack.payload)
                        .is_ok_and(|v| v["duplicate"] == true)
                    {
                        a.duplicates += 1;
                    }
                    let h = ack.headers.unwrap_or_default();
                    let _ = client.publish_with_headers(reply, h, ack.payload).await;
                }
                None => a.failed += 1,
            }
        }
        let _ = client.flush().await;
        a
    }
}

/// Keeps each publish that has a reply subject and a msg-id; once told to
/// stop, drains the subscription (unsubscribed, in-flight messages still
/// delivered) and ends.
async fn listen(
    mut sub: async_nats::Subscriber,
    held: Arc<Mutex<Vec<Message>>>,
    mut stop: watch::Receiver<bool>,
) {
    let keep = |m: Message| {
        let id = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")).is_some();
        if id && m.reply.is_some() {
            held.lock().unwrap().push(m);
        }
    };
    loop {
        tokio::select! {
            m = sub.next() => match m {
                Some(m) => keep(m),
                None => return,
            },
            _ = stop.changed() => break,
        }
    }
    if sub.drain().await.is_err() {
        return;
    }
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(1), sub.next()).await {
        keep(m);
    }
}

/// Publishes `m` as a JetStream publish (a request) to its subject until a
/// stream acknowledges it or `deadline` passes.
async fn store(client: &Client, m: &Message, deadline: Instant) -> Option<Message> {
    let headers = m.headers.clone().unwrap_or_default();
    loop {
        let r = client.request_with_headers(m.subject.clone(), headers.clone(), m.payload.clone());
        if let Ok(Ok(ack)) = tokio::time::timeout(Duration::from_millis(500), r).await {
            return Some(ack);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
