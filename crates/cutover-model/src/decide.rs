//! The core's real decision functions, fed with the model's state: the
//! plan (built once by `cutover_core::plan::build` from server JSON shaped
//! like the model's A), the settled rule (`checkpoint::assess`), the
//! translation search (`checkpoint::TranslateSearch` probing the model's
//! B) and its readiness (`checkpoint::holds_through`), the phases
//! (`journal::Phase`, `Phase::next_step`, `Journal::can_roll_back`), a
//! consumer's resume (`ConsumerProgress::resume`, `evidence_holds`) and
//! the server's features (`version::Features`). Nothing here decides on
//! its own.

use crate::config::Config;
use crate::world::{BStream, Cons, Jrnl, Stream};
use cutover_core::checkpoint::{self, assess, TranslateSearch};
use cutover_core::journal::{ConsumerProgress, Journal, Settled};
use cutover_core::model::{AckPolicy, ConsumerConfig, ConsumerInfo, SequenceInfo};
use cutover_core::plan::{build, Plan, PlanRequest, ServerChecks, ServerFacts};
use cutover_core::version::Features;
use serde_json::json;

/// A's duplicate window in the model: two minutes, the server's default.
pub const A_WINDOW_NS: i64 = 120_000_000_000;

/// What the plan and the server's version decided, read once per check.
pub struct Rules {
    pub plan: Plan,
    /// A journal of that plan (its phase is set per question).
    journal: Journal,
    pub features: Features,
    /// B's duplicate window per the plan (`plan::b_config_from`: A's own).
    pub plan_window_ns: i64,
    /// The publishers' retry horizon per the plan.
    pub horizon_ns: i64,
}

impl Rules {
    pub fn new(cfg: &Config) -> Rules {
        let consumer = json!({
            "name": "c", "stream_name": "A",
            "config": {"durable_name": "c", "ack_policy": "explicit",
                "max_deliver": if cfg.max_deliver == 0 { -1 } else { cfg.max_deliver as i64 }},
            "delivered": {"stream_seq": 0}, "ack_floor": {"stream_seq": 0},
        });
        let facts = ServerFacts {
            version: cfg.server,
            a_raw: json!({
                "config": {"name": "A", "subjects": ["orders.>"], "duplicate_window": A_WINDOW_NS},
                "state": {"messages": 0, "bytes": 0, "first_seq": 0, "last_seq": 0},
            }),
            b_raw: None,
            consumers_raw: vec![consumer],
            other_consumers: vec![],
            downstream: vec![],
            account: None,
            checks: ServerChecks {
                live_instances: Some(vec![("c".into(), 1)]),
                ..Default::default()
            },
        };
        let req = PlanRequest {
            strategy: cfg.strategy,
            mode: cfg.mode,
            ..PlanRequest::source("A", "B", &["c"])
        };
        let plan = build(&req, &facts).expect("the model's plan");
        assert!(plan.safe, "the model's plan is unsafe: {}", plan.unsafe_reasons());
        let plan_window_ns = plan.b_config["duplicate_window"].as_i64().unwrap_or(0);
        let horizon_ns = plan.retry_horizon_ms as i64 * 1_000_000;
        let journal =
            Journal::new(plan.clone(), vec!["orders.>".into()], &[("c".into(), None)], false, 0);
        Rules { features: cfg.server.features(), plan, journal, plan_window_ns, horizon_ns }
    }

    /// B mirrors A (the plan's B configuration has a `mirror`).
    pub fn mirror(&self) -> bool {
        self.plan.b_config.get("mirror").is_some_and(|m| !m.is_null())
    }

    /// Whether B gets a duplicate window when it is created: the plan's,
    /// unless it sources A on a server that gives a sourcing stream none
    /// (2.14+, `engine/steps/create.rs` `dedup_off_while_sourcing`; a mirror
    /// checks no msg-id, so it keeps the plan's).
    pub fn b_created_with_window(&self) -> bool {
        self.plan_window_ns > 0
            && (self.mirror() || !self.features.sourcing_streams_get_no_default_dedup_window)
    }

    /// Whether a window of the plan's length covers the retry horizon
    /// (catch-up's and the commit's check).
    pub fn window_covers_horizon(&self, window_ns: i64) -> bool {
        window_ns >= self.horizon_ns
    }

    /// `Journal::can_roll_back` for the model's journal.
    pub fn can_roll_back(&self, j: &Jrnl) -> bool {
        let mut real = self.journal.clone();
        real.phase = j.phase.0;
        real.can_roll_back()
    }
}

/// The consumer's info as the server would report it.
pub fn consumer_info(c: &Cons, stream: &Stream, max_deliver: u8) -> ConsumerInfo {
    let delivered = c.delivered() as u64;
    let floor = c.ack_floor() as u64;
    ConsumerInfo {
        stream_name: String::new(),
        name: "c".into(),
        config: ConsumerConfig {
            ack_policy: AckPolicy::Explicit,
            max_deliver: if max_deliver == 0 { -1 } else { max_deliver as i64 },
            opt_start_seq: Some(c.start as u64),
            ..Default::default()
        },
        delivered: SequenceInfo { consumer_seq: delivered, stream_seq: delivered },
        ack_floor: SequenceInfo { consumer_seq: floor, stream_seq: floor },
        num_ack_pending: c.pending.count_ones() as u64,
        num_redelivered: c.again.count_ones() as u64,
        num_waiting: 0,
        num_pending: (stream.last_seq() as u64).saturating_sub(delivered),
        paused: c.paused(),
    }
}

/// The checkpoint the settled rule gives (`assess`: stable, then F), or
/// with `from_floor` (mutant `ack-floor`) the ack floor in its place.
pub fn checkpoint(ci: &ConsumerInfo, from_floor: bool) -> Option<u8> {
    let a = assess(ci);
    if !a.stable {
        return None;
    }
    let f = if from_floor { ci.ack_floor.stream_seq } else { a.checkpoint? };
    Some(f as u8)
}

/// A mirror's translation (`translate_once`): F + 1 once the mirror holds
/// F, or A has nothing between what it holds and F.
pub fn mirror_start(b: &BStream, a_last: u8, f: u8) -> Option<u8> {
    let last = b.s.last_seq();
    // next_matching(A, from last + 1): last + 1 if A has it.
    let next = (last < a_last).then_some(last as u64 + 1);
    let held = checkpoint::holds_through(Some(last as u64), next, f as u64);
    held.then_some(f + 1)
}

/// Whether B has sourced enough to translate F (`translate_once`: its
/// last message's origin is at or past F, or A has nothing B sources
/// between that origin and F).
pub fn sourced_enough(b: &BStream, a_last: u8, f: u8) -> bool {
    let reach = b.last_origin();
    let lo = reach.unwrap_or(0);
    // next_sourced(A, after lo): lo + 1 if A has it.
    let next = (lo < a_last).then_some(lo as u64 + 1);
    checkpoint::holds_through(reach.map(u64::from), next, f as u64)
}

/// The model's journaled consumer as the core's `ConsumerProgress`, for
/// the core's resume rule (`resume`, `evidence_holds`).
pub fn progress(j: &Jrnl) -> ConsumerProgress {
    let mut p = ConsumerProgress::waiting("c", None);
    p.phase = j.c.0;
    p.checkpoint = j.checkpoint.map(u64::from);
    p.b_start = j.b_start.map(u64::from);
    p.evidence = j.evidence.map(|d| Settled {
        delivered_stream_seq: d as u64,
        ack_floor_stream_seq: 0,
        num_ack_pending: 0,
        num_pending: 0,
        paused: true,
    });
    p
}

/// `TranslateSearch` driven against B's messages as `translate_once`
/// drives it with message gets (the first message at or after a probed
/// sequence, up to B's last): the first sequence of B after origin F.
pub fn translate(b: &BStream, f: u8) -> u8 {
    let msgs = &b.s.msgs;
    let last = msgs.len() as u64;
    let first = if msgs.is_empty() { 0 } else { 1 };
    let last_origin = b.last_origin().map(u64::from);
    let mut s = TranslateSearch::new(f as u64, first, last, last_origin);
    let mut gets = 0;
    while let Some(p) = s.next_probe() {
        let probe = (p.max(1)..=last).map(|seq| (seq, msgs[seq as usize - 1].origin as u64)).next();
        s.observe(probe);
        gets += 1;
        assert!(gets < 64, "translation does not converge");
    }
    s.result().expect("search finished") as u8
}
