//! The world the runner works in: streams A and B, the durable consumers,
//! the publisher and the worker, and the state the runner keeps (its
//! journal in KV, the route record, its own position in its program).
//!
//! Sequences are 1-based as on the server; sets of sequences are bitmasks
//! (bit `s` is sequence `s`), msg-ids are the message's index (`m1` is 0).

use cutover_core::journal::{ConsumerPhase, Phase};
use std::hash::{Hash, Hasher};

/// Most messages a check may publish (bitmasks of ids are `u8`).
pub const MAX_MSGS: usize = 4;

pub fn bit(i: u8) -> u16 {
    1u16 << i
}

/// A stored message: its msg-id and, for a copy B sourced, A's sequence
/// (0: published to the stream directly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Msg {
    pub id: u8,
    pub origin: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Stream {
    pub msgs: Vec<Msg>,
    /// It holds the publishers' subjects: a publish is stored here.
    pub owns: bool,
    pub sealed: bool,
    /// Its duplicate window is set: it records the msg-ids it stores and
    /// drops a message whose id it recorded (the model's windows outlast
    /// every retry: the retry horizon is shorter than A's window).
    pub dedup: bool,
    /// Msg-ids recorded while `dedup` was set.
    pub ids: u8,
}

impl Stream {
    pub fn new(owns: bool, dedup: bool) -> Self {
        Stream { msgs: vec![], owns, sealed: false, dedup, ids: 0 }
    }

    pub fn last_seq(&self) -> u8 {
        self.msgs.len() as u8
    }

    /// Stores `m` unless the window knows its id; true if stored.
    pub fn store(&mut self, m: Msg) -> bool {
        let b = 1u8 << m.id;
        if self.dedup && self.ids & b != 0 {
            return false;
        }
        if self.dedup {
            self.ids |= b;
        }
        self.msgs.push(m);
        true
    }

    /// The message at `seq`, if any.
    pub fn at(&self, seq: u8) -> Option<Msg> {
        seq.checked_sub(1).and_then(|i| self.msgs.get(i as usize)).copied()
    }
}

/// B: a stream that sources A (until its source is removed).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BStream {
    pub s: Stream,
    pub sourcing: bool,
    /// A's sequences B's source has processed (copied, or dropped as a
    /// duplicate): the next one it copies is `sourced + 1`.
    pub sourced: u8,
    /// A mirror (stores every message it copies, recording ids without
    /// checking them), until its promotion.
    pub mirror: bool,
}

impl BStream {
    /// The origin of B's last message (the translation's upper anchor).
    pub fn last_origin(&self) -> Option<u8> {
        self.s.msgs.last().map(|m| m.origin)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pause {
    No,
    /// The drain's renewable pause.
    Drain,
    /// Paused for good (far-future `pause_until`).
    Forever,
}

/// A durable pull consumer with explicit acks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cons {
    pub exists: bool,
    /// Its first stream sequence (`opt_start_seq`; 1 for A's durable).
    pub start: u8,
    /// The next stream sequence it delivers: `delivered.stream_seq` is `next - 1`.
    pub next: u8,
    /// Delivered and not acknowledged (`num_ack_pending`).
    pub pending: u16,
    /// Pending messages whose worker died: redelivered once ack_wait expired.
    pub due: u16,
    /// Delivered a second time (for `max_deliver` 2).
    pub again: u16,
    /// Due because an instance nak'd it (with the protocol's delay).
    pub nakd: u16,
    pub acked: u16,
    /// Left pending for good without an ack: `max_deliver` reached.
    pub exhausted: u16,
    pub paused: Pause,
}

impl Cons {
    pub fn new(start: u8) -> Self {
        Cons {
            exists: true,
            start,
            next: start,
            pending: 0,
            due: 0,
            again: 0,
            nakd: 0,
            acked: 0,
            exhausted: 0,
            paused: Pause::No,
        }
    }

    pub fn gone() -> Self {
        Cons { exists: false, ..Cons::new(1) }
    }

    pub fn delivered(&self) -> u8 {
        self.next - 1
    }

    /// The highest sequence up to which every message was acknowledged
    /// (an exhausted message stops it: it was never acked).
    pub fn ack_floor(&self) -> u8 {
        let mut f = self.start - 1;
        while self.acked & bit(f + 1) != 0 {
            f += 1;
        }
        f
    }

    pub fn paused(&self) -> bool {
        self.paused != Pause::No
    }
}

/// What the one worker holds: a delivery of the old (`new: false`) or the
/// new durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Held {
    pub new: bool,
    pub seq: u8,
    pub id: u8,
    pub processed: bool,
    /// Fence mode: the fence the worker knew when it fetched it (an old
    /// delivery above it stays nak'd, even if the route is gone by the time
    /// it is handled: docs/protocol.md, *The fence holds what was fetched
    /// under it*).
    pub fetched_under: Option<u8>,
}

/// The route record's state (docs/protocol.md): drain mode writes it
/// `moved` at once; fence mode `fenced`, `settled`, then `moved`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rs {
    None,
    Fenced,
    Settled,
    Moved,
}

/// A phase of `cutover_core::journal` as state (hashed by variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ph(pub Phase);

impl Hash for Ph {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(&self.0).hash(h)
    }
}

/// A consumer phase of `cutover_core::journal` as state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cph(pub ConsumerPhase);

impl Hash for Cph {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(&self.0).hash(h)
    }
}

/// The journal as the KV bucket holds it (what survives a crash): the
/// head's phase and `created_b`, the one consumer's record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Jrnl {
    pub phase: Ph,
    pub created_b: bool,
    pub c: Cph,
    pub checkpoint: Option<u8>,
    pub b_start: Option<u8>,
    /// The settled read's delivered sequence (`evidence`).
    pub evidence: Option<u8>,
}

/// Who acts for the migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Run {
    /// A runner (`run`, or `run --resume`) is executing its steps.
    Running,
    /// A rollback is executing its steps.
    RollingBack,
    /// The runner died holding something (an exposure open): its guard acts next.
    Dead,
    /// Nobody acts: the run failed, or died and its guard finished. The
    /// operator may resume or roll back.
    Stopped,
    /// The run ended done, or a rollback ended.
    Finished,
}

/// Where the runner (or the rollback) is in its program: the step it
/// performs next. See `runner.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pc {
    Idle,
    CreateB,
    CreateBCreate,
    CreateBJournal,
    CreateBDone,
    CatchUp,
    CatchUpWait,
    MoveBegin,
    HoldsPause,
    DrainPause,
    DrainRead,
    CutWait,
    PauseForever,
    JournalSettled,
    Translate,
    JournalCreating,
    CreateDurable,
    JournalCreated,
    WriteRoute,
    MoveDone,
    Commit,
    CommitKeepUp,
    JournalReleased,
    ReleaseA,
    CommitWait,
    CommitUndone,
    TakeSubjects,
    JournalMoved,
    Seal,
    JournalSealed,
    RemoveSource,
    JournalSourceRemoved,
    Retire,
    JournalDone,
    FGate,
    FRead,
    FForever,
    FPublishFenced,
    JournalFenced,
    FSettle,
    FRedeliverWait,
    FPublishSettled,
    FAwaitAcks,
    FPublishMoved,
    RbRestore,
    RbPauseNew,
    RbSettleNew,
    RbConsumer,
    RbAwaitFollow,
    RbDeleteB,
    RbJournal,
}

/// The runner's memory (lost with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Local {
    /// The checkpoint F being moved.
    pub f: u8,
    /// The translated start on B.
    pub start: u8,
    /// A's last sequence a wait is for.
    pub target: u8,
    /// The run holds something a guard must give back if it dies
    /// (`Exposure`: the consumer moves, the commit window).
    pub exposed: bool,
    /// Fence mode: the old durable is paused for good and no route names
    /// the new one yet (no guard covers it: docs/safety.md's known limit).
    pub held: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The publisher's current message (every one before it was acknowledged).
    pub next_pub: u8,
    pub a: Stream,
    pub b: Option<BStream>,
    /// The old durable on A and the new one on B.
    pub old: Cons,
    pub new: Cons,
    /// The route record `route.A.c` exists: the worker follows it to the new durable.
    pub route: bool,
    /// Its state, and the fence F it carries.
    pub rstate: Rs,
    pub route_f: u8,
    /// Fence mode: the route as the worker (a protocol instance) last read
    /// it, and whether its registration acknowledged the fence.
    pub knows: Rs,
    pub known_f: u8,
    pub fence_acked: bool,
    pub held: Option<Held>,
    /// Per msg-id: the sequences each durable's worker processed it at
    /// (a redelivery of the same sequence sets the same bit).
    pub proc_old: [u16; MAX_MSGS],
    pub proc_new: [u16; MAX_MSGS],
    pub journal: Jrnl,
    pub run: Run,
    pub pc: Pc,
    pub local: Local,
    /// Ghost: A's last sequence catch-up waited for, when it journaled `caught_up`.
    pub caught_up_at: Option<u8>,
    /// Ghost: B was created by this migration's runner.
    pub b_ours: bool,
    pub commit_failures_left: u8,
    pub journal_faults_left: u8,
    /// Ghost: the runner died holding something and no guard ran: the
    /// operator's resume or rollback gives it back.
    pub unguarded: bool,
    /// Ghost: what the recovery paths did on this path (bits): 1 a resume
    /// reused a journaled checkpoint (`checkpoint_holds`), 2 a resume found
    /// it stale and drained again, 4 the guard gave a consumer back, 8 the
    /// guard routed a consumer whose new durable existed.
    pub seen: u8,
    /// Ghost: a publish to B was answered as a duplicate (B's window knew its id).
    pub dup_in_b: bool,
    /// Journaled (`window_since_ms`): B's window was raised over copies it
    /// had made without one, and a retry horizon has not passed since: the
    /// commit waits (recheck::window_holds).
    pub window_since: bool,
    /// The publisher's current message was first sent before that raise:
    /// once the horizon passes it is retried no more.
    pub pub_old: bool,
    /// Ghost: msg-ids some durable gave up on (`max_deliver` exhausted):
    /// the application's own setting, not the migration's loss.
    pub gave_up: u8,
    // What is left of each bound.
    pub lost_left: u8,
    pub crashes_left: u8,
    pub deaths_left: u8,
    pub cuts_left: u8,
    pub ops_left: u8,
}

impl State {
    /// The durable the worker reads from: the new one once the route says so.
    pub fn serving(&self) -> &Cons {
        if self.route {
            &self.new
        } else {
            &self.old
        }
    }

    pub fn cons(&self, new: bool) -> &Cons {
        if new {
            &self.new
        } else {
            &self.old
        }
    }

    pub fn cons_mut(&mut self, new: bool) -> &mut Cons {
        if new {
            &mut self.new
        } else {
            &mut self.old
        }
    }

    /// The stream a durable reads.
    pub fn stream_of(&self, new: bool) -> Option<&Stream> {
        if new {
            self.b.as_ref().map(|b| &b.s)
        } else {
            Some(&self.a)
        }
    }

    pub fn b_owns(&self) -> bool {
        self.b.as_ref().is_some_and(|b| b.s.owns)
    }

    /// B holds every message of A (its source processed A's last sequence).
    pub fn b_holds_a(&self) -> bool {
        self.b.as_ref().is_some_and(|b| b.sourced >= self.a.last_seq())
    }

    pub fn processed(&self, id: u8) -> bool {
        self.proc_old[id as usize] | self.proc_new[id as usize] != 0
    }

    /// How many distinct deliveries (durable, sequence) processed `id`.
    pub fn processings(&self, id: u8) -> u32 {
        self.proc_old[id as usize].count_ones() + self.proc_new[id as usize].count_ones()
    }
}
