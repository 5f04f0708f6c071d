//! The steps a plan lists, in order, each with what it does on this server
//! (strategies `source` and `mirror`; dual-write's are `super::dual`'s).

use super::document::{ConsumerPlan, Step};
use super::request::{InPlaceHop, Mode, PlanRequest, Strategy};
use crate::version::Features;
use std::time::Duration;

/// Why `run` waits for no timer (see [`Plan::timer_note`]).
pub(super) const TIMER_NOTE: &str = "no quiescent interval is waited for: the exact signal is num_ack_pending = 0 on a paused consumer. The seed's ack_wait × (max_pending + 1) is not a bound of anything: redelivery timers run per message and in parallel (max_ack_pending limits how many are in flight, not how many ack_waits pass one after another), it ignores backoff and max_deliver, and no timer can prove that a slow worker has finished";

/// How each consumer's checkpoint is taken and carried to B.
pub(super) fn checkpoint_rule(req: &PlanRequest) -> String {
    if req.mode.is_fenced() {
        return format!(
            "fence: pause the old consumer and read it twice; F = delivered.stream_seq at once (messages up to F may still be in processing: no wait); the new durable on {to} starts at the first message after F ({how}) and the route says `fenced`; instances keep processing the old consumer's messages up to F and nak those above it, and fetch the new durable meanwhile; the old consumer is retired once its ack floor reached F (or nothing is ack-pending) and every live instance acknowledged the fence (docs/protocol.md)",
            to = req.to,
            how = if req.strategy == Strategy::Mirror { "F + 1, the same sequences" } else { "by its Nats-Stream-Source origin sequence, O(log N) message gets: direct gets on an R1 stream that allows them, else through the leader" }
        );
    }
    if req.strategy == Strategy::Mirror {
        return format!(
            "pause the old consumer; wait until num_ack_pending = 0 (a pause is bounded: after min(run --max-pause, default 5 s, and ack_wait) without ack progress the consumer is resumed for as long and paused again); F = delivered.stream_seq; {} mirrors {} with the same sequences, so the new durable starts at F + 1 once {} holds F; it is created only once positioned",
            req.to, req.from, req.to
        );
    }
    format!(
        "pause the old consumer; wait until num_ack_pending = 0 (a pause is bounded: after min(run --max-pause, default 5 s, and ack_wait) without ack progress, from a dead worker, a nak with backoff or a client's partial batch, the consumer is resumed for as long and paused again; the longest pause is reported; a consumer that never settles within --settle-timeout is resumed and nothing moves); F = delivered.stream_seq (every sequence <= F was delivered and settled, or not selected by the filter; the ack floor is not used: MaxDeliver-exhausted messages keep it below F); the new durable on {} starts at the first sequence whose Nats-Stream-Source origin sequence is > F, found by O(log N) message gets (direct gets on an R1 stream that allows them, else through the leader: a follower may not hold the tail yet); it is created only once positioned", req.to
    )
}

/// What `create B` does: nothing if B exists, else the configuration it gets.
fn create_b_detail(req: &PlanRequest, b_exists: bool, dw: Duration, features: Features) -> String {
    let mirror = req.strategy == Strategy::Mirror;
    if b_exists {
        format!("{} exists: checked compatible and sourcing {}", req.to, req.from)
    } else if mirror {
        format!(
                "create {} mirroring {}, no subjects, duplicate_window {dw:?} (A's: the mirror records the msg-ids it stores, for retries after the promotion)",
                req.to, req.from
            )
    } else {
        format!(
            "create {} sourcing {}, no subjects, allow_direct, duplicate_window {dw:?} (A's){}",
            req.to,
            req.from,
            if features.sourcing_streams_get_no_default_dedup_window {
                "; it sources without dedup until it holds A's history older than one window, so msg-ids A stored again after its window are all kept"
            } else {
                "; before 2.14 a sourcing stream cannot turn dedup off: msg-ids reused in A's history within that window of each other can be dropped while B catches up"
            }
        )
    }
}

/// The step that hands one consumer over, by mode.
fn consumer_step(req: &PlanRequest, c: &ConsumerPlan) -> (String, String) {
    if req.mode.is_fenced() {
        return (format!("fence consumer {}", c.name), format!(
            "pause {}/{n} and take the fence F (its last delivered sequence), create durable {n} on {} at the next sequence, publish the route `fenced`; wait until the old consumer acknowledged everything up to F (`settled`) and every live instance acknowledged the fence (`moved`){}",
            req.from, req.to,
            if req.mode == Mode::Rolling { "; then wait until no live instance is bound to the old consumer (or --proceed)" } else { "" },
            n = c.name
        ));
    }
    (format!("move consumer {}", c.name), format!(
        "pause {}/{n}, settle, checkpoint F, translate F to {}, create durable {n} on {} at the next sequence{}; publish the new route in the control record",
        req.from, req.to, req.to,
        if c.push { " with the same deliver subject/group (subscribers keep receiving)" } else { "" },
        n = c.name
    ))
}

/// What the commit-point step says of publishers that never retry.
const BRIDGE: &str = "the runner itself answers the window's publishes (unless --no-answer-publishes): one with a Nats-Msg-Id is stored once a stream holds the subjects and gets that stream's ack, one without gets \"no responders\" as soon as no stream can store it, so none waits for its timeout (on a cluster the server sometimes leaves one unanswered)";

/// The steps `run` takes, in order.
pub(super) fn steps(
    req: &PlanRequest,
    b_exists: bool,
    dw: Duration,
    features: Features,
    consumers: &[ConsumerPlan],
    b_final_subjects: &[String],
    handover: Option<(Duration, Option<&str>)>,
) -> Vec<Step> {
    let mirror = req.strategy == Strategy::Mirror;
    let mut steps = vec![];
    let mut add = |title: &str, detail: String| {
        let n = steps.len() as u32 + 1;
        steps.push(Step { n, title: title.into(), detail });
    };
    add("validate", "check every setting as in this report; refuse before the first write if anything is unsafe".into());
    add("journal", "record the migration in KV bucket CUTOVER (plan, step, checkpoints), take the lease on the source stream".into());
    add("create B", create_b_detail(req, b_exists, dw, features));
    add(
        "catch up",
        if mirror {
            format!(
                "wait until {}'s last sequence reaches {}'s (a mirror keeps A's sequences)",
                req.to, req.from
            )
        } else {
            format!("wait until {}'s newest Nats-Stream-Source origin sequence reaches {}'s last sequence (sequences compared, not the lag field)", req.to, req.from)
        },
    );
    for c in consumers {
        let (title, detail) = consumer_step(req, c);
        add(&title, detail);
    }
    if let Some((h, freeze)) = handover.filter(|_| mirror) {
        let how = match freeze {
            Some(why) => format!("in a freeze, as {a} could remove a message {b}'s source has not read yet ({why}): update {a}: subjects released (publishes get no responders and are retried, or are held by the runner; about 0.2 s, and longer for a big {b}: the server scans {b}'s messages when it adds a source, 2.5 s for 200,000 on R3); wait until {b} holds exactly {a}'s last message X-1; one update of {b}: mirror removed, source {a} from X with duplicate_window {dw:?}; wait until its source is set up; {a} takes its subjects back", a = req.from, b = req.to),
            None => format!("live, {a} serving its publishers throughout (it removes no message that new): one update of {b}: mirror removed, duplicate_window {dw:?}; once {b}'s last sequence X-1 holds still, one update of {b}: source {a} from X; wait until its source is set up ({b}'s consumers get nothing new for that long: the server scans {b}'s messages when it adds a source, 2.5 s for 200,000 on R3)", a = req.from, b = req.to),
        };
        add("hand over", format!(
            "this server drops a mirror's duplicate window, so {b} becomes a sourcing stream with it before the commit, {how}. Then one retry horizon ({h:?}) passes before the commit, so a retry of a publish {a} stored meets its id in {b}'s window. Every message {b} sources from X must carry origin sequence = its own sequence (checked at the commit: a message {a} removed during a source restart would shift {b}, and the commit is then refused)",
            a = req.from, b = req.to
        ));
    }
    if mirror {
        add("commit point: move publishers", format!(
            "update {a}: subjects [], wait until {b} holds every message {a} stored, promote {b} (remove its mirror and take subjects {s:?} in one update); publishes in between get no responders and are retried with the same Nats-Msg-Id, and a retry of a message {a} already stored meets its id in {b}'s window; {BRIDGE}",
            a = req.from, b = req.to, s = b_final_subjects
        ));
        add("seal A", format!("seal {} (nothing can enter it any more)", req.from));
        let retire = match req.in_place {
            Some(InPlaceHop::Out) if req.external.is_some() => format!(
                "delete the old consumers; {} stays sealed on the source side (a move across systems keeps the old copy)",
                req.from
            ),
            Some(InPlaceHop::Out) => {
                format!("delete the old consumers and {} (frees its name for hop 2)", req.from)
            }
            Some(InPlaceHop::Back) => {
                format!("delete the old consumers and the temporary stream {}", req.from)
            }
            None => format!(
                "delete the old consumers on {}; keep sealed {} unless --delete-old",
                req.from, req.from
            ),
        };
        add("retire", retire);
        return steps;
    }
    add("commit point: move publishers", format!(
        "update {a}: subjects [], wait until {b} holds every message {a} stored, update {b}: subjects {s:?}; publishes in between get no responders and are retried with the same Nats-Msg-Id, and a retry of a message {a} already stored meets its sourced copy in {b}'s duplicate window; {BRIDGE}",
        a = req.from, b = req.to, s = b_final_subjects
    ));
    add(
        "seal A and finish sourcing",
        format!("seal {} (nothing can enter it any more), remove {}'s source", req.from, req.to),
    );
    add(
        "retire",
        format!(
            "delete the old consumers on {}; keep sealed {} unless --delete-old",
            req.from, req.from
        ),
    );
    steps
}
