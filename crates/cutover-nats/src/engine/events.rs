//! Progress events: what the engine reports while it works, as one typed enum
//! that every reporter matches (the human renderer, `--json`, the metrics, the
//! report, the demo). Renaming a field is a compile error, not a silently
//! empty chart.
//!
//! On the wire (`run --json`, docs/json.md) an event stays
//! `{ts_ms, migration, kind, step, detail}`: [`Event::wire`] writes that shape
//! from the typed fields, so the JSON format is unchanged.

use cutover_core::journal::Step;
use serde::Serialize;
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    pub migration: String,
    pub step: Step,
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    StepStarted,
    /// The step finished after `ms` (none for rollback's steps).
    StepDone {
        ms: Option<f64>,
        result: StepResult,
    },
    Progress(Progress),
    Info(Info),
    Warning(Warning),
}

/// What a finished step reports.
#[derive(Debug, Clone, PartialEq)]
pub enum StepResult {
    CreateB {
        created: bool,
    },
    CatchUp {
        origin_seq: u64,
    },
    MoveConsumers {
        moved: usize,
    },
    MovePublishers {
        a_final_seq: u64,
        no_stream_window_ms: Option<f64>,
        reconciled: bool,
    },
    /// Publishers split across systems: B holds these subjects on the
    /// target side (A still holds its own).
    SubjectsShared {
        subjects: Vec<String>,
    },
    /// Publishers split across systems: the wait ended, told by the operator
    /// (`proceed`) or because A stored nothing for `--seal-when-idle`.
    PublishersConfirmed {
        by: String,
        waited_ms: f64,
        a_last_seq: u64,
    },
    /// B handed over from mirroring to sourcing A (`steps::handover`): it
    /// sources from `x`; A's subjects were released for `freeze_ms`.
    HandedOver {
        x: u64,
        freeze_ms: f64,
    },
    Sealed,
    SourceRemoved,
    Retired {
        deleted_old_stream: bool,
        kept_old_consumers: bool,
    },
    /// Rollback: A's subjects restored.
    SubjectsRestored {
        subjects: Vec<String>,
    },
    /// Rollback: the old durable reset past what the new one processed.
    ConsumerReset {
        reset_to: u64,
    },
    /// Rollback: the old durable is back as it was.
    ConsumerRestored,
    /// Rollback: B deleted.
    BDeleted {
        stream: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// B catching up with A: what is left, and the server's lag for comparison.
    CatchUp { remaining: u64, reported_lag: Option<u64> },
    /// B took A's duplicate window, from this origin sequence on.
    WindowRaised { duplicate_window_ns: i64, from_origin_seq: u64 },
    /// Right before the commit: B's duplicate window had been cleared (a
    /// server restart clears a mirror's) and was set again; the commit
    /// waits `remaining_ms` more, until B recorded a whole retry horizon of
    /// msg-ids.
    WindowRestored { duplicate_window_ns: i64, remaining_ms: u64 },
    /// A paused consumer draining.
    Draining { ack_pending: u64, delivered: u64, ack_floor: u64 },
    /// A consumer draining without a pause (publishers stopped, before 2.11).
    DrainingUnpaused { num_pending: u64, ack_pending: u64 },
    /// Settled at checkpoint F.
    Settled { checkpoint: u64, drain_ms: u64 },
    /// Fence mode: the new durable exists on B at `b_start` and the fence F
    /// is published; the old consumer delivered nothing new for `fence_ms`
    /// (pause to publication) while instances kept processing.
    Fenced { fence: u64, b_start: u64, translate_gets: u32, fence_ms: f64 },
    /// Fence mode: the old consumer acknowledged everything up to the fence.
    FenceSettled { fence: u64, settle_ms: u64, ack_pending: u64 },
    /// Mode rolling: the live instances still bound to the old consumer and
    /// those on the new durable (`instance@version`), reported on change.
    Rollout { on_old: Vec<String>, on_new: Vec<String> },
    /// Fence-mode rollback, the route deleted: the live instances that
    /// still fetch from the deleted new durable `consumer` (`bound`); the
    /// old durable stays held until none does, or for `deadline_ms` at
    /// most (`None`: the old durable's `max_deliver` is limited, no
    /// deadline), reported on change.
    AwaitFollowers { consumer: String, instances: Vec<String>, deadline_ms: Option<u64> },
    /// A rollback holds `stream`'s durable (the step's consumer) still and
    /// waits until it is settled (the new durable) or has acknowledged up
    /// to the fence (fence mode's old one): its state, how long it waited
    /// and how long it may (then the rollback fails, the durable serving).
    /// Every second while it waits.
    RollbackSettling {
        stream: String,
        ack_pending: u64,
        delivered: u64,
        ack_floor: u64,
        waited_ms: u64,
        timeout_ms: u64,
    },
    /// Publishers split across systems, waiting for the operator: A stored
    /// `a_stored` messages in the last `interval_ms` (publishers still on
    /// its side), `idle_ms` since its last one; `next` is the command that
    /// lets the run go on.
    AwaitPublishers {
        a_stored: u64,
        interval_ms: f64,
        a_last_seq: u64,
        idle_ms: f64,
        waited_ms: f64,
        next: String,
    },
    /// The new durable exists on B at `b_start`.
    Moved {
        checkpoint: u64,
        b_start: u64,
        translate_gets: u32,
        gap_ms: f64,
        longest_pause_ms: Option<u64>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Info {
    AlreadyComplete,
    Resuming {
        phase: String,
        in_progress: Option<Step>,
    },
    /// What the runner answered during the commit window (`engine::bridge`;
    /// on unless `--no-answer-publishes`): publishes with a msg-id stored
    /// once a stream held the subjects, of them found already stored by a
    /// stream (`duplicates`) or sent again by their publisher while held
    /// (`retries`), not stored in time; publishes without one answered "no
    /// responders".
    Bridged {
        stored: u64,
        duplicates: u64,
        retries: u64,
        failed: u64,
        no_responders: u64,
    },
    /// Durables that appeared on A after the plan (an application created
    /// them meanwhile): planned against the same B and moved like the others.
    Appeared {
        consumers: Vec<String>,
    },
    /// Settings of A changed after the plan (an operator's update), B
    /// took as A had them: carried to B before the commit, as
    /// (name, then, now).
    SettingsCarried {
        settings: Vec<(String, Value, Value)>,
    },
    /// A moved durable's configuration on A changed after the plan (an
    /// application or operator updated it): the new durable on B is made
    /// from it as it is now; `changed` names the keys of B's configuration
    /// that differ from the plan's.
    ConsumerChanged {
        consumer: String,
        changed: Vec<String>,
    },
    /// A moved durable was paused on A after the plan (by an operator or an
    /// application): the pause is kept, on the old durable if it is given
    /// back and on the new one, until the same time.
    OperatorPaused {
        consumer: String,
        until: String,
    },
    /// In place, hop 1: the applications' ordered consumers (KV and object
    /// store watchers, ordered subscriptions) read before the stream is
    /// deleted, for hop 2 to create again (`steps::watchers`).
    WatchersKept {
        stream: String,
        count: usize,
    },
    /// In place, hop 2's create step: hop 1's ordered consumers created
    /// again on the new stream, as soon as it exists.
    WatchersRestored {
        stream: String,
        created: usize,
    },
    /// In place, hop 2's retire: of the ordered consumers created again,
    /// those their clients left (they reset onto consumers of their own)
    /// deleted, the rest still bound.
    WatchersLeft {
        stream: String,
        left: usize,
        bound: usize,
    },
    /// Across systems with `--repoint-publishers` and no split (strategy
    /// mirror: a same-name move's hop 1): the commit point passed, `to`
    /// holds the subjects on the target side; publishers and a bucket's
    /// clients still on the source side get "no responders" until they
    /// reconnect there.
    RepointNow {
        to: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    /// No ack progress while paused: the consumer is resumed for a while.
    PauseCut { stall_ms: u64, ack_pending: u64 },
    /// The copy `stream` read nothing more through its paced durable: the
    /// durable was made again from `from_seq`, B's next sequence.
    CopyRestarted { stream: String, from_seq: u64 },
    /// The commit could not complete and was undone.
    CommitUndone { error: String },
    /// Rollback left something as it found it (and says why).
    Skipped { what: String },
    /// Fence mode: live instances that have not acknowledged the fence. While
    /// any is missing the old consumer is not resumed to redeliver (`waiting`),
    /// or the run went on without them at the deadline.
    FenceUnacknowledged { fence: u64, instances: Vec<String>, waiting: bool },
    /// Mode rolling, told to proceed: these instances were still bound to the
    /// old consumer (settled to the fence: they process nothing more).
    ProceededWithout { instances: Vec<String> },
    /// Fence mode: the old consumer's ack floor passed the fence: something
    /// above F was acknowledged there, which instances that follow the
    /// protocol never do, so F was read from a state that had not yet
    /// learned of those deliveries (a consumer leader change during the
    /// gate). Messages F+1 up to `ack_floor` may have been processed from
    /// both consumers; `verify` does not hold.
    AckedAboveFence { fence: u64, ack_floor: u64 },
    /// Drain mode, at retire: the old consumer, paused for good since F,
    /// shows a delivery above F: F was read short; messages F+1 up to
    /// `delivered` may have been processed from both consumers.
    DeliveredAboveCheckpoint { checkpoint: u64, delivered: u64 },
    /// Durables that appeared on A after the commit: left on A, which
    /// takes nothing new; their applications must bind to B. `verify`
    /// does not hold while they are there.
    Stranded { stream: String, durables: Vec<String> },
    /// Fence-mode rollback: these live instances still fetched from the
    /// deleted new durable `consumer` at the deadline; the old durable was
    /// given back anyway (its `max_deliver` is unlimited, so a message they
    /// nak as above the fence comes back after the nak's delay).
    StillOnNewDurable { consumer: String, instances: Vec<String> },
}

/// The wire shape of an event.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct WireEvent {
    pub ts_ms: u64,
    pub migration: String,
    pub kind: String,
    pub step: String,
    pub detail: Value,
}

impl EventKind {
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::StepStarted => "step_started",
            EventKind::StepDone { .. } => "step_done",
            EventKind::Progress(_) => "progress",
            EventKind::Info(_) => "info",
            EventKind::Warning(_) => "warning",
        }
    }

    fn detail(&self) -> Value {
        match self {
            EventKind::StepStarted => json!({}),
            EventKind::StepDone { ms, result } => {
                let mut d = result.detail();
                if let Some(ms) = ms {
                    d["ms"] = json!(ms);
                }
                d
            }
            EventKind::Progress(p) => p.detail(),
            EventKind::Info(i) => match i {
                Info::AlreadyComplete => json!({ "message": "migration already complete" }),
                Info::Resuming { phase, in_progress } => {
                    json!({ "phase": phase, "in_progress": in_progress })
                }
                Info::Bridged { stored, duplicates, retries, failed, no_responders } => json!({
                    "message": format!("publishes answered during the commit window: {stored} with a msg-id stored ({duplicates} of them already stored by a stream, {retries} a publisher's retry of one held), {failed} not stored in time, {no_responders} without a msg-id answered \"no responders\""),
                    "stored": stored, "duplicates": duplicates, "retries": retries, "failed": failed, "no_responders": no_responders,
                }),
                Info::WatchersKept { stream, count } => json!({
                    "message": format!("{count} ordered consumer(s) on {stream} (KV or object store watchers, ordered subscriptions) kept before its deletion, to be created again on its new stream"),
                    "stream": stream, "count": count,
                }),
                Info::WatchersRestored { stream, created } => json!({
                    "message": format!("{created} ordered consumer(s) created again on {stream} as soon as it exists: each client resets onto {stream} from its own position at its next message, and reads there what the copy brings"),
                    "stream": stream, "created": created,
                }),
                Info::WatchersLeft { stream, left, bound } => json!({
                    "message": format!("{left} client(s) of the ordered consumers created again on {stream} reset onto it from their own position (those consumers deleted), {bound} still bound (nothing written to them since: they reset at the next message)"),
                    "stream": stream, "left": left, "bound": bound,
                }),
                Info::RepointNow { to } => json!({
                    "message": format!("commit point passed: repoint the publishers (and a bucket's clients) to the target side now, where {to} holds the subjects; a write still sent to the source side is answered \"no responders\" (nothing stored) until its client reconnects"),
                    "stream": to,
                }),
                Info::ConsumerChanged { consumer, changed } => json!({
                    "message": format!("consumer {consumer} was changed on the old stream after the plan ({}): its new durable takes the configuration it has now", changed.join(", ")),
                    "consumer": consumer,
                    "changed": changed,
                }),
                Info::OperatorPaused { consumer, until } => json!({
                    "message": format!("consumer {consumer} was paused on the old stream after the plan (until {until}): the pause is kept, on its new durable too"),
                    "consumer": consumer,
                    "until": until,
                }),
                Info::SettingsCarried { settings } => json!({
                    "message": format!("settings of the old stream changed after the plan, carried to the new one before the commit: {}", settings.iter().map(|(k, then, now)| format!("{k} {then} -> {now}")).collect::<Vec<_>>().join(", ")),
                    "settings": settings.iter().map(|(k, then, now)| json!({"name": k, "planned": then, "now": now})).collect::<Vec<_>>(),
                }),
                Info::Appeared { consumers } => json!({
                    "message": format!("durable(s) {} appeared on the old stream after the plan (created by an application meanwhile): moved like the others", consumers.join(", ")),
                    "consumers": consumers,
                }),
            },
            EventKind::Warning(w) => match w {
                Warning::PauseCut { stall_ms, ack_pending } => json!({
                    "message": format!("no ack progress for {stall_ms} ms while paused: resuming for up to as long so held messages are processed or redelivered, then pausing again"),
                    "ack_pending": ack_pending,
                }),
                Warning::CopyRestarted { stream, from_seq } => json!({
                    "message": format!("{stream} copied nothing more through its paced durable (its state older than the copy after a server's crash, or lost): the durable was made again from {stream}'s next sequence {from_seq}"),
                    "stream": stream, "from_seq": from_seq,
                }),
                Warning::CommitUndone { error } => json!({
                    "message": "commit undone: A holds its subjects again",
                    "error": error,
                }),
                Warning::Skipped { what } => json!({ "message": what }),
                Warning::FenceUnacknowledged { fence, instances, waiting } => json!({
                    "message": if *waiting {
                        format!("instances {} have not acknowledged fence {fence}: the old consumer is not resumed to redeliver until they do (an instance known to be gone counts as live until its record's ttl_ms passes: remove it with `nats kv del CUTOVER inst.<STREAM>.<CONSUMER>.<INSTANCE>`)", instances.join(", "))
                    } else {
                        format!("instances {} did not acknowledge fence {fence} by the deadline: going on (the old consumer stays paused for good)", instances.join(", "))
                    },
                    "fence": fence,
                    "instances": instances,
                }),
                Warning::AckedAboveFence { fence, ack_floor } => json!({
                    "message": format!("the old consumer's ack floor reached {ack_floor}, above fence {fence}: messages {} to {ack_floor} were acknowledged on the old consumer and may be processed again from the new durable (the fence was read from a consumer leader that had not yet learned of their delivery, as after a leader change); `nats-cutover verify` names them", fence + 1),
                    "fence": fence,
                    "ack_floor": ack_floor,
                }),
                Warning::Stranded { stream, durables } => json!({
                    "message": format!("durable(s) {} appeared on {stream} after the commit (created by an application meanwhile): {stream} takes nothing new, so their applications receive nothing there; bind them to the new stream (delete them once they do); `nats-cutover verify` does not hold while they are there", durables.join(", ")),
                    "stream": stream,
                    "durables": durables,
                }),
                Warning::DeliveredAboveCheckpoint { checkpoint, delivered } => json!({
                    "message": format!("the old consumer, paused since checkpoint {checkpoint} was taken, shows messages delivered up to {delivered}: messages {} to {delivered} may be processed again from the new durable (the checkpoint was read from a consumer leader that had not yet learned of their delivery, as after a leader change); `nats-cutover verify` names them", checkpoint + 1),
                    "checkpoint": checkpoint,
                    "delivered": delivered,
                }),
                Warning::StillOnNewDurable { consumer, instances } => json!({
                    "message": format!("instance(s) {} still fetch from {consumer}, deleted by the rollback, after the route's deletion: the old consumer is given back anyway (its max_deliver is unlimited, so a message they nak as above the fence comes back after the nak's delay); check that they follow the route record (docs/protocol.md R1)", instances.join(", ")),
                    "consumer": consumer,
                    "instances": instances,
                }),
                Warning::ProceededWithout { instances } => json!({
                    "message": format!("going on although instances {} are still bound to the old consumer (told to proceed): it is settled to the fence, so they process nothing more; it is deleted at the end unless --keep-old-consumers keeps it paused for them to idle until replaced", instances.join(", ")),
                    "instances": instances,
                }),
            },
        }
    }
}

impl StepResult {
    fn detail(&self) -> Value {
        match self {
            StepResult::CreateB { created } => json!({ "created": created }),
            StepResult::CatchUp { origin_seq } => json!({ "origin_seq": origin_seq }),
            StepResult::MoveConsumers { moved } => json!({ "moved": moved }),
            StepResult::MovePublishers { a_final_seq, no_stream_window_ms, reconciled } => {
                let mut d = json!({ "a_final_seq": a_final_seq });
                if let Some(w) = no_stream_window_ms {
                    d["no_stream_window_ms"] = json!(w);
                }
                if *reconciled {
                    d["reconciled"] = json!(true);
                }
                d
            }
            StepResult::SubjectsShared { subjects } => json!({ "subjects": subjects }),
            StepResult::PublishersConfirmed { by, waited_ms, a_last_seq } => json!({
                "by": by, "waited_ms": waited_ms, "a_last_seq": a_last_seq,
            }),
            StepResult::HandedOver { x, freeze_ms } => json!({ "x": x, "freeze_ms": freeze_ms }),
            StepResult::Sealed | StepResult::SourceRemoved => json!({}),
            StepResult::Retired { deleted_old_stream, kept_old_consumers } => json!({
                "deleted_old_stream": deleted_old_stream,
                "kept_old_consumers": kept_old_consumers,
            }),
            StepResult::SubjectsRestored { subjects } => json!({ "subjects": subjects }),
            StepResult::ConsumerReset { reset_to } => json!({ "reset_to": reset_to }),
            StepResult::ConsumerRestored => json!({ "restored": true }),
            StepResult::BDeleted { stream } => json!({ "stream": stream }),
        }
    }
}

impl Progress {
    fn detail(&self) -> Value {
        match self {
            Progress::CatchUp { remaining, reported_lag } => {
                json!({ "remaining": remaining, "reported_lag": reported_lag })
            }
            Progress::WindowRestored { duplicate_window_ns, remaining_ms } => json!({
                "message": format!("B's duplicate window of {} s was set while B was copying (after its older history, at the hand-over, or again after a restarted server cleared a mirror's: jetstream.go fixCfgMirrorWithDedupWindow); B records msg-ids only from then on, so the commit (with the publishers split: B's taking of the subjects) waits {} s more, until a whole retry horizon has passed", duplicate_window_ns / 1_000_000_000, remaining_ms.div_ceil(1000)),
                "duplicate_window_ns": duplicate_window_ns,
                "remaining_ms": remaining_ms,
            }),
            Progress::WindowRaised { duplicate_window_ns, from_origin_seq } => json!({
                "duplicate_window_ns": duplicate_window_ns,
                "from_origin_seq": from_origin_seq,
            }),
            Progress::Draining { ack_pending, delivered, ack_floor } => json!({
                "ack_pending": ack_pending, "delivered": delivered, "ack_floor": ack_floor,
            }),
            Progress::DrainingUnpaused { num_pending, ack_pending } => json!({
                "num_pending": num_pending, "ack_pending": ack_pending, "paused": false,
            }),
            Progress::Settled { checkpoint, drain_ms } => {
                json!({ "checkpoint": checkpoint, "drain_ms": drain_ms })
            }
            Progress::Fenced { fence, b_start, translate_gets, fence_ms } => json!({
                "fence": fence, "b_start": b_start, "translate_gets": translate_gets,
                "fence_ms": fence_ms,
            }),
            Progress::FenceSettled { fence, settle_ms, ack_pending } => json!({
                "fence": fence, "settle_ms": settle_ms, "ack_pending": ack_pending, "settled": true,
            }),
            Progress::Rollout { on_old, on_new } => json!({ "on_old": on_old, "on_new": on_new }),
            Progress::AwaitFollowers { consumer, instances, deadline_ms } => json!({
                "awaiting_followers": instances, "on": consumer, "deadline_ms": deadline_ms,
            }),
            Progress::RollbackSettling {
                stream,
                ack_pending,
                delivered,
                ack_floor,
                waited_ms,
                timeout_ms,
            } => json!({
                "settling_on": stream, "ack_pending": ack_pending, "delivered": delivered,
                "ack_floor": ack_floor, "waited_ms": waited_ms, "timeout_ms": timeout_ms,
            }),
            Progress::AwaitPublishers {
                a_stored,
                interval_ms,
                a_last_seq,
                idle_ms,
                waited_ms,
                next,
            } => json!({
                "a_stored": a_stored, "interval_ms": interval_ms, "a_last_seq": a_last_seq,
                "idle_ms": idle_ms, "waited_ms": waited_ms, "next": next,
            }),
            Progress::Moved { checkpoint, b_start, translate_gets, gap_ms, longest_pause_ms } => {
                json!({
                    "moved": true,
                    "checkpoint": checkpoint,
                    "b_start": b_start,
                    "translate_gets": translate_gets,
                    "gap_ms": gap_ms,
                    "longest_pause_ms": longest_pause_ms,
                })
            }
        }
    }
}

impl Event {
    pub fn new(migration: &str, step: Step, kind: EventKind) -> Self {
        Event { ts_ms: crate::journal::now_ms(), migration: migration.into(), step, kind }
    }

    /// The documented JSON shape (docs/json.md).
    pub fn wire(&self) -> WireEvent {
        WireEvent {
            ts_ms: self.ts_ms,
            migration: self.migration.clone(),
            kind: self.kind.name().into(),
            step: self.step.to_string(),
            detail: self.kind.detail(),
        }
    }
}

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.wire().serialize(s)
    }
}

pub trait Sink: Send + Sync {
    fn emit(&self, e: Event);
}

/// Discards events.
pub struct NoSink;

impl Sink for NoSink {
    fn emit(&self, _: Event) {}
}

/// Collects events (tests, reports).
#[derive(Default)]
pub struct Collect(pub std::sync::Mutex<Vec<Event>>);

impl Sink for Collect {
    fn emit(&self, e: Event) {
        self.0.lock().unwrap().push(e);
    }
}

impl<F: Fn(Event) + Send + Sync> Sink for F {
    fn emit(&self, e: Event) {
        self(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_shape_is_the_documented_one() {
        let e = Event {
            ts_ms: 7,
            migration: "A.B".into(),
            step: Step::Consumer("w".into()),
            kind: EventKind::Progress(Progress::Settled { checkpoint: 42, drain_ms: 3 }),
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"ts_ms": 7, "migration": "A.B", "kind": "progress", "step": "consumer w",
                   "detail": {"checkpoint": 42, "drain_ms": 3}})
        );
        let done = Event {
            ts_ms: 8,
            migration: "A.B".into(),
            step: Step::CreateB,
            kind: EventKind::StepDone {
                ms: Some(1.5),
                result: StepResult::CreateB { created: true },
            },
        };
        assert_eq!(
            serde_json::to_value(&done).unwrap()["detail"],
            json!({"created": true, "ms": 1.5})
        );
    }
}
