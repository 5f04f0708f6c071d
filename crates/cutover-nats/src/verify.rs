//! `verify`: reads a migration's streams and feeds the core's streaming checker
//! (`cutover_core::verify`).
//!
//! B is read once, by an ordered consumer with `headers_only` (the checks need
//! subjects, `Nats-Stream-Source` and `Nats-Msg-Id`, never payloads), from its
//! first to its last sequence at the moment verification begins: publishers may
//! keep publishing into B meanwhile. A's state (with its deleted sequences)
//! says exactly which messages it holds: all a consumer without a filter
//! selects. A filtered consumer's selected messages are counted on A (a
//! consumer's pending count) when no subject transform applies: B's origins the
//! filter selects are then among them, so with as many they are all of them
//! (`ASide::counted`). Only when the counts differ, or counting cannot be
//! exact (a transform, too many deletions, A changing), is A read, with the
//! ordered consumer too, and only the subjects those consumers select.
//! Memory is the core's sequence sets plus, when B holds direct publishes, the
//! hashes of their ids inside the retry window (read first, in a short pre-pass).
//! The audit stream, if asked for, is read once afterwards.
//!
//! Nothing is written but the ephemeral ordered consumers, deleted at the end.

use crate::api::{Action, Js, Lookup, StoredMsg, Via};
use crate::error::{Error, Result};
use crate::journal::load_migration as load;
use crate::read::{nuid, read};
use async_nats::header::{HeaderName, NATS_MESSAGE_ID};
use cutover_core::audit::AuditRecord;
use cutover_core::checkpoint::TranslateSearch;
use cutover_core::journal::{Journal, Phase};
use cutover_core::model::StreamInfo;
use cutover_core::plan::Strategy;
use cutover_core::source_header;
use cutover_core::verify::{
    self, a_filters_of, ASide, AuditSide, BMsg, BSide, ConsumerSpec, Facts, Kind, Origin,
    ReadStats, Report, RoaringTreemap, SlipWindow,
};
use serde_json::json;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Only these consumers of the migration (empty: all of them).
    pub consumers: Vec<String>,
    /// Also check the audit records in this stream, or in the stream that
    /// captures this subject.
    pub audit: Option<String>,
    /// Offending messages listed per kind (all are counted).
    pub first_n: usize,
    /// Give up if a stream delivers nothing for this long while messages remain.
    pub stall_timeout: Duration,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self { consumers: vec![], audit: None, first_n: 20, stall_timeout: Duration::from_secs(30) }
    }
}

/// How far the reads are, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyProgress {
    /// `direct window`, `streams` or `audit`.
    pub phase: &'static str,
    pub done: u64,
    pub total: u64,
}

/// Extra slack around the retry window, for clock differences between the
/// publishers and the server.
const SLIP_SLACK_MS: u64 = 1000;
/// Beyond this many interior deletions A is read rather than described.
const MAX_DELETED_DETAILS: u64 = 100_000;
/// A power of two (tested with a mask).
const PROGRESS_EVERY: u64 = 8192;

/// Verifies migration `id` (FROM.TO). Errors are for what prevents verifying;
/// what verification finds is in the report.
pub async fn verify(
    js: &Js,
    id: &str,
    opts: &VerifyOptions,
    progress: &(dyn Fn(VerifyProgress) + Sync),
) -> Result<Report> {
    let (_, j) = load(js, id).await?;
    js.both_sides(&j.plan)?;
    verifiable(id, &j)?;
    let specs = consumer_specs(js, &j, &opts.consumers).await?;
    let a = stream_a(js, &j).await?;
    let (b_raw, b) = js.stream_info(&j.to).await?;
    keeps_acked(&j, &a, &b)?;
    let first_n = opts.first_n.max(1);
    let mut facts = facts_of(&j, &a, &b, opts);
    let b_direct_get = b.config.exact_direct_gets();
    let origins = Origins::of_journal(&j, &a);
    // Direct publishes a retry could have duplicated: their id hashes, first.
    let slip = slip_window(js, &j, &b, origins, opts, progress).await?;
    let mut aside = ASide::new(&specs);
    let mut bside = BSide::new(&specs, first_n, slip);
    let total = a.state.messages + b.state.messages;
    let started = Instant::now();
    let known = a_state(js, &j, &a, &b_raw, &specs).await?;
    known.apply(&mut aside);
    let reader = AReader {
        js: js.clone(),
        name: j.from.clone(),
        first: a.state.first_seq,
        last: a.state.last_seq,
        stall: opts.stall_timeout,
        read: Arc::new(AtomicU64::new(0)),
    };
    // A is read on a task of its own, so that its messages are handled on
    // another thread than B's; the set owns it (dropping verify stops it).
    let mut a_task = reader.spawn(aside);
    let streams_progress = |b_read: u64| {
        let done = b_read + reader.read.load(Ordering::Relaxed);
        progress(VerifyProgress { phase: "streams", done, total });
    };
    read_b(js, &j.from, &b, origins, &mut bside, opts.stall_timeout, &streams_progress).await?;
    let mut aside = AReader::join(&mut a_task, &j.from).await?;
    known.recount(&reader, &mut aside, &bside).await?;
    let read = read_stats(started, aside.read + bside.read);
    confirm_slips(js, &j.to, b_direct_get, &mut bside).await?;
    let audit = match &opts.audit {
        Some(src) => Some(read_audit(js, src, &specs, &facts, first_n, opts, progress).await?),
        None => None,
    };
    let candidates = verify::lost_candidates(&aside, &bside);
    if candidates.iter().any(|c| !c.is_empty()) {
        facts.evicted_by_b = evicted_by_b(js, &a, &b, origins, candidates).await?;
    }
    let mut report = verify::finish(aside, bside, audit, &facts, first_n);
    report.read = Some(read);
    enrich(js, &mut report, &a, &b, origins).await?;
    report.stranded = stranded(js, &j).await?;
    report.holds &= report.stranded.is_empty();
    Ok(report)
}

/// The durables on A now that the migration did not move: the ones the
/// run found after its commit (`Journal::stranded`) and any created since.
/// One deleted since is no longer stranded (its application moved on).
/// Ephemeral consumers (verify's own readers among them) are not durables.
async fn stranded(js: &Js, j: &Journal) -> Result<Vec<String>> {
    if js.stream_info_opt(&j.from).await?.is_none() {
        return Ok(vec![]);
    }
    let moved: Vec<&str> = j.consumers.iter().map(|c| c.name.as_str()).collect();
    let unknown = js.unknown_durables(&j.from, &moved).await?;
    Ok(unknown.into_iter().map(|(n, _)| n).collect())
}

/// The facts about the streams as verification began, for the report.
fn facts_of(j: &Journal, a: &StreamInfo, b: &StreamInfo, opts: &VerifyOptions) -> Facts {
    Facts {
        migration: j.id.clone(),
        from: j.from.clone(),
        to: j.to.clone(),
        a_first_seq: a.state.first_seq,
        a_last_seq: a.state.last_seq,
        b_last_seq: b.state.last_seq,
        audit_source: opts.audit.clone(),
        evicted_by_b: vec![],
    }
}

/// How long reading A and B took, for `messages` messages.
fn read_stats(started: Instant, messages: u64) -> ReadStats {
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    ReadStats { ms, messages, per_sec: if ms > 0.0 { messages as f64 * 1000.0 / ms } else { 0.0 } }
}

/// How a message of B names the message of A it copies: by its
/// `Nats-Stream-Source` header (strategy source), or by its own sequence, up
/// to A's last one when it released its subjects (strategy mirror: B mirrored
/// A, sequences kept; after the promotion, direct publishes).
#[derive(Debug, Clone, Copy)]
enum Origins {
    Header,
    Sequence { upto: u64 },
}

impl Origins {
    fn of_journal(j: &Journal, a: &StreamInfo) -> Self {
        match j.plan.strategy {
            Strategy::Mirror => {
                Origins::Sequence { upto: j.a_final_seq.unwrap_or(a.state.last_seq) }
            }
            _ => Origins::Header,
        }
    }

    /// A's sequence this message copies, if it copies one of A's.
    fn of(self, m: &StoredMsg, from: &str) -> Result<Option<u64>> {
        match self {
            Origins::Header => m.origin_seq(from),
            Origins::Sequence { upto } => Ok((m.seq <= upto).then_some(m.seq)),
        }
    }

    fn is_direct(self, m: &StoredMsg) -> bool {
        match self {
            Origins::Header => is_direct(m),
            Origins::Sequence { upto } => m.seq > upto,
        }
    }
}

/// Verify checks a migration past its commit point, moved by sourcing.
fn verifiable(id: &str, j: &Journal) -> Result<()> {
    if j.phase == Phase::RolledBack {
        return Err(Error::NotVerifiable(format!(
            "migration {id} was rolled back: {} serves the publishers and the consumers as before, so there is no move to verify; `nats-cutover run` starts it again",
            j.from
        )));
    }
    if j.publishers_split() {
        return Err(Error::NotVerifiable(format!(
            "migration {id} waits for its publishers to be repointed (publishers split between {} and {}): verify checks it once A is sealed; once every publisher publishes on the target side, `nats-cutover run --resume {id} --proceed` seals {} and finishes",
            j.from, j.to, j.from
        )));
    }
    if !j.phase.committed() {
        return Err(Error::NotVerifiable(format!(
            "migration {id} is at phase {}: verify checks a migration past its commit point (publishers on {}); finish it with `nats-cutover run --resume {id}`{}",
            j.phase.as_str(),
            j.to,
            if j.can_roll_back() { format!(" or undo it with `nats-cutover rollback {}`", j.id) } else { String::new() }
        )));
    }
    if !matches!(j.plan.strategy, Strategy::Source | Strategy::Mirror) {
        // Without source headers or kept sequences B's messages can only be
        // matched by msg-id.
        return Err(Error::NotVerifiable(format!("migration {id} used strategy {}: verify matches messages by their Nats-Stream-Source origin and supports strategies source and mirror", j.plan.strategy.as_str())));
    }
    Ok(())
}

/// A, which must still exist and source nothing.
async fn stream_a(js: &Js, j: &Journal) -> Result<StreamInfo> {
    let a = match js.stream_info_opt(&j.from).await? {
        Some((_, a)) => a,
        None => {
            // An in-place hop deletes its old stream itself (a newcomer
            // was asked whether they had used --delete-old).
            let why = match (j.plan.in_place, j.delete_old) {
                (Some(_), _) => "an in-place hop deletes its old stream at its end",
                (None, true) => "deleted with --delete-old",
                (None, false) => "deleted since the move",
            };
            return Err(Error::NotVerifiable(format!(
                "stream {} no longer exists ({why}): verify compares {} with it message by message, so it cannot run without it",
                j.from, j.to
            )));
        }
    };
    if !a.config.sources.is_empty() {
        // B sourced only A: what A's own sources delivered after A was sealed
        // reached neither stream, and nothing here can see it (plan refuses
        // such a move now; a journal from before may exist).
        let names: Vec<&str> = a.config.sources.iter().map(|x| x.name.as_str()).collect();
        return Err(Error::Unsafe(format!(
            "stream {} sources {}: messages they received after {} was sealed reached neither stream, so the move cannot be proven complete; compare {} with them by hand",
            j.from, names.join(", "), j.from, j.to
        )));
    }
    Ok(a)
}

/// Both streams keep acknowledged messages (limits retention): otherwise a
/// missing message cannot be told from a processed one.
fn keeps_acked(j: &Journal, a: &StreamInfo, b: &StreamInfo) -> Result<()> {
    for (name, retention) in [(&j.from, &a.config.retention), (&j.to, &b.config.retention)] {
        if retention.removes_acked() {
            return Err(Error::NotVerifiable(format!(
                "stream {name} has {retention} retention: acknowledged messages are removed from it, so a missing message cannot be told from a processed one; verify supports limits retention only"
            )));
        }
    }
    Ok(())
}

/// What A's state says, when it can stand in for a read of A: the sequences A
/// holds (from first to last but the deleted ones), and the counted consumers
/// with the number of A's messages each one's filter selects.
#[derive(Debug, Default)]
struct AState {
    held: Option<(u64, u64, Vec<u64>)>,
    counts: Vec<(usize, u64)>,
}

impl AState {
    /// Consumers that select everything take A's state; the counted ones wait
    /// for B ([`AState::recount`]).
    fn apply(&self, aside: &mut ASide) {
        if let Some((first, last, deleted)) = &self.held {
            aside.holds(*first, *last, deleted);
            for &(i, _) in &self.counts {
                aside.defer(i);
            }
        }
    }

    /// The counted consumers: B's origins must be exactly as many as A's
    /// count, else A is read for them after all, to name what differs.
    async fn recount(&self, reader: &AReader, aside: &mut ASide, bside: &BSide) -> Result<()> {
        let Some((first, last, deleted)) = &self.held else { return Ok(()) };
        let unequal: Vec<usize> = self
            .counts
            .iter()
            .filter(|(i, n)| !aside.counted(*i, bside, *first, *last, deleted, *n))
            .map(|x| x.0)
            .collect();
        if !unequal.is_empty() {
            aside.feed_only(&unequal);
            reader.read(aside).await?;
        }
        Ok(())
    }
}

/// A's state: which sequences it holds (its deleted ones listed), when it has
/// few enough deletions to list. With it, consumers that select everything
/// need no read of A, and filtered ones may be counted instead.
async fn a_state(
    js: &Js,
    j: &Journal,
    a: &StreamInfo,
    b_raw: &serde_json::Value,
    specs: &[ConsumerSpec],
) -> Result<AState> {
    let countable = countable_consumers(j, b_raw, specs);
    let filtered = specs.iter().any(|s| !s.a_filters.is_empty());
    let mut out = AState::default();
    if a.state.num_deleted > MAX_DELETED_DETAILS || (filtered && countable.is_empty()) {
        return Ok(out);
    }
    // Counted first, then A's state checked unchanged since its first
    // look (no sequence added: same last; none removed: same count).
    for &i in &countable {
        match count_selected(js, &j.from, &specs[i].a_filters).await {
            Some(n) => out.counts.push((i, n)),
            None => break,
        }
    }
    let (first, last, deleted, stable) = deleted_sequences(js, &j.from, a).await?;
    // The counts hold for this state only if A did not change since.
    let counted_here = (first, last) == (a.state.first_seq, a.state.last_seq)
        && out.counts.len() == countable.len();
    if stable && (!filtered || counted_here) {
        out.held = Some((first, last, deleted));
    } else if !filtered {
        return Err(Error::StreamChanged { stream: j.from.clone() });
    } else {
        // A changed while it was counted: read it, as for any filter.
        out.counts.clear();
    }
    Ok(out)
}

/// The consumers whose selected messages of A may be counted, not read.
fn countable_consumers(
    j: &Journal,
    b_raw: &serde_json::Value,
    specs: &[ConsumerSpec],
) -> Vec<usize> {
    if no_transform(&j.plan.b_config) && no_transform(&b_raw["config"]) {
        (0..specs.len()).filter(|i| verify::countable(&specs[*i])).collect()
    } else {
        // A transform may give B's copy another subject than A's message: a B
        // message the filter selects need not be one A's filter selects, so
        // counts prove nothing. A is read.
        vec![]
    }
}

/// A's first and last sequence and its deleted ones, and whether it is still
/// as it was first seen (same number of messages, every deletion listed).
async fn deleted_sequences(
    js: &Js,
    from: &str,
    a: &StreamInfo,
) -> Result<(u64, u64, Vec<u64>, bool)> {
    let v = js
        .api(
            &format!("read stream {from}'s deleted sequences"),
            &format!("STREAM.INFO.{from}"),
            &json!({ "deleted_details": true }),
        )
        .await?;
    let st = &v["state"];
    let deleted: Vec<u64> = st["deleted"]
        .as_array()
        .map(|d| d.iter().filter_map(|x| x.as_u64()).collect())
        .unwrap_or_default();
    let (first, last) =
        (st["first_seq"].as_u64().unwrap_or(0), st["last_seq"].as_u64().unwrap_or(0));
    let stable = st["messages"].as_u64() == Some(a.state.messages)
        && deleted.len() as u64 == st["num_deleted"].as_u64().unwrap_or(0);
    Ok((first, last, deleted, stable))
}

/// Reads B from its first to its last sequence (as verification began) into
/// `bside`; `progress` gets the number read every so often.
async fn read_b(
    js: &Js,
    from: &str,
    b: &StreamInfo,
    origins: Origins,
    bside: &mut BSide,
    stall: Duration,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<u64> {
    let src_header = HeaderName::from_str(source_header::HEADER).expect("header name");
    read(
        js,
        &b.config.name,
        b.state.first_seq,
        b.state.last_seq,
        &[],
        true,
        stall,
        |m, seq, ts_ms| {
            let h = m.headers.as_ref();
            let src = h.and_then(|h| h.get(src_header.clone())).map(|v| v.as_str());
            let origin = match (origins, src.map(|v| (v, source_header::seq_from(v, from)))) {
                (Origins::Sequence { upto }, _) if seq <= upto => Origin::A(seq),
                (Origins::Sequence { .. }, _) => Origin::Direct,
                (_, src) => match src {
                    None => Origin::Direct,
                    Some((_, Ok(Some(o)))) => Origin::A(o),
                    Some((v, Ok(None))) => Origin::Other(v.split([' ', ':']).next().unwrap_or(v)),
                    Some((_, Err(_))) => Origin::Other("(unreadable Nats-Stream-Source header)"),
                },
            };
            let msg_id = h.and_then(|h| h.get(NATS_MESSAGE_ID)).map(|v| v.as_str());
            bside.message(&BMsg { seq, subject: m.subject.as_str(), origin, msg_id, ts_ms });
            if bside.read & (PROGRESS_EVERY - 1) == 0 {
                progress(bside.read);
            }
            true
        },
    )
    .await
}

/// Hash matches become findings only with the real ids equal.
async fn confirm_slips(js: &Js, to: &str, direct: bool, bside: &mut BSide) -> Result<()> {
    let candidates = bside.slip_candidates().to_vec();
    for c in &candidates {
        let m = js.get_msg(to, c.direct_b_seq, Lookup::Exact, Via::direct_if(direct)).await?;
        if m.as_ref().and_then(|m| m.header("Nats-Msg-Id")) == Some(c.msg_id.as_str()) {
            bside.confirm_slip(c);
        }
    }
    Ok(())
}

/// At most this many lost candidates are checked against B's limits; beyond,
/// they stay lost (a real loss that large needs no finer report).
const MAX_EVICTION_CHECKS: u64 = 10_000;

/// Which of A's messages without a copy in B had one that B's own limits
/// removed since: B is full on the message's subject (max_msgs_per_subject)
/// with messages newer than it, or B's oldest message is newer than it and B
/// has a count, size or age limit. Sourcing is in order, so a newer message
/// held means the older one arrived before (a dedup drop would look the same;
/// the plan prevents those).
async fn evicted_by_b(
    js: &Js,
    a: &StreamInfo,
    b: &StreamInfo,
    origins: Origins,
    candidates: Vec<RoaringTreemap>,
) -> Result<Vec<RoaringTreemap>> {
    let (from, to) = (a.config.name.as_str(), b.config.name.as_str());
    let bc = &b.config;
    let (a_via, b_via) =
        (Via::direct_if(a.config.exact_direct_gets()), Via::direct_if(bc.exact_direct_gets()));
    let per_subject = bc.max_msgs_per_subject > 0;
    let front = bc.max_msgs > 0 || bc.max_bytes > 0 || bc.max_age > 0;
    let mut out = vec![RoaringTreemap::new(); candidates.len()];
    if !per_subject && !front {
        return Ok(out);
    }
    // The origin of B's oldest message (None: a direct publish, newer than all of A).
    let oldest_origin = |m: Option<StoredMsg>| -> Result<Option<u64>> {
        Ok(match m {
            Some(m) => Some(origins.of(&m, from)?.unwrap_or(u64::MAX)),
            None => None,
        })
    };
    let b_first =
        oldest_origin(js.get_msg(to, b.state.first_seq, Lookup::AtOrAfter, b_via).await?)?;
    let mut by_subject: std::collections::HashMap<String, Option<u64>> = Default::default();
    let mut checked = 0u64;
    for (i, lost) in candidates.iter().enumerate() {
        for s in lost.iter() {
            checked += 1;
            if checked > MAX_EVICTION_CHECKS {
                return Ok(out);
            }
            if front && b_first.is_some_and(|o| o > s) {
                out[i].insert(s);
                continue;
            }
            if !per_subject {
                continue;
            }
            let Some(m) = js.get_msg(from, s, Lookup::Exact, a_via).await? else { continue };
            if !by_subject.contains_key(&m.subject) {
                // B full on this subject: its oldest message there, else none.
                let info = js
                    .api(
                        &format!("count {to}'s messages on {}", m.subject),
                        &format!("STREAM.INFO.{to}"),
                        &json!({ "subjects_filter": m.subject }),
                    )
                    .await?;
                let held = info["state"]["subjects"][&m.subject].as_i64().unwrap_or(0);
                let oldest = if held >= bc.max_msgs_per_subject {
                    let direct = b_via == Via::Direct;
                    oldest_origin(
                        js.next_matching(to, b.state.first_seq, &m.subject, direct).await?,
                    )?
                } else {
                    None
                };
                by_subject.insert(m.subject.clone(), oldest);
            }
            if by_subject[&m.subject].is_some_and(|o| o > s) {
                out[i].insert(s);
            }
        }
    }
    Ok(out)
}

/// What each consumer's check needs: the journal's checkpoint and evidence, the
/// plan's filters, and the new durable's actual start and filters if it exists.
async fn consumer_specs(js: &Js, j: &Journal, only: &[String]) -> Result<Vec<ConsumerSpec>> {
    for n in only {
        if !j.consumers.iter().any(|c| &c.name == n) {
            let names: Vec<&str> = j.consumers.iter().map(|c| c.name.as_str()).collect();
            return Err(Error::Input(format!(
                "migration {} did not move consumer {n:?}; it moved: {}",
                j.id,
                names.join(", ")
            )));
        }
    }
    let mut specs = vec![];
    for c in j.consumers.iter().filter(|c| only.is_empty() || only.contains(&c.name)) {
        let (Some(f), Some(journal_start)) = (c.checkpoint, c.b_start) else {
            return Err(Error::NotVerifiable(format!("consumer {} of migration {} has not moved yet (phase {:?}): nothing to verify for it; finish the migration first", c.name, j.id, c.phase)));
        };
        let a_filters = a_filters_of(&j.plan, &c.name).ok_or_else(|| Error::Journal(format!("the journal of {} does not say which subjects consumer {} selected on {}; it cannot be verified", j.id, c.name, j.from)))?;
        let plan_b = j
            .plan
            .consumers
            .iter()
            .find(|p| p.name == c.name)
            .map(|p| p.b_filters.clone())
            .unwrap_or_else(|| c.b_filters.clone());
        // The durable on B is what delivers: check its real start and filters.
        let (b_start, b_filters, b_ack_floor) = match js.consumer_info_opt(&j.to, &c.name).await? {
            Some((_, ci)) => {
                let start = match ci.config.deliver_policy.as_str() {
                    "by_start_sequence" => ci.config.opt_start_seq.unwrap_or(journal_start),
                    "all" => 1,
                    // Other policies cannot be compared with a sequence: the
                    // journal's start stands, and nothing contradicts it.
                    _ => journal_start,
                };
                (start, ci.config.filters(), Some(ci.ack_floor.stream_seq))
            }
            None => (journal_start, plan_b, None),
        };
        specs.push(ConsumerSpec {
            name: c.name.clone(),
            a_filters,
            b_filters,
            checkpoint: f,
            b_start,
            journal_b_start: journal_start,
            evidence: c.evidence.clone(),
            fence: j.plan.mode.is_fenced(),
            fence_settled: c.fence_settled.clone(),
            retired_state: c.retired_state.clone(),
            publishers_stopped: j.plan.publishers_stopped && !j.plan.features.consumer_pause,
            b_ack_floor,
        });
    }
    if specs.is_empty() {
        return Err(Error::NotVerifiable(format!(
            "migration {} moved no consumer: nothing to verify",
            j.id
        )));
    }
    Ok(specs)
}

/// How A is read: on a task of its own beside B, and again afterwards for
/// the counted consumers whose counts differ.
#[derive(Clone)]
struct AReader {
    js: Js,
    name: String,
    first: u64,
    last: u64,
    stall: Duration,
    /// Messages read so far, for the progress of both reads together.
    read: Arc<AtomicU64>,
}

impl AReader {
    /// Reads A for the consumers whose sets a read fills (none: nothing is read).
    async fn read(&self, aside: &mut ASide) -> Result<u64> {
        if !aside.reads() {
            return Ok(0);
        }
        let filters = aside.read_filters().unwrap_or_default();
        read(
            &self.js,
            &self.name,
            self.first,
            self.last,
            &filters,
            true,
            self.stall,
            |m, seq, _| {
                aside.message(seq, m.subject.as_str());
                if aside.read & (PROGRESS_EVERY - 1) == 0 {
                    self.read.store(aside.read, Ordering::Relaxed);
                }
                true
            },
        )
        .await
    }

    /// A's side back from the task [`AReader::spawn`] started.
    async fn join(task: &mut tokio::task::JoinSet<Result<ASide>>, name: &str) -> Result<ASide> {
        task.join_next().await.expect("the read of A").map_err(|e| Error::Request {
            what: format!("read stream {name}"),
            reason: e.to_string(),
        })?
    }

    /// Reads A into `aside` on a task the returned set owns.
    fn spawn(&self, mut aside: ASide) -> tokio::task::JoinSet<Result<ASide>> {
        let mut task = tokio::task::JoinSet::new();
        let me = self.clone();
        task.spawn(async move { me.read(&mut aside).await.map(|_| aside) });
        task
    }
}

/// Does no subject transform apply to what B sources (in B's configuration as
/// planned, or as it is now)?
fn no_transform(cfg: &serde_json::Value) -> bool {
    let set = |v: &serde_json::Value| {
        !(v.is_null()
            || v.as_array().is_some_and(|a| a.is_empty())
            || v.as_object().is_some_and(|o| o.is_empty())
            || v.as_str() == Some(""))
    };
    let stream =
        cfg.as_object().is_none_or(|o| o.iter().all(|(k, v)| !k.contains("transform") || !set(v)));
    let sources = cfg["sources"].as_array().is_none_or(|a| {
        a.iter().all(|s| {
            s.as_object().is_none_or(|o| o.iter().all(|(k, v)| !k.contains("transform") || !set(v)))
        })
    });
    stream && sources
}

/// How many messages A holds that `filters` select: the pending count of a
/// consumer created for the purpose (delivering nothing; deleted at once).
/// None if it cannot be had (A is then read).
async fn count_selected(js: &Js, stream: &str, filters: &[String]) -> Option<u64> {
    let name = format!("nats-cutover-verify-count-{}", nuid());
    let mut cfg = json!({ "name": name, "deliver_policy": "all", "ack_policy": "none", "inactive_threshold": 60_000_000_000u64, "mem_storage": true, "num_replicas": 1 });
    if filters.len() == 1 {
        cfg["filter_subject"] = json!(filters[0]);
    } else {
        cfg["filter_subjects"] = json!(filters);
    }
    let v = js.consumer_create(stream, &name, &cfg, Action::Create).await;
    let _ = js.consumer_delete(stream, &name).await;
    v.ok()?["num_pending"].as_u64()
}

fn is_direct(m: &StoredMsg) -> bool {
    m.header(source_header::HEADER).is_none()
}

/// Finds B's first direct publish ([`first_direct`]; with the publishers
/// split across systems, the first after where B took the subjects), then
/// reads the ids of the direct publishes a retry could have produced: those
/// within the retry window of the first one.
async fn slip_window(
    js: &Js,
    j: &Journal,
    b: &StreamInfo,
    origins: Origins,
    opts: &VerifyOptions,
    progress: &(dyn Fn(VerifyProgress) + Sync),
) -> Result<Option<SlipWindow>> {
    let b_last = b.state.last_seq;
    let cand = match j.shared {
        // Publishers split across systems: direct publishes interleave with
        // sourced ones from where B took the subjects; the window starts at
        // the first direct one after it (read below), the first publisher
        // repointed.
        Some(at) if matches!(origins, Origins::Header) => at.b_seq + 1,
        _ => match first_direct(js, j, b, origins).await? {
            Some(c) => c,
            None => return Ok(None),
        },
    };
    let window_ms = j
        .plan
        .retry_horizon_ms
        .max(j.plan.b_config["duplicate_window"].as_u64().unwrap_or(0) / 1_000_000);
    let mut w: Option<SlipWindow> = None;
    let mut until = i64::MAX;
    read(js, &j.to, cand, b_last, &[], true, opts.stall_timeout, |m, seq, ts_ms| {
        let h = m.headers.as_ref();
        let sourced = h.and_then(|h| h.get(source_header::HEADER)).is_some();
        if w.is_none() && sourced {
            return true;
        }
        let win = w.get_or_insert_with(|| {
            until = ts_ms + (window_ms + SLIP_SLACK_MS) as i64;
            SlipWindow::new(seq, ts_ms - SLIP_SLACK_MS as i64, window_ms)
        });
        if ts_ms > until {
            return false;
        }
        if !sourced {
            if let Some(id) = h.and_then(|h| h.get(NATS_MESSAGE_ID)) {
                win.add_direct(seq, id.as_str());
            }
        }
        if seq & (PROGRESS_EVERY - 1) == 0 {
            progress(VerifyProgress {
                phase: "direct window",
                done: seq - cand,
                total: b_last - cand + 1,
            });
        }
        true
    })
    .await?;
    if let Some(w) = w.as_mut() {
        w.interleaved = j.shared.is_some();
    }
    Ok(w.filter(|w| !w.is_empty()))
}

/// B's first direct publish, by bisection with gets (they all come after
/// the sourced messages: B took the subjects only once it held A's tail);
/// none if B's last message is not one.
async fn first_direct(
    js: &Js,
    j: &Journal,
    b: &StreamInfo,
    origins: Origins,
) -> Result<Option<u64>> {
    let direct = b.config.exact_direct_gets();
    let Some(last) = js.last_msg(&j.to, direct).await? else { return Ok(None) };
    if !origins.is_direct(&last) {
        return Ok(None);
    }
    let (mut lo, mut hi, mut cand) = (b.state.first_seq.max(1), last.seq, last.seq);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match js.get_msg(&j.to, mid, Lookup::AtOrAfter, Via::direct_if(direct)).await? {
            Some(m) if m.seq < hi => {
                if origins.is_direct(&m) {
                    cand = m.seq;
                    hi = mid;
                } else {
                    lo = m.seq + 1;
                }
            }
            _ => hi = mid,
        }
    }
    Ok(Some(cand))
}

/// Reads the audit records from a stream, or from the stream capturing a subject.
async fn read_audit(
    js: &Js,
    src: &str,
    specs: &[ConsumerSpec],
    facts: &Facts,
    first_n: usize,
    opts: &VerifyOptions,
    progress: &(dyn Fn(VerifyProgress) + Sync),
) -> Result<AuditSide> {
    let by_name = if cutover_core::names::stream(src).is_ok() {
        js.stream_info_opt(src).await?
    } else {
        None
    };
    let (stream, filter, info) = match by_name {
        Some((_, info)) => (src.to_string(), None, info),
        None => {
            let v = js
                .api(
                    &format!("find the stream capturing {src}"),
                    "STREAM.NAMES",
                    &json!({ "subject": src }),
                )
                .await?;
            let names: Vec<String> = v["streams"]
                .as_array()
                .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
                .unwrap_or_default();
            match names.as_slice() {
                [one] => {
                    let (_, info) = js.stream_info(one).await?;
                    (one.clone(), Some(src.to_string()), info)
                }
                [] => return Err(Error::Input(format!("--audit {src}: no stream is named so and none captures that subject; give the audit stream's name or a subject it captures"))),
                many => return Err(Error::Input(format!("--audit {src}: several streams capture that subject ({}); give the audit stream's name", many.join(", ")))),
            }
        }
    };
    let mut au = AuditSide::new(specs, &facts.from, &facts.to, facts.b_last_seq, first_n);
    let total = info.state.messages;
    read(
        js,
        &stream,
        info.state.first_seq,
        info.state.last_seq,
        &filter.into_iter().collect::<Vec<_>>(),
        false,
        opts.stall_timeout,
        |m, _, _| {
            match serde_json::from_slice::<AuditRecord>(&m.payload) {
                Ok(r) => au.record(&r),
                Err(_) => au.unreadable(),
            }
            if au.records & (PROGRESS_EVERY - 1) == 0 {
                progress(VerifyProgress { phase: "audit", done: au.records, total });
            }
            true
        },
    )
    .await?;
    Ok(au)
}

/// Fills in ids and subjects of the listed offenders (a get each, at most the
/// first N per kind) and the B sequence of extra messages.
async fn enrich(
    js: &Js,
    r: &mut Report,
    a: &StreamInfo,
    b: &StreamInfo,
    origins: Origins,
) -> Result<()> {
    let (a_direct, b_direct) = (a.config.exact_direct_gets(), b.config.exact_direct_gets());
    let (b_first, b_last) = (b.state.first_seq, b.state.last_seq);
    let (from, to) = (r.from.clone(), r.to.clone());
    for o in r.offenders.iter_mut() {
        // Consumer-level findings name no message.
        if matches!(o.kind, Kind::Unsettled | Kind::StartMismatch) {
            continue;
        }
        if o.kind == Kind::Extra && o.b_seq.is_none() {
            if let Some(origin) = o.a_seq {
                o.b_seq = match origins {
                    Origins::Sequence { upto } => (origin <= upto).then_some(origin),
                    Origins::Header => {
                        locate(js, &to, &from, origin, b_first, b_last, b_direct).await?
                    }
                };
            }
        }
        if o.msg_id.is_some() && o.subject.is_some() {
            continue;
        }
        let m = match (o.b_seq, o.a_seq) {
            (Some(b), _) => js.get_msg(&to, b, Lookup::Exact, Via::direct_if(b_direct)).await?,
            (None, Some(a)) if o.kind != Kind::AuditUnknown => {
                js.get_msg(&from, a, Lookup::Exact, Via::direct_if(a_direct)).await?
            }
            _ => None,
        };
        if let Some(m) = m {
            o.subject.get_or_insert(m.subject.clone());
            if o.msg_id.is_none() {
                o.msg_id = m.header("Nats-Msg-Id").map(String::from);
            }
        }
    }
    Ok(())
}

/// B's sequence of A's message `origin`, by the translation search (direct
/// publishes count as after every origin).
async fn locate(
    js: &Js,
    to: &str,
    from: &str,
    origin: u64,
    b_first: u64,
    b_last: u64,
    direct: bool,
) -> Result<Option<u64>> {
    let origin_of = |m: &StoredMsg| -> Result<u64> { Ok(m.origin_seq(from)?.unwrap_or(u64::MAX)) };
    let last_origin = match js.get_msg(to, b_last, Lookup::Exact, Via::direct_if(direct)).await? {
        Some(m) => Some(origin_of(&m)?),
        None => None,
    };
    let mut s = TranslateSearch::new(origin - 1, b_first, b_last, last_origin);
    while let Some(p) = s.next_probe() {
        let probe = match js.get_msg(to, p, Lookup::AtOrAfter, Via::direct_if(direct)).await? {
            Some(m) if m.seq <= b_last => Some((m.seq, origin_of(&m)?)),
            _ => None,
        };
        s.observe(probe);
    }
    let Some(at) = s.result() else { return Ok(None) };
    Ok(match js.get_msg(to, at, Lookup::AtOrAfter, Via::direct_if(direct)).await? {
        Some(m) if m.origin_seq(from)? == Some(origin) => Some(m.seq),
        _ => None,
    })
}
