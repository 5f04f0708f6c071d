//! Publishers in the commit window (on by default; `run
//! --no-answer-publishes` turns it off): while no stream may hold the
//! publishers' subjects, the runner listens on them itself, so no publish
//! waits for its timeout.
//!
//! Why listen at all: on a cluster a publish that a node forwarded to A's
//! leader just as A released the subjects is dropped there with no answer
//! (the publisher's node counts a route as a delivery, server client.go
//! `sendToRoutesOrLeafs` sets `didDeliver`, so it sends no 503, and route.go
//! `processInboundRoutedMsg` drops a message nobody there subscribes to):
//! in a trial 4 of 16 commit windows had publishes that waited their whole
//! timeout. A subscriber held by the runner keeps every node's interest for
//! the whole window, so every publish reaches the runner
//! (docs/in-place.md, *Publishers on clusters*).
//!
//! What the runner answers:
//! - **A publish with a `Nats-Msg-Id`** is held and, once a stream holds the
//!   subjects again (B after the commit, A after an undone one), published
//!   there (same subject, headers and msg-id); that stream's ack is
//!   forwarded. A publish in the overlaps (the runner listens a little
//!   before A releases and after B takes) reaches a stream *and* the
//!   runner: its copy meets the stored one in the duplicate window (B's
//!   window holds the ids of A's messages it copied, and the commit waits
//!   until B holds A's tail), so it is stored once and the publisher gets a
//!   second, duplicate ack it ignores (a request takes the first reply).
//! - **A publish without one** cannot be told from its stored copy, so it
//!   is answered "no responders" (`crate::no_responders`, the server's own
//!   status line), never earlier than the moment no stream can still store
//!   or answer it, by when it arrived (zones measured in the research:
//!   0 timeouts, 0 stored twice, 0 lost over 100 windows, where a 503 at
//!   once stored 700-2,100 messages twice per 20 windows):
//!   - before A's release was answered (+ 5 ms): A may have stored it; it
//!     is answered once A's last sequence stopped moving, + 50 ms, by when
//!     any ack of A's reached its publisher first;
//!   - from then until the update that gives a stream the subjects is
//!     sent: no stream can have it, answered at once;
//!   - after that: the taker may store it; answered 250 ms after it came
//!     (an ack of the taker's, a replicated write, comes first).
//!
//!   A late answer to a request already answered is dropped by every
//!   client (a request takes the first reply).

use crate::error::Result;
use crate::no_responders::Responder;
use async_nats::{Client, Message};
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// After A's release was answered, how long a publish may still have
/// reached A (a publish sent to A and to the runner in one delivery, with
/// one route slower than the other).
const RELEASE_MARGIN: Duration = Duration::from_millis(5);
/// After A's last sequence stopped moving, before answering what came
/// while A still held the subjects: an ack of A's is written first.
const A_SETTLE: Duration = Duration::from_millis(50);
/// A publish that came while a stream was taking the subjects: answered
/// this long after it came (the taker's ack, a replicated write, first).
const TAKE_SETTLE: Duration = Duration::from_millis(250);
/// After the taker holds the subjects, how long the runner still listens:
/// until every node has the taker's interest (the server sends it to the
/// other nodes as the subscription is made, stream.go `subscribeToStream`
/// → route.go `updateRouteSubscriptionMap`, but on another route than the
/// runner's own unsubscribe; a publish forwarded to the runner alone would
/// be dropped after its unsubscribe).
const CLOSE_GRACE: Duration = Duration::from_millis(50);
/// Held publishes stored at once once a stream holds the subjects.
const STORES_AT_ONCE: usize = 128;

pub(in crate::engine) struct Bridge {
    /// The msg-id publishes, with when each came.
    held: Arc<Mutex<Vec<(Instant, Message)>>>,
    zones: Arc<Zones>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// When the window's moments happened, for the publishes without a msg-id.
struct Zones {
    responder: Responder,
    state: Mutex<ZoneState>,
    answered: std::sync::atomic::AtomicU64,
    later: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

#[derive(Default)]
struct ZoneState {
    /// From here no stream can store a publish (A's release answered + margin).
    none_from: Option<Instant>,
    /// From here a stream may take the subjects.
    taking_from: Option<Instant>,
    /// A's last sequence stopped moving (+ settle): what came before
    /// `none_from` may be answered from here.
    a_settled: Option<Instant>,
    /// Reply subjects of publishes that came before `none_from`.
    early: Vec<String>,
}

impl Zones {
    fn answer_at(self: &Arc<Self>, reply: String, at: Instant) {
        let z = self.clone();
        let t = tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            z.answer(&reply);
        });
        self.later.lock().unwrap().push(t);
    }

    fn answer(&self, reply: &str) {
        self.responder.no_responders(reply);
        self.answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A publish without a msg-id came now.
    fn came(self: &Arc<Self>, reply: String) {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap();
        match (s.none_from, s.taking_from) {
            (_, Some(t)) if now >= t => {
                drop(s);
                self.answer_at(reply, now + TAKE_SETTLE);
            }
            (Some(n), _) if now >= n => {
                drop(s);
                self.answer(&reply);
            }
            _ => match s.a_settled {
                Some(at) => {
                    drop(s);
                    self.answer_at(reply, at.max(now));
                }
                None => s.early.push(reply),
            },
        }
    }
}

/// What the bridge did.
#[derive(Debug, Default, Clone, Copy)]
pub(in crate::engine) struct Answered {
    /// Publishes stored through the bridge and acknowledged.
    pub stored: u64,
    /// Of those, already stored by a stream (the overlaps): acked as
    /// duplicates, stored once.
    pub duplicates: u64,
    /// Of those, a publisher's retry of a msg-id the bridge held already in
    /// this window (acked as a duplicate of the copy it stored): not an
    /// overlap, so not counted in `duplicates`.
    pub retries: u64,
    /// Publishes the bridge could not store before giving up (their
    /// publishers time out).
    pub failed: u64,
    /// Publishes without a msg-id answered "no responders".
    pub no_responders: u64,
}

impl Bridge {
    /// Listens on `subjects` (the publishers' subjects, A's); returns once
    /// the server has the subscriptions. `responder` answers the publishes
    /// without a msg-id.
    pub(in crate::engine) async fn open(
        client: &Client,
        responder: Responder,
        subjects: &[String],
    ) -> Result<Bridge> {
        let held = Arc::new(Mutex::new(vec![]));
        let zones = Arc::new(Zones {
            responder,
            state: Mutex::default(),
            answered: 0.into(),
            later: Mutex::default(),
        });
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = vec![];
        for s in subjects {
            let sub =
                client.subscribe(s.clone()).await.map_err(|e| crate::error::Error::Request {
                    what: format!("listen on {s} for the commit window"),
                    reason: e.to_string(),
                })?;
            tasks.push(tokio::spawn(listen(sub, held.clone(), zones.clone(), stop_rx.clone())));
        }
        client.flush().await.map_err(|e| crate::error::Error::Request {
            what: "listen on the publishers' subjects".into(),
            reason: e.to_string(),
        })?;
        Ok(Bridge { held, zones, stop, tasks })
    }

    /// The holder's update that released the subjects was answered.
    pub(in crate::engine) fn released(&self) {
        let mut s = self.zones.state.lock().unwrap();
        s.none_from.get_or_insert(Instant::now() + RELEASE_MARGIN);
    }

    /// The holder's last sequence stopped moving: what came while it held
    /// the subjects is answered after the settle.
    pub(in crate::engine) fn holder_settled(&self) {
        let at = Instant::now() + A_SETTLE;
        let early = {
            let mut s = self.zones.state.lock().unwrap();
            s.a_settled.get_or_insert(at);
            std::mem::take(&mut s.early)
        };
        for reply in early {
            self.zones.answer_at(reply, at);
        }
    }

    /// The update that gives a stream the subjects is about to be sent.
    pub(in crate::engine) fn taking(&self) {
        let mut s = self.zones.state.lock().unwrap();
        s.taking_from.get_or_insert(Instant::now());
    }

    /// Stops listening (a stream holds the subjects now: every later
    /// publish reaches it), answers what is left without a msg-id, then
    /// stores the msg-id publishes, in arrival order, where the subjects are
    /// now, forwarding each acknowledgement.
    ///
    /// A msg-id publish that came while A still held the subjects, and is
    /// older than half of `window` (the taker's duplicate window) by now, is
    /// answered "no responders" instead: A may have stored it (then A acked
    /// it first and this late answer is dropped by the publisher), and
    /// stored again this late it could fall outside the window that would
    /// have told the copies apart. Seen on a cluster with a node restarted
    /// inside the window (it lasted seconds): five publishes stored twice.
    pub(in crate::engine) async fn flush(
        mut self,
        client: &Client,
        within: Duration,
        window: Duration,
    ) -> Answered {
        tokio::time::sleep(CLOSE_GRACE).await;
        let _ = self.stop.send(true);
        for t in std::mem::take(&mut self.tasks) {
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
        // A window that ended before its holder settled (an undone one):
        // a stream holds the subjects again, long after these came.
        self.holder_settled();
        let later = std::mem::take(&mut *self.zones.later.lock().unwrap());
        for t in later {
            let _ = t.await;
        }
        let held = std::mem::take(&mut *self.held.lock().unwrap());
        let none_from = self.zones.state.lock().unwrap().none_from;
        let (held, late): (Vec<_>, Vec<_>) = held
            .into_iter()
            .partition(|(at, _)| none_from.is_some_and(|n| *at >= n) || at.elapsed() < window / 2);
        for (_, m) in late {
            if let Some(reply) = &m.reply {
                self.zones.answer(reply);
            }
        }
        let held: Vec<Message> = held.into_iter().map(|(_, m)| m).collect();
        let deadline = Instant::now() + within;
        let mut a = Answered {
            no_responders: self.zones.answered.load(std::sync::atomic::Ordering::Relaxed),
            ..Answered::default()
        };
        // Pipelined, sent in arrival order on one connection (so stored in
        // it, a retried one aside): a window's held publishes stored one at
        // a time (a replicated write each) kept the last of a few thousand
        // waiting for seconds, past their publishers' timeouts.
        // A msg-id held before in this window: the publisher sent it again
        // while it waited (its own retry), stored after the first copy.
        let mut ids = std::collections::HashSet::new();
        let held: Vec<(bool, Message)> = held
            .into_iter()
            .filter(|m| m.reply.is_some())
            .map(|m| {
                let id = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id"));
                let id = id.map(|v| v.as_str().to_string()).unwrap_or_default();
                (!ids.insert(id), m)
            })
            .collect();
        let stores = futures::stream::iter(held)
            .map(|(retry, m)| async move {
                let ack = store(client, &m, deadline).await;
                (retry, m.reply, ack)
            })
            .buffered(STORES_AT_ONCE);
        futures::pin_mut!(stores);
        while let Some((retry, reply, ack)) = stores.next().await {
            let Some(reply) = reply else { continue };
            match ack {
                Some(ack) => {
                    a.stored += 1;
                    if serde_json::from_slice::<serde_json::Value>(&ack.payload)
                        .is_ok_and(|v| v["duplicate"] == true)
                    {
                        match retry {
                            true => a.retries += 1,
                            false => a.duplicates += 1,
                        }
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

/// Keeps each publish that has a reply subject and a msg-id, and hands the
/// others with a reply subject to the zones; once told to stop, drains the
/// subscription (unsubscribed, in-flight messages still delivered) and
/// ends.
async fn listen(
    mut sub: async_nats::Subscriber,
    held: Arc<Mutex<Vec<(Instant, Message)>>>,
    zones: Arc<Zones>,
    mut stop: watch::Receiver<bool>,
) {
    let keep = |m: Message| {
        let id = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")).is_some();
        match (&m.reply, id) {
            (Some(_), true) => held.lock().unwrap().push((Instant::now(), m)),
            (Some(r), false) => zones.came(r.to_string()),
            (None, _) => {}
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

/// The bridge for this commit window, unless turned off
/// (`--no-answer-publishes`) or it cannot answer as the server would: a
/// move across systems (the publishers' system is the source side, with its
/// own connection; not built there), or no second connection to answer
/// "no responders" with (a library caller's [`crate::Js`] without
/// [`crate::Js::with_options`], or the connection refused): then the window
/// is as without it, and a warning says why.
pub(in crate::engine) async fn open_for(
    ctx: &crate::engine::ctx::Ctx<'_>,
) -> Result<Option<Bridge>> {
    use crate::engine::events::{EventKind, Warning};
    use cutover_core::journal::Step;
    if !ctx.opts.answer_publishes || ctx.js.source_side().is_some() {
        return Ok(None);
    }
    let responder = match ctx.js.options() {
        None => Err("no connection options to open a second connection with".to_string()),
        Some(o) => o.responder().await.map_err(|e| e.to_string()),
    };
    let responder = match responder {
        Ok(r) => r,
        Err(e) => {
            let what = format!("publishes in the commit window are answered by the server alone (no responders, or on a cluster sometimes no reply until their timeout): the runner could not open its answering connection ({e})");
            ctx.emit(Step::MovePublishers, EventKind::Warning(Warning::Skipped { what }));
            return Ok(None);
        }
    };
    let subjects = ctx.journal.lock().await.a_subjects.clone();
    Bridge::open(&ctx.js.client, responder, &subjects).await.map(Some)
}

/// Closes the bridge once a stream holds the subjects and says what it
/// answered.
pub(in crate::engine) async fn close(ctx: &crate::engine::ctx::Ctx<'_>, b: Bridge) {
    use crate::engine::events::{EventKind, Info};
    // The window of the stream that holds the subjects now (B, or A after
    // an undone commit: the smaller of the two).
    let (from, to) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone())
    };
    let mut window = Duration::MAX;
    for s in [&from, &to] {
        if let Ok(Some((_, i))) = ctx.js.stream_info_opt(s).await {
            window = window.min(Duration::from_nanos(i.config.duplicate_window.max(0) as u64));
        }
    }
    let a = b.flush(&ctx.js.client, ctx.opts.commit_timeout, window).await;
    let info = Info::Bridged {
        stored: a.stored,
        duplicates: a.duplicates,
        retries: a.retries,
        failed: a.failed,
        no_responders: a.no_responders,
    };
    ctx.emit(cutover_core::journal::Step::MovePublishers, EventKind::Info(info));
}
