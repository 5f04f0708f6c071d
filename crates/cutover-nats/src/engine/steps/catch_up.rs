//! Step `catch_up`: B holds everything A held when the step began, and has
//! A's duplicate window (raised once B holds A's history older than it).
//! [`Stall`] and [`Pace`] bound every wait for sourcing by progress.

use crate::engine::ctx::Ctx;
use crate::engine::events::{EventKind, Progress, StepResult};
use crate::engine::progress::{source_progress, SourceProgress};
use crate::error::{Error, Result};
use cutover_core::journal::{Phase, Step};
use cutover_core::model::nanos;
use serde_json::json;
use std::time::{Duration, Instant};

pub(in crate::engine) async fn catch_up(ctx: &Ctx<'_>) -> Result<()> {
    let t = ctx.begin(Step::CatchUp).await?;
    let (from, to) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone())
    };
    // A mirror the server keeps no window on gets it at its hand-over to
    // sourcing (super::handover), checked there.
    let handover = ctx.journal.lock().await.plan.handover;
    if !handover {
        raise_window(ctx, &from, &to).await?;
    }
    // The retry guarantee rests on B's duplicate window as the server applies it
    // (2.14+ gives a sourcing stream none unless set): check what it reports.
    let (_, b) = ctx.js.stream_info(&to).await?;
    let wanted = ctx.journal.lock().await.plan.retry_horizon_ms as i64 * 1_000_000;
    if b.config.duplicate_window < wanted && !handover {
        return Err(Error::Unsafe(format!(
            "{to} reports duplicate_window {} ns, less than the publishers' retry horizon {wanted} ns: retried publishes could land twice; set it on {to} (nats stream edit {to} --dupe-window) and run again",
            b.config.duplicate_window
        )));
    }
    // A moves on under load: catching up means sourcing what A held when this
    // step began; the consumer step waits for exactly what it needs.
    let (_, a) = ctx.js.stream_info(&from).await?;
    let target = a.state.last_seq;
    let mut last_emit = Instant::now();
    let mut stall = Stall::new(ctx.opts.stall_timeout);
    let mut pace = Pace::new(ctx.opts.catch_up_window);
    let mut repairs = 0;
    loop {
        let p = source_progress(ctx.js, &to, &from).await?;
        if p.caught_up || p.sourced_origin_seq.is_some_and(|s| s >= target) {
            break;
        }
        let checked = match stall.check_why(ctx.js, &p, &to, &from).await {
            Ok(()) => pace.check(&p, &to, &from),
            e => e,
        };
        if let Err(e) = checked {
            // The cause, or a repair (then the wait starts again).
            stalled(ctx, (&from, &to), e, repairs < 3).await?;
            repairs += 1;
            (stall, pace) =
                (Stall::new(ctx.opts.stall_timeout), Pace::new(ctx.opts.catch_up_window));
            continue;
        }
        if last_emit.elapsed() > Duration::from_millis(250) {
            let remaining = target.saturating_sub(p.sourced_origin_seq.unwrap_or(0));
            let progress = Progress::CatchUp { remaining, reported_lag: p.reported_lag };
            ctx.emit(Step::CatchUp, EventKind::Progress(progress));
            last_emit = Instant::now();
        }
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
    ctx.done(Step::CatchUp, t, Some(Phase::CaughtUp), StepResult::CatchUp { origin_seq: target })
        .await
}

/// A wait for sourcing that failed (`e`: nothing new for the stall timeout,
/// or B slower than A). What the server does not report comes first: B's
/// limits changed since the plan (a newcomer's `max_msg_size` lowered
/// below the messages' size stalled the copy, and the run said "run again
/// when ingest is lower", 2 of 2). Then, where B received nothing and
/// reads A through the paced durable, the durable is made again from B's
/// next sequence (`Ok`: the caller waits again): a server killed (SIGKILL)
/// under the copy came back with the durable's state older than what B had
/// stored (delivered 64,600, B at 66,228), and the mirror waited for good
/// (2 of 2). Else `e`.
async fn stalled(ctx: &Ctx<'_>, (from, to): (&str, &str), e: Error, repair: bool) -> Result<()> {
    // Named already (a message too large with its source header: its size
    // and the limit it needs say more than the changed limits).
    if !matches!(e, Error::Stuck(_) | Error::FallingBehind { .. }) {
        return Err(e);
    }
    if let Some((changed, way)) = super::recheck::limits_changed(ctx, from, to).await? {
        return Err(Error::Unsafe(format!(
            "{to} copies nothing more from {from}, and its limits were changed after the plan ({changed}): a message they refuse (larger than max_msg_size, or past a limit with discard new) stops the copy for good; nothing was released, {from} serves the publishers; {way}"
        )));
    }
    let received_nothing = match &e {
        Error::Stuck(_) => true,
        Error::FallingBehind { b_per_s, .. } => *b_per_s <= 0.0,
        _ => false,
    };
    if repair && received_nothing {
        if let Some(from_seq) = super::create::repace_stalled(ctx, from, to).await? {
            let w = crate::engine::events::Warning::CopyRestarted { stream: to.into(), from_seq };
            ctx.emit(Step::CatchUp, EventKind::Warning(w));
            return Ok(());
        }
    }
    Err(e)
}

/// B must receive A's messages at least as fast as A stores them, or the
/// commit could never close: judged over a window of reads
/// (`cutover_core::catchup`).
struct Pace {
    watch: cutover_core::catchup::Watch,
    started: Instant,
}

impl Pace {
    fn new(window: Duration) -> Self {
        Self {
            watch: cutover_core::catchup::Watch::new(window.as_millis() as u64),
            started: Instant::now(),
        }
    }

    fn check(&mut self, p: &SourceProgress, to: &str, from: &str) -> Result<()> {
        let sample = cutover_core::catchup::Sample {
            at_ms: self.started.elapsed().as_millis() as u64,
            a_last: p.origin_last_seq,
            b_origin: p.sourced_origin_seq.unwrap_or(0),
        };
        match self.watch.push(sample) {
            None => Ok(()),
            Some(f) => Err(Error::FallingBehind {
                from: from.into(),
                to: to.into(),
                window_s: f.window_ms as f64 / 1000.0,
                a_per_s: f.a_per_s,
                b_per_s: f.b_per_s,
                lag_from: f.lag_from,
                lag_to: f.lag_to,
            }),
        }
    }
}

/// Waits for sourcing are bounded by progress, not by time: B may take hours
/// to catch up a large stream, but not `limit` without sourcing anything new
/// while A has more (a source error, a duplicate msg-id that stalls sourcing
/// on servers before 2.12.8, a full account).
pub(in crate::engine) struct Stall {
    limit: Duration,
    last: Option<u64>,
    since: Instant,
}

impl Stall {
    pub(in crate::engine) fn new(limit: Duration) -> Self {
        Self { limit, last: None, since: Instant::now() }
    }

    /// [`Stall::check`], and when sourcing stalled, the reason the server
    /// does not report (a stalled source shows no error and lag 0): the
    /// next message of A as B would store it, with its source header, above
    /// B's `max_msg_size` (the source tries it again every 2 s, for good).
    pub(in crate::engine) async fn check_why(
        &mut self,
        js: &crate::api::Js,
        p: &SourceProgress,
        to: &str,
        from: &str,
    ) -> Result<()> {
        let Err(e) = self.check(p, to, from) else { return Ok(()) };
        Err(too_large(js, p, to, from).await.unwrap_or(None).unwrap_or(e))
    }

    pub(in crate::engine) fn check(
        &mut self,
        p: &SourceProgress,
        to: &str,
        from: &str,
    ) -> Result<()> {
        if p.sourced_origin_seq != self.last || p.caught_up {
            self.last = p.sourced_origin_seq;
            self.since = Instant::now();
            return Ok(());
        }
        if self.since.elapsed() > self.limit {
            return Err(Error::Stuck(format!(
                "{to} sourced nothing new from {from} for {:?} (it holds origin {} of {}'s {}): see the source's error with `nats stream info {to}` (a duplicate msg-id stalls sourcing on servers before 2.12.8; a full account stops it)",
                self.limit,
                p.sourced_origin_seq.map(|s| s.to_string()).unwrap_or_else(|| "none".into()),
                from,
                p.origin_last_seq
            )));
        }
        Ok(())
    }
}

/// B's duplicate window must drop nothing A stored, yet catch A's publishers'
/// retries after the commit. A publisher that reuses a msg-id once A's window
/// has passed stores a new message in A; B sourcing A's history receives such
/// repeats milliseconds apart and, with a window, would drop them. So B
/// sources without dedup (created with window 0) until it holds everything A
/// stored more than one window ago, then takes A's window: from there on, two
/// messages with one id that A stored are a window apart in B too. The server
/// keeps its id map on a window change and only records ids while a window is
/// set (stream.go storeMsgIdLocked, updateWithAdvisory), so ids older than the
/// window, which A would no longer deduplicate either, are never compared.
async fn raise_window(ctx: &Ctx<'_>, from: &str, to: &str) -> Result<()> {
    let want = ctx.journal.lock().await.plan.b_config["duplicate_window"].as_i64().unwrap_or(0);
    let (raw, b) = ctx.js.stream_info(to).await?;
    if b.config.duplicate_window >= want || want <= 0 {
        return Ok(());
    }
    let (_, a) = ctx.js.stream_info(from).await?;
    let first_recent = first_within(ctx.js, &a, want).await?;
    // B must hold A's messages before `first_recent` (all of A's if none is recent).
    let need = first_recent.map(|m| m.seq.saturating_sub(1)).unwrap_or(a.state.last_seq);
    until_sourced(ctx, from, to, need, |e| e).await?;
    // B goes on copying meanwhile: what it copied before the update takes
    // effect is not recorded in its window, and a retry of it after the
    // commit would be stored again (the model checker's finding: B copied a
    // recent message before the window). Intent first: the commit waits one
    // retry horizon from here (recheck::window_holds) unless every such
    // message is older than the window.
    ctx.journal.lock().await.window_since_ms = Some(crate::journal::now_ms());
    ctx.save().await?;
    let mut cfg = raw["config"].clone();
    cfg["duplicate_window"] = json!(want);
    ctx.js.stream_update(&cfg).await?;
    // B copied a message younger than the window without it when A's first
    // such message is at or below what B holds now (A's timestamps grow
    // with its sequences).
    let copied = source_progress(ctx.js, to, from).await?.sourced_origin_seq;
    let first_recent = first_within(ctx.js, &a, want).await?;
    let recent = matches!((copied, first_recent), (Some(c), Some(m)) if m.seq <= c);
    if !recent {
        ctx.journal.lock().await.window_since_ms = None;
        ctx.save().await?;
    }
    let progress = Progress::WindowRaised { duplicate_window_ns: want, from_origin_seq: need + 1 };
    ctx.emit(Step::CatchUp, EventKind::Progress(progress));
    Ok(())
}

/// A's first message stored less than `window_ns` ago, if any.
pub(in crate::engine) async fn first_within(
    js: &crate::api::Js,
    a: &cutover_core::model::StreamInfo,
    window_ns: i64,
) -> Result<Option<crate::api::StoredMsg>> {
    let since = time::OffsetDateTime::now_utc() - nanos(window_ns);
    let since = since.format(&time::format_description::well_known::Rfc3339).expect("format");
    js.first_since(&a.config.name, &since, a.config.exact_direct_gets()).await
}

/// Waits until B holds A's messages up to origin sequence `need` (or all A
/// has), bounded by progress ([`Stall`]); `stalled` words a stall's error
/// for the caller's step.
pub(in crate::engine) async fn until_sourced(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    need: u64,
    stalled: impl Fn(Error) -> Error,
) -> Result<()> {
    let mut stall = Stall::new(ctx.opts.stall_timeout);
    loop {
        let p = source_progress(ctx.js, to, from).await?;
        if p.caught_up || p.sourced_origin_seq.is_some_and(|s| s >= need) {
            return Ok(());
        }
        stall.check_why(ctx.js, &p, to, from).await.map_err(&stalled)?;
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
}

/// The message B's source stalls on, if it is too large for B once its
/// `Nats-Stream-Source` header is added (`cutover_core::source_header::growth`).
async fn too_large(
    js: &crate::api::Js,
    p: &SourceProgress,
    to: &str,
    from: &str,
) -> Result<Option<Error>> {
    let (_, b) = js.stream_info(to).await?;
    let Some(src) = b.config.sources.iter().find(|s| s.name == from) else { return Ok(None) };
    if b.config.max_msg_size <= 0 {
        return Ok(None);
    }
    let (_, a) = js.stream_info(from).await?;
    let after = p.sourced_origin_seq.unwrap_or(0);
    let Some(seq) = js.next_sourced(&a, Some(src), after).await? else { return Ok(None) };
    let exact = a.config.exact_direct_gets();
    let Some(m) =
        js.get_msg(from, seq, crate::api::Lookup::Exact, crate::api::Via::direct_if(exact)).await?
    else {
        return Ok(None);
    };
    let headers: usize = m.headers.iter().map(|(k, v)| k.len() + 2 + v.len() + 2).sum();
    let own = m.payload.len() + if headers > 0 { 10 + headers + 2 } else { 0 };
    let filter = src.filter_subject.as_deref().unwrap_or(">");
    let dest = src.subject_transforms.first().map(|t| t.dest.as_str()).unwrap_or(">");
    let stored = own as u64 + cutover_core::source_header::growth(from, filter, dest, &m.subject);
    if stored <= b.config.max_msg_size as u64 {
        return Ok(None);
    }
    Ok(Some(Error::Unsafe(format!(
        "{to} stopped sourcing {from} at message {seq}: it is {own} bytes, and {to} stores it with its Nats-Stream-Source header as up to {stored} bytes, above {to}'s max_msg_size of {}; the server tries it again for good and copies nothing after it; raise {to}'s max_msg_size to at least {stored} (nats stream edit {to} --max-msg-size {stored}), or -1, and run again",
        b.config.max_msg_size
    ))))
}
