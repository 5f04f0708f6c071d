//! The journal, lease and route records in the `CUTOVER` KV bucket.
//!
//! The journal is stored as records (a head and one per consumer, see
//! `cutover_core::journal`): a save writes only the records that changed
//! since this store last read or wrote them, consumer records before the
//! head, so moving 1,000 consumers writes each consumer's record when it
//! changes rather than the whole journal.
//!
//! Every journal write is a compare-and-set on the revision this store last
//! read or wrote of that record (a new record: created only if absent). A
//! runner stopped past its lease between its lease check and a write (the
//! window no lease check can close) and resumed after another runner took
//! over finds the revision moved and writes nothing: it cannot put back a
//! state the migration has left (seen once in the chaos loop, which stops
//! runners with SIGSTOP at random moments).
//!
//! One runner at a time per source stream: the lease is a KV entry updated by
//! revision compare-and-set, with an expiry so that a crashed runner's lease can
//! be taken over once it lapses.

use crate::api::{Fence, Js};
use crate::error::{Error, Result};
use async_nats::jetstream::kv;
use bytes::Bytes;
use cutover_core::journal::{
    self as cj, consumer_key, instance_key, journal_key, lease_key, route_key, ConsumerRecord,
    InstanceRecord, Journal, Route, BUCKET, JOURNAL_FORMAT,
};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Mutex;

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[derive(Clone)]
pub struct JournalStore {
    kv: kv::Store,
    js: Js,
    /// The journal records as this store last read or wrote them: a save
    /// writes only those that differ, each at the revision kept here.
    known: Arc<std::sync::Mutex<HashMap<String, Known>>>,
}

/// A journal record as last read or written.
#[derive(Clone)]
struct Known {
    /// `None`: a head in format 1 (one value), which the next save
    /// rewrites in format 2 whatever it holds.
    value: Option<Bytes>,
    revision: u64,
}

/// How many journal records are read or written at once.
const RECORDS_IN_FLIGHT: usize = 32;

/// [`Error::Leased`]: `holder` holds migration `id`'s lease until `expires_ms`.
pub(crate) fn leased(id: String, holder: String, expires_ms: u64) -> Error {
    Error::Leased {
        id,
        holder,
        until: format!("{} ms from now", expires_ms.saturating_sub(now_ms())),
    }
}

/// How long a journal write without an answer is sent again.
const JOURNAL_RETRY_FOR: Duration = Duration::from_secs(15);

/// The server's "wrong last sequence" without a sequence (error 10164): a
/// replicated stream refuses a compare-and-set on a key while an earlier
/// write to it is still being proposed (nats-server jetstream_batching.go,
/// `expectedPerSubjectInProcess` / `inflight`), which is what a write sent
/// again after a lost answer meets. Not a verdict: asked again, it is
/// applied or found applied. async-nats reports it as `Other` (only 10071
/// is `WrongLastSequence`), hence the code, read from the source chain.
fn in_process(e: &(dyn std::error::Error + 'static)) -> bool {
    const IN_PROCESS: u64 = 10164;
    let mut cur = Some(e);
    while let Some(x) = cur {
        if let Some(j) = x.downcast_ref::<async_nats::jetstream::Error>() {
            return j.error_code().0 == IN_PROCESS;
        }
        cur = x.source();
    }
    false
}

/// A write to the bucket answered "no responders" (async-nats: publish
/// `StreamNotFound`): its stream had no leader for a moment (a node of a
/// cluster restarted, an election), and nothing was stored, so sending it
/// again is safe. Seen on a 3-node cluster with a node restarted after
/// every step: the journal's write failed the run where the bucket's new
/// leader answered a few ms later (`cluster::in_place_on_a_cluster_is_exact_with_a_node_killed_after_every_step`).
fn no_leader(e: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::context::{PublishError, PublishErrorKind};
    let mut cur = Some(e);
    while let Some(x) = cur {
        if let Some(p) = x.downcast_ref::<PublishError>() {
            return p.kind() == PublishErrorKind::StreamNotFound;
        }
        cur = x.source();
    }
    false
}

/// `put`s that set a whole value (routes, the go-ahead): sent again while
/// the bucket has no leader, for [`JOURNAL_RETRY_FOR`].
async fn put_again(
    kv: &kv::Store,
    key: String,
    v: Bytes,
) -> std::result::Result<u64, kv::PutError> {
    let (started, mut backoff) = (Instant::now(), Duration::from_millis(50));
    loop {
        match kv.put(&key, v.clone()).await {
            Err(e) if no_leader(&e) && started.elapsed() < JOURNAL_RETRY_FOR => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            r => return r,
        }
    }
}

fn jerr(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Journal(format!("{what} in KV bucket {BUCKET}: {e}"))
}

/// What [`JournalStore::open`] does when the bucket does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfMissing {
    /// Create it (the first `run`).
    Create,
    /// Return `None`: there is no migration to read, resume or roll back.
    ReturnNone,
}

impl JournalStore {
    /// Opens the bucket; `None` when it does not exist and `if_missing` is
    /// [`IfMissing::ReturnNone`].
    pub async fn open(js: &Js, if_missing: IfMissing) -> Result<Option<Self>> {
        Self::open_with(js, if_missing, 1).await
    }

    /// Opens the bucket for a run: created with `replicas` (B's), or raised
    /// to them by [`Self::ensure_replicas`].
    pub async fn open_replicated(js: &Js, replicas: i64) -> Result<Self> {
        let store = Self::open_with(js, IfMissing::Create, replicas).await?.expect("created");
        store.ensure_replicas(replicas).await?;
        Ok(store)
    }

    async fn open_with(js: &Js, if_missing: IfMissing, replicas: i64) -> Result<Option<Self>> {
        let ctx = async_nats::jetstream::new(js.client.clone());
        // Probe with the raw API so "no bucket" is told apart from real errors.
        match js.stream_info_opt(&format!("KV_{BUCKET}")).await? {
            Some(_) => {}
            None if if_missing == IfMissing::ReturnNone => return Ok(None),
            None => {
                ctx.create_key_value(kv::Config {
                    bucket: BUCKET.into(),
                    description: "nats-cutover migration journals, leases and routes".into(),
                    history: 1,
                    num_replicas: replicas.max(1) as usize,
                    storage: async_nats::jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| jerr("cannot create the journal", e))?;
            }
        }
        let kv = ctx.get_key_value(BUCKET).await.map_err(|e| jerr("cannot open the journal", e))?;
        Ok(Some(Self { kv, js: js.clone(), known: Default::default() }))
    }

    /// Raises the bucket's replicas to `replicas` when it has fewer: the
    /// journal, lease and routes must stay available when the node holding
    /// an R1 bucket is cut off while the streams it moves (R3) are not
    /// (docs/reliability.md). Never lowers it: other migrations may need more.
    /// On a cluster the server scales a stream up in place on an update: it
    /// adds peers when `newCfg.Replicas > len(currentPeers)` (`isScaleUp` in
    /// `jetstream_cluster.go`, `jsClusteredStreamUpdateRequestLocked`).
    pub async fn ensure_replicas(&self, replicas: i64) -> Result<()> {
        let name = format!("KV_{BUCKET}");
        let info = self.js.stream_info_raw(&name).await?;
        let have = info["config"]["num_replicas"].as_i64().unwrap_or(1).max(1);
        if have >= replicas {
            return Ok(());
        }
        let mut config = info["config"].clone();
        config["num_replicas"] = replicas.into();
        self.js
            .stream_update(&config)
            .await
            .map_err(|e| jerr(&format!("cannot raise the journal to {replicas} replicas"), e))?;
        // The new peers catch up and a leader is (re)elected: until then
        // writes time out. Wait for a leader and every replica current.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let info = self.js.stream_info_raw(&name).await?;
            let c = &info["cluster"];
            let replicas_seen = c["replicas"].as_array().map(|r| r.as_slice()).unwrap_or(&[]);
            let current = replicas_seen.iter().all(|r| r["current"] == true);
            if c["leader"].as_str().is_some_and(|l| !l.is_empty())
                && replicas_seen.len() + 1 >= replicas as usize
                && current
            {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(jerr(
                    &format!(
                        "the journal's {replicas} replicas did not become current within 30 s"
                    ),
                    "run again: the bucket keeps its new replica count",
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// The ids of every migration journaled in the bucket.
    pub async fn ids(&self) -> Result<Vec<String>> {
        let keys = self.keys_under("m.").await?;
        Ok(keys.iter().filter_map(|k| k.strip_prefix("m.").map(String::from)).collect())
    }

    /// The keys under `prefix` (`m.`, `lease.`), listed from the bucket
    /// stream's subjects: STREAM.INFO with a subjects filter, paged. No
    /// consumer: a KV key listing creates an ephemeral one, which a process
    /// stopped early (a denied request, Ctrl-C) left behind for 30 s.
    /// Deleted and purged keys are listed too; `load` skips them.
    async fn keys_under(&self, prefix: &str) -> Result<Vec<String>> {
        let kv_prefix = format!("$KV.{BUCKET}.");
        let filter = format!("{kv_prefix}{prefix}>");
        let mut out = vec![];
        loop {
            let info = self
                .js
                .api(
                    "list the journal's keys",
                    &format!("STREAM.INFO.KV_{BUCKET}"),
                    &serde_json::json!({ "subjects_filter": filter, "offset": out.len() }),
                )
                .await?;
            let subjects = info["state"]["subjects"].as_object().cloned().unwrap_or_default();
            let page = subjects.len();
            out.extend(
                subjects.keys().filter_map(|s| s.strip_prefix(&kv_prefix).map(String::from)),
            );
            if page == 0 || out.len() as u64 >= info["total"].as_u64().unwrap_or(0) {
                break;
            }
        }
        out.sort();
        Ok(out)
    }

    /// The journal of migration `id`: a head and its consumer records, or a
    /// single value written by a runner of journal format 1.
    pub async fn load(&self, id: &str) -> Result<Option<Journal>> {
        let unreadable = |err: String| {
            jerr(&format!("journal {id} is unreadable ({err})"), "remove it with `nats-cutover forget` or `nats kv del CUTOVER m.<id>` only if you know the migration's state")
        };
        let key = journal_key(id);
        let e = self.entry(&key, "cannot read the journal").await?;
        let Some(e) = e.filter(|e| e.operation == kv::Operation::Put) else { return Ok(None) };
        let head: serde_json::Value =
            serde_json::from_slice(&e.value).map_err(|err| unreadable(err.to_string()))?;
        // One written by a newer nats-cutover (a higher `format`) is refused,
        // named, before anything acts on it: this version could misread its
        // phases and undo the wrong things.
        let format = head["format"].as_u64().unwrap_or(0);
        if format > u64::from(JOURNAL_FORMAT) {
            return Err(Error::NewerJournal {
                id: id.into(),
                found: format,
                reads: JOURNAL_FORMAT,
            });
        }
        if cj::is_single_value(&head) {
            // Format 1: no record is known as written, so the next save
            // writes every consumer record, then the head in format 2 (at the
            // revision read here).
            self.known.lock().unwrap().insert(key, Known { value: None, revision: e.revision });
            return serde_json::from_value(head)
                .map(Some)
                .map_err(|err| unreadable(err.to_string()));
        }
        let names = cj::head_consumer_names(&head);
        // Collected first: a lazily mapped stream of futures borrowing the
        // names would make this future not `Send`.
        let reads: Vec<_> = names
            .into_iter()
            .map(|n| {
                let k = consumer_key(id, &n);
                async move { (n, self.entry(&k, "cannot read the journal").await, k) }
            })
            .collect();
        let reads =
            futures::stream::iter(reads).buffered(RECORDS_IN_FLIGHT).collect::<Vec<_>>().await;
        let mut records = HashMap::new();
        let mut known = vec![(key, Known { value: Some(e.value), revision: e.revision })];
        for (name, entry, k) in reads {
            let Some(en) = entry?.filter(|e| e.operation == kv::Operation::Put) else { continue };
            let r: ConsumerRecord =
                serde_json::from_slice(&en.value).map_err(|err| unreadable(err.to_string()))?;
            records.insert(name, r);
            known.push((k, Known { value: Some(en.value), revision: en.revision }));
        }
        let j = cj::join(&head, |n| records.remove(n)).map_err(|e| unreadable(e.to_string()))?;
        self.known.lock().unwrap().extend(known);
        Ok(Some(j))
    }

    /// The phase in migration `id`'s journal head alone (a thousand
    /// consumer records are not read); `None` without a journal.
    pub async fn phase(&self, id: &str) -> Result<Option<cj::Phase>> {
        let e = self.entry(&journal_key(id), "cannot read the journal").await?;
        let Some(e) = e.filter(|e| e.operation == kv::Operation::Put) else { return Ok(None) };
        let head: serde_json::Value = serde_json::from_slice(&e.value)
            .map_err(|err| jerr(&format!("journal {id} is unreadable"), err))?;
        Ok(serde_json::from_value(head["phase"].clone()).ok())
    }

    /// Saves `j`: the records that changed (see [`JournalStore::save_fenced`]).
    pub async fn save(&self, j: &Journal) -> Result<()> {
        self.save_fenced(j, || async { Ok(()) }).await
    }

    /// Saves `j`, writing only the records that differ from what this store
    /// last read or wrote: consumer records first, the head last (a new
    /// journal exists once its head does). `hold` is called before each
    /// write (the runner's lease check).
    pub async fn save_fenced<F, Fut>(&self, j: &Journal, hold: F) -> Result<()>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        let (head, records) = cj::split(j);
        let mut writes: Vec<(String, Bytes)> = records
            .iter()
            .map(|r| (consumer_key(&j.id, &r.name), encode(r)))
            .chain([(journal_key(&j.id), encode(&head))])
            .collect();
        {
            let known = self.known.lock().unwrap();
            writes.retain(|(k, v)| known.get(k).and_then(|w| w.value.as_ref()) != Some(v));
        }
        let head = match writes.last() {
            Some((k, _)) if *k == journal_key(&j.id) => writes.pop(),
            _ => None,
        };
        let writes: Vec<_> = writes
            .into_iter()
            .map(|(k, v)| {
                let hold = &hold;
                async move {
                    hold().await?;
                    self.put_record(&j.id, k, v).await
                }
            })
            .collect();
        futures::stream::iter(writes)
            .buffer_unordered(RECORDS_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        if let Some((k, v)) = head {
            hold().await?;
            self.put_record(&j.id, k, v).await?;
        }
        Ok(())
    }

    /// Consumer `name`'s record of `j`, to write with [`JournalStore::put_record`]
    /// (the consumer's task saves its own progress, nothing else).
    pub fn consumer_record(j: &Journal, name: &str) -> (String, Bytes) {
        (consumer_key(&j.id, name), encode(&cj::consumer_record(j, name)))
    }

    /// Writes one record of migration `id`'s journal, compare-and-set: at
    /// the revision this store last read or wrote, or only if absent when it
    /// knows none. Another writer in between (a runner that took over):
    /// [`Error::Leased`], nothing written.
    pub async fn put_record(&self, id: &str, key: String, value: Bytes) -> Result<()> {
        use crate::test_hooks::{journal_write_fault, WriteFault};
        let mut fault = journal_write_fault(&value);
        if fault == WriteFault::Refuse {
            return Err(jerr("cannot write the journal", "timed out (test hook)"));
        }
        let last = self.known.lock().unwrap().get(&key).map(|k| k.revision);
        // A write whose answer did not come (a server or the bucket's leader
        // away for a moment: a newcomer's run failed on a node killed for
        // 1 s) is sent again, for a while: compare-and-set makes that safe,
        // an earlier attempt that took effect is recognised as ours.
        let (started, mut backoff) = (Instant::now(), Duration::from_millis(50));
        let revision = loop {
            let written = match last {
                Some(rev) => self.kv.update(&key, value.clone(), rev).await.map_err(|e| {
                    let (moved, lost) = (
                        e.kind() == kv::UpdateErrorKind::WrongLastRevision,
                        e.kind() == kv::UpdateErrorKind::TimedOut
                            || in_process(&e)
                            || no_leader(&e),
                    );
                    (moved, lost, jerr("cannot write the journal", e))
                }),
                None => self.kv.create(&key, value.clone()).await.map_err(|e| {
                    let (moved, lost) = (
                        e.kind() == kv::CreateErrorKind::AlreadyExists,
                        matches!(e.kind(), kv::CreateErrorKind::Publish | kv::CreateErrorKind::Ack)
                            || in_process(&e),
                    );
                    (moved, lost, jerr("cannot write the journal", e))
                }),
            };
            let written = match written {
                Ok(_) if fault == WriteFault::LoseOnce => {
                    fault = WriteFault::None;
                    Err((false, true, jerr("cannot write the journal", "timed out (test hook)")))
                }
                w => w,
            };
            match written {
                Ok(rev) => break rev,
                Err((true, _, _)) => break self.written_by_us(id, &key, &value).await?,
                Err((false, true, _)) if started.elapsed() < JOURNAL_RETRY_FOR => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err((_, _, e)) => return Err(e),
            }
        };
        if fault == WriteFault::LoseAnswer {
            return Err(jerr("cannot write the journal", "timed out (test hook, written)"));
        }
        self.known.lock().unwrap().insert(key, Known { value: Some(value), revision });
        Ok(())
    }

    /// After a compare-and-set found record `key` moved: its revision if it
    /// holds `value` (our own earlier write whose acknowledgement was lost,
    /// e.g. across a server restart), else [`Error::Leased`] naming the
    /// lease's holder.
    async fn written_by_us(&self, id: &str, key: &str, value: &Bytes) -> Result<u64> {
        let now = self.entry(key, "cannot read the journal").await?;
        if let Some(en) = now.filter(|en| en.operation == kv::Operation::Put && en.value == *value)
        {
            return Ok(en.revision);
        }
        Err(match self.leases().await?.into_iter().find(|l| l.migration == id) {
            Some(l) => leased(id.into(), l.holder, l.expires_ms),
            None => Error::Leased {
                id: id.into(),
                holder: "another runner".into(),
                until: "it ends".into(),
            },
        })
    }

    /// Whether the bucket holds `id`'s journal as records (format 2) as far
    /// as this store knows: a consumer record alone is written only then.
    pub fn holds_records(&self, id: &str) -> bool {
        self.known.lock().unwrap().get(&journal_key(id)).is_some_and(|k| k.value.is_some())
    }

    pub async fn list(&self) -> Result<Vec<Journal>> {
        let mut out = vec![];
        for id in self.ids().await? {
            if let Some(j) = self.load(&id).await? {
                out.push(j);
            }
        }
        out.sort_by_key(|j| j.started_ms);
        Ok(out)
    }

    /// Every lease in the bucket, live or expired.
    pub async fn leases(&self) -> Result<Vec<LeaseInfo>> {
        let mut out = vec![];
        for k in self.keys_under("lease.").await? {
            let Some(stream) = k.strip_prefix("lease.") else { continue };
            let entry = self.entry(&k, "cannot read a lease").await?;
            let Some(en) = entry.filter(|e| e.operation == kv::Operation::Put) else { continue };
            if let Ok(r) = serde_json::from_slice::<LeaseRecord>(&en.value) {
                out.push(LeaseInfo {
                    stream: stream.into(),
                    holder: r.holder,
                    migration: r.migration,
                    expires_ms: r.expires_ms,
                    live: r.expires_ms > now_ms(),
                });
            }
        }
        Ok(out)
    }

    /// Removes a journal: its head first (without it there is no
    /// migration), then its consumer records.
    pub async fn delete_journal(&self, id: &str) -> Result<()> {
        let key = journal_key(id);
        self.kv.purge(&key).await.map_err(|e| jerr("cannot delete the journal", e))?;
        self.known.lock().unwrap().remove(&key);
        for k in self.keys_under(&cj::consumer_prefix(id)).await? {
            self.kv.purge(&k).await.map_err(|e| jerr("cannot delete the journal", e))?;
            self.known.lock().unwrap().remove(&k);
        }
        Ok(())
    }

    /// Removes the lease on `stream`, if it is the one read (compare and set
    /// on its revision: a runner that renewed it meanwhile keeps it).
    pub async fn delete_lease(&self, stream: &str) -> Result<()> {
        let key = lease_key(stream);
        if let Some(en) = self.entry(&key, "cannot read a lease").await? {
            self.kv
                .delete_expect_revision(&key, Some(en.revision))
                .await
                .map_err(|e| jerr("cannot delete the lease", e))?;
        }
        Ok(())
    }

    pub async fn put_route(&self, from: &str, consumer: &str, r: &Route) -> Result<()> {
        // `updated_ms` is the time of this write (docs/protocol.md): drain
        // mode's records, built without a clock, said 0.
        let r = Route { updated_ms: now_ms(), ..r.clone() };
        let v = serde_json::to_vec(&r).expect("route serializes");
        put_again(&self.kv, route_key(from, consumer), Bytes::from(v))
            .await
            .map_err(|e| jerr("cannot write the route", e))?;
        Ok(())
    }

    /// The operator's go-ahead for migration `id`, waiting with its
    /// publishers split across systems (`run --resume ID --proceed`).
    pub async fn put_proceed(&self, id: &str) -> Result<()> {
        let v = serde_json::to_vec(&serde_json::json!({ "at_ms": now_ms() })).expect("json");
        put_again(&self.kv, cj::proceed_key(id), Bytes::from(v))
            .await
            .map_err(|e| jerr("cannot write the go-ahead", e))?;
        Ok(())
    }

    /// Whether the operator's go-ahead for migration `id` is there.
    pub async fn proceed_asked(&self, id: &str) -> Result<bool> {
        let e = self.entry(&cj::proceed_key(id), "cannot read the go-ahead").await?;
        Ok(e.is_some_and(|e| e.operation == kv::Operation::Put))
    }

    /// Removes the go-ahead once used (a later migration of the same
    /// streams must be told again).
    pub async fn delete_proceed(&self, id: &str) -> Result<()> {
        self.kv
            .delete(cj::proceed_key(id))
            .await
            .map_err(|e| jerr("cannot delete the go-ahead", e))?;
        Ok(())
    }

    pub async fn delete_route(&self, from: &str, consumer: &str) -> Result<()> {
        self.kv
            .delete(route_key(from, consumer))
            .await
            .map_err(|e| jerr("cannot delete the route", e))?;
        Ok(())
    }

    pub async fn route(&self, from: &str, consumer: &str) -> Result<Option<Route>> {
        let e = self.entry(&route_key(from, consumer), "cannot read the route").await?;
        Ok(e.filter(|e| e.operation == kv::Operation::Put)
            .and_then(|e| serde_json::from_slice(&e.value).ok()))
    }

    /// `key`'s latest entry, read from the bucket stream's leader
    /// (`$JS.API.STREAM.MSG.GET`), never by direct get: on a replicated
    /// bucket a direct get may be answered by a replica that lags (see
    /// `StreamConfig::exact_direct_gets`), and a journal, lease or route read
    /// from one is a step back in time. Seen after a partition healed: a
    /// finished migration read as `caught_up`, a moved consumer as waiting.
    pub async fn entry(&self, key: &str, what: &str) -> Result<Option<kv::Entry>> {
        let subject = format!("{}{key}", self.kv.prefix);
        let stream = format!("KV_{BUCKET}");
        let read = self.js.unfenced().last_on_subject(&stream, &subject).await;
        let Some(m) = read.map_err(|e| match e {
            // Named as it is (exit code, the subject to grant).
            Error::PermissionDenied { .. } => e,
            e => jerr(what, e),
        })?
        else {
            return Ok(None);
        };
        // As async-nats reads it (kv `kv_operation_from_stream_message`): the
        // KV-Operation header, else a delete marker's reason, else a put.
        let operation = match (m.header("KV-Operation"), m.header("Nats-Marker-Reason")) {
            (Some(op), _) => op.parse().unwrap_or(kv::Operation::Put),
            (None, Some("Remove")) => kv::Operation::Delete,
            (None, Some(_)) => kv::Operation::Purge,
            (None, None) => kv::Operation::Put,
        };
        let rfc3339 = time::format_description::well_known::Rfc3339;
        let created = m.time.as_deref().and_then(|t| time::OffsetDateTime::parse(t, &rfc3339).ok());
        Ok(Some(kv::Entry {
            bucket: BUCKET.into(),
            key: key.into(),
            value: m.payload,
            revision: m.seq,
            delta: 0,
            created: created.ok_or_else(|| jerr(what, "the entry has no time"))?,
            operation,
            seen_current: false,
        }))
    }

    pub fn kv(&self) -> &kv::Store {
        &self.kv
    }

    /// Writes an instance's registration (its heartbeat).
    pub async fn put_instance(&self, r: &InstanceRecord) -> Result<()> {
        let v = serde_json::to_vec(r).expect("instance record serializes");
        self.kv
            .put(instance_key(&r.stream, &r.consumer, &r.instance), Bytes::from(v))
            .await
            .map_err(|e| jerr("cannot write the instance registration", e))?;
        Ok(())
    }

    /// Removes an instance's registration (it stops cleanly).
    pub async fn delete_instance(
        &self,
        stream: &str,
        consumer: &str,
        instance: &str,
    ) -> Result<()> {
        self.kv
            .delete(instance_key(stream, consumer, instance))
            .await
            .map_err(|e| jerr("cannot delete the instance registration", e))?;
        Ok(())
    }

    /// Every registered instance (of `home` = (stream, consumer) only, if
    /// given), live or not: liveness is judged by the entry's server timestamp
    /// against the instance's own `ttl_ms`.
    ///
    /// The runner polls this: the keys are listed from the bucket stream's
    /// subjects (one STREAM.INFO with a subjects filter), not with a KV key
    /// watcher, which would create a consumer per call.
    pub async fn instances(&self, home: Option<(&str, &str)>) -> Result<Vec<Instance>> {
        let prefix = match home {
            Some((s, c)) => cutover_core::journal::instance_prefix(s, c),
            None => "inst.".into(),
        };
        let kv_prefix = format!("$KV.{BUCKET}.");
        let filter = format!("{kv_prefix}{prefix}>");
        let info = self
            .js
            .api(
                "list the instances",
                &format!("STREAM.INFO.KV_{BUCKET}"),
                &serde_json::json!({ "subjects_filter": filter }),
            )
            .await?;
        let subjects = info["state"]["subjects"].as_object().cloned().unwrap_or_default();
        let mut out = vec![];
        for subject in subjects.keys() {
            let Some(k) = subject.strip_prefix(&kv_prefix) else { continue };
            let entry = self.entry(k, "cannot read an instance").await?;
            let Some(en) = entry.filter(|e| e.operation == kv::Operation::Put) else { continue };
            let Ok(record) = serde_json::from_slice::<InstanceRecord>(&en.value) else { continue };
            let written_ms = (en.created.unix_timestamp_nanos() / 1_000_000) as u64;
            let age_ms = now_ms().saturating_sub(written_ms);
            out.push(Instance { live: age_ms < record.ttl_ms, age_ms, record });
        }
        out.sort_by(|a, b| a.record.instance.cmp(&b.record.instance));
        Ok(out)
    }
}

/// A registered application instance as the runner and `status` see it.
#[derive(Debug, Clone, Serialize)]
pub struct Instance {
    #[serde(flatten)]
    pub record: InstanceRecord,
    /// Written less than its `ttl_ms` ago (by the server's timestamp).
    pub live: bool,
    /// Milliseconds since its record was last written.
    pub age_ms: u64,
}

/// A lease as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseInfo {
    /// The source stream the lease is on.
    pub stream: String,
    pub holder: String,
    pub migration: String,
    pub expires_ms: u64,
    /// Not expired: a runner holds it (or died less than a lease ago).
    pub live: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct LeaseRecord {
    holder: String,
    migration: String,
    expires_ms: u64,
}

/// The runner's hold on a source stream's migration.
pub struct Lease {
    key: String,
    revision: u64,
    record: LeaseRecord,
    ttl: Duration,
    renewed: Instant,
}

impl Lease {
    pub async fn acquire(
        store: &JournalStore,
        from: &str,
        migration: &str,
        ttl: Duration,
    ) -> Result<Lease> {
        Self::take(store, from, migration, ttl, None).await
    }

    /// Takes the lease on `from` from `dead_holder`, whose runner is known to
    /// be gone (its guard saw it exit): at once, live or not. Held by anyone
    /// else (live): [`Error::Leased`].
    pub async fn take_over(
        store: &JournalStore,
        from: &str,
        migration: &str,
        ttl: Duration,
        dead_holder: &str,
    ) -> Result<Lease> {
        Self::take(store, from, migration, ttl, Some(dead_holder)).await
    }

    /// Takes the lease on `from` if free, lapsed, or held by `dead` (a
    /// runner known gone), by compare-and-set on the revision read.
    async fn take(
        store: &JournalStore,
        from: &str,
        migration: &str,
        ttl: Duration,
        dead: Option<&str>,
    ) -> Result<Lease> {
        // The lease counts from before its write: a runner stopped while
        // the write's answer was on its way must not count it from when it
        // read the answer (see `renew_if_due`).
        let sent = Instant::now();
        let key = lease_key(from);
        let record = LeaseRecord {
            holder: holder(),
            migration: migration.into(),
            expires_ms: now_ms() + ttl.as_millis() as u64,
        };
        let value = Bytes::from(serde_json::to_vec(&record).unwrap());
        let kvs = store.kv();
        let revision = match kvs.create(&key, value.clone()).await {
            Ok(rev) => rev,
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                let entry = store.entry(&key, "cannot read the lease").await?;
                match entry {
                    Some(en) => {
                        let cur: Option<LeaseRecord> = serde_json::from_slice(&en.value).ok();
                        if let Some(cur) = cur.filter(|c| {
                            c.expires_ms > now_ms()
                                && en.operation == kv::Operation::Put
                                && dead != Some(c.holder.as_str())
                        }) {
                            return Err(leased(cur.migration, cur.holder, cur.expires_ms));
                        }
                        kvs.update(&key, value, en.revision).await.map_err(|e| match e.kind() {
                            kv::UpdateErrorKind::WrongLastRevision => Error::Leased {
                                id: migration.into(),
                                holder: "another runner (it took the lease just now)".into(),
                                until: "it finishes".into(),
                            },
                            _ => jerr("cannot take the lease", e),
                        })?
                    }
                    None => kvs
                        .create(&key, value)
                        .await
                        .map_err(|e| jerr("cannot take the lease", e))?,
                }
            }
            Err(e) => return Err(jerr("cannot take the lease", e)),
        };
        Ok(Lease { key, revision, record, ttl, renewed: sent })
    }

    /// Renews when a third of the lease has passed. A failed compare-and-set
    /// means another runner took over: stop. A renewal that fails otherwise
    /// (the bucket electing a leader: no responders, a timeout) is tried
    /// again while a third of the lease is left; a write that was applied
    /// though its answer was lost is recognised by its value.
    pub async fn renew_if_due(&mut self, store: &JournalStore) -> Result<()> {
        if self.renewed.elapsed() < self.ttl / 3 {
            return Ok(());
        }
        // Counted from before the write: a runner stopped (SIGSTOP) after
        // sending it and continued after another runner took the lease over
        // and finished read the answer late, counted the lease as renewed
        // then, and its next request's failure went out as its own (the
        // chaos loop: "consumer worker does not exist", exit 2, instead of
        // the lease).
        let sent = Instant::now();
        self.record.expires_ms = now_ms() + self.ttl.as_millis() as u64;
        let value = Bytes::from(serde_json::to_vec(&self.record).unwrap());
        let mut backoff = Duration::from_millis(50);
        let mut unanswered = false;
        loop {
            let e = match store.kv().update(&self.key, value.clone(), self.revision).await {
                Ok(revision) => {
                    self.revision = revision;
                    break;
                }
                Err(e) => e,
            };
            if e.kind() == kv::UpdateErrorKind::WrongLastRevision {
                if unanswered {
                    // An earlier attempt may have been applied.
                    let id = &self.record.migration;
                    self.revision = store.written_by_us(id, &self.key, &value).await?;
                    break;
                }
                return Err(self.taken());
            }
            if self.renewed.elapsed() + backoff > self.ttl * 2 / 3 {
                return Err(jerr("cannot renew the lease", e));
            }
            tracing::debug!("renewing the lease: {e}; trying again in {backoff:?}");
            unanswered = true;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
        self.renewed = sent;
        Ok(())
    }

    /// Whether the lease is still this runner's, asked of the bucket (its
    /// record's revision is ours), whenever it was renewed: a failure's
    /// cause is the lease's when another runner took it meanwhile.
    pub async fn still_ours(&self, store: &JournalStore) -> Result<()> {
        let entry =
            store.kv().entry(&self.key).await.map_err(|e| jerr("cannot read the lease", e))?;
        match entry {
            Some(e) if e.revision == self.revision => Ok(()),
            _ => Err(self.taken()),
        }
    }

    /// This runner's lease lapsed and another runner took it.
    fn taken(&self) -> Error {
        Error::Leased {
            id: self.record.migration.clone(),
            holder: "another runner (our lease lapsed and was taken)".into(),
            until: "it finishes".into(),
        }
    }

    /// The fence of a runner holding `lease`: before each request, the lease
    /// is renewed if a third of it has passed (compare-and-set on its
    /// revision), so a request is sent only while at least two thirds of the
    /// lease remain ours. A runner that was stopped (SIGSTOP, a VM pause, a
    /// long GC) past its lease and taken over finds on its next request that
    /// the revision moved: [`Error::Leased`], and the request is not sent.
    /// What remains is a runner stopped between this check and the send: no
    /// JetStream request can be made conditional on the lease.
    pub fn fence(lease: Arc<Mutex<Lease>>, store: JournalStore) -> Fence {
        Arc::new(move || {
            let (lease, store) = (lease.clone(), store.clone());
            Box::pin(async move { lease.lock().await.renew_if_due(&store).await })
        })
    }

    /// Releases by writing an expired record (compare-and-set: never clobbers a
    /// lease someone else took).
    pub async fn release(&mut self, store: &JournalStore) -> Result<()> {
        self.record.expires_ms = 0;
        let value = Bytes::from(serde_json::to_vec(&self.record).unwrap());
        store
            .kv()
            .update(&self.key, value, self.revision)
            .await
            .map_err(|e| jerr("cannot release the lease", e))?;
        Ok(())
    }
}

fn encode(v: &impl Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec(v).expect("journal record serializes"))
}

/// This process's lease holder name: host, process id, start of the hold.
fn holder() -> String {
    format!("{}{}", holder_prefix(std::process::id()), now_ms())
}

/// The start of every lease holder name process `pid` on this host writes.
pub fn holder_prefix(pid: u32) -> String {
    format!("{}:{pid}:", hostname())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "host".into())
}

/// The journal of migration `id` and its store, or why there is none.
pub async fn load_migration(js: &Js, id: &str) -> Result<(JournalStore, Journal)> {
    let store = JournalStore::open(js, IfMissing::ReturnNone)
        .await?
        .ok_or_else(|| Error::NoMigration("no migration journal on this server (KV bucket CUTOVER does not exist): no migration was started here; start one with `nats-cutover run`. A move across systems keeps its journal on the target side: --server names B's system, --from-server A's".into()))?;
    let j = store.load(id).await?.ok_or_else(|| {
        Error::NoMigration(format!("no migration {id:?}; list them with `nats-cutover status`"))
    })?;
    Ok((store, j))
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::jetstream::context::{PublishError, PublishErrorKind};

    /// A write refused with 10164 as async-nats reports it (an update's
    /// `Other`, through the publish error, down to the API error) is "in
    /// process"; the same chain with another code is not.
    #[test]
    fn in_process_reads_the_api_code_through_the_source_chain() {
        let api = |code: u64| -> async_nats::jetstream::Error {
            serde_json::from_value(serde_json::json!({"code": 400, "err_code": code, "description": "wrong last sequence"}))
                .unwrap()
        };
        let update = |code| -> kv::UpdateError {
            PublishError::with_source(PublishErrorKind::Other, api(code)).into()
        };
        assert!(in_process(&update(10164)));
        assert!(!in_process(&update(10071)));
        let create: kv::CreateError = update(10164).into();
        assert!(in_process(&create));
    }
}
