//! The JetStream API, spoken as raw JSON.
//!
//! Why not async-nats' typed stream/consumer configs: a migration tool reads a
//! stream's configuration and writes it back changed. A typed round trip drops
//! every field the client version does not model (newer servers add fields every
//! release), silently changing the stream. Here configurations stay
//! `serde_json::Value`s, edited field by field; the core parses read-only views.

use crate::error::{Error, Result};
use async_nats::{Client, HeaderMap};
use base64::Engine;
use bytes::Bytes;
use cutover_core::api_error::ApiErrorCode;
use cutover_core::model::{ConsumerInfo, SequenceInfo, StreamInfo};
use cutover_core::source_header;
use cutover_core::version::ServerVersion;
use futures::future::BoxFuture;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A stored message as a get returns it.
#[derive(Debug, Clone)]
pub struct StoredMsg {
    pub seq: u64,
    pub subject: String,
    pub headers: Vec<(String, String)>,
    pub payload: Bytes,
    /// When the server stored it (RFC 3339), where the answer says.
    pub time: Option<String>,
}

impl StoredMsg {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The origin sequence in the stream B sources, from `Nats-Stream-Source`.
    pub fn origin_seq(&self, origin_stream: &str) -> Result<Option<u64>> {
        let Some(h) = self.header(source_header::HEADER) else { return Ok(None) };
        let r = source_header::parse(h).map_err(|e| Error::Decode {
            what: format!("message {}", self.seq),
            reason: e.to_string(),
        })?;
        if r.stream != origin_stream {
            return Ok(None);
        }
        Ok(Some(r.seq))
    }
}

/// Which message [`Js::get_msg`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Exactly the sequence asked for; `None` when it is not stored.
    Exact,
    /// The first message stored at or after it (`next_by_subj: ">"`; server
    /// `LoadNextMsg` semantics); `None` when there is none.
    AtOrAfter,
}

/// How a message get reaches the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `$JS.API.DIRECT.GET`: answered by any replica; the stream must allow it.
    Direct,
    /// `$JS.API.STREAM.MSG.GET`: answered by the stream leader.
    Leader,
}

impl Via {
    /// Direct get where it reads exactly: pass
    /// [`cutover_core::model::StreamConfig::exact_direct_gets`] (R1 streams
    /// that allow it), never `allow_direct` alone.
    pub fn direct_if(exact: bool) -> Self {
        if exact {
            Via::Direct
        } else {
            Via::Leader
        }
    }
}

/// What [`Js::consumer_create`] may do to a consumer of that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `action: "create"`: fails if one exists with another configuration and
    /// succeeds if it is identical, which makes the step idempotent for resumes.
    Create,
    /// No action: creates it, or updates one that exists.
    CreateOrUpdate,
}

/// What a fenced [`Js`] awaits before each JetStream API request: `Err` stops
/// the request (the runner's lease: see `journal::Lease::fence`).
pub type Fence = Arc<dyn Fn() -> BoxFuture<'static, Result<()>> + Send + Sync>;

#[derive(Clone)]
pub struct Js {
    pub client: Client,
    prefix: String,
    timeout: Duration,
    gets: Arc<AtomicU64>,
    fence: Option<Fence>,
    /// Across two systems ([`Js::across`]): the old stream's name and the
    /// connection to the system that holds it.
    source: Option<Arc<(String, Js)>>,
    /// How `client` was connected, for a second connection to the same
    /// system ([`Js::with_options`]; the commit window's "no responders"
    /// answers, `crate::no_responders`).
    options: Option<Arc<crate::connect::ConnectOptions>>,
}

/// The stream a JetStream API subject (without its prefix) is about: `None`
/// for account-wide requests (`INFO`, `STREAM.NAMES`, `STREAM.LIST`). Subject
/// shapes: server jetstream_api.go, the `JSApi*` constants.
fn stream_of(subject: &str) -> Option<&str> {
    let t: Vec<&str> = subject.split('.').collect();
    let at = match (t.first().copied(), t.get(1).copied()) {
        (Some("STREAM"), Some("MSG")) => 3,
        (Some("STREAM"), _) => 2,
        (Some("CONSUMER"), Some("MSG" | "DURABLE")) => 3,
        (Some("CONSUMER"), _) => 2,
        (Some("DIRECT"), _) => 2,
        _ => return None,
    };
    t.get(at).copied()
}

fn headers_vec(h: &HeaderMap) -> Vec<(String, String)> {
    let mut v = vec![];
    for (k, vals) in h.iter() {
        for val in vals {
            v.push((k.to_string(), val.as_str().to_string()));
        }
    }
    v
}

/// Parses a `NATS/1.0\r\nK: V\r\n...` header block (as STREAM.MSG.GET returns it).
fn parse_header_block(b: &[u8]) -> Vec<(String, String)> {
    let s = String::from_utf8_lossy(b);
    s.lines()
        .skip(1)
        .filter_map(|l| {
            l.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// Whether a consumer (its info) is an application's durable: named, and
/// not one of the server's own: a stream that mirrors or sources this one
/// reads it through a `direct` consumer, which from 2.14 is a durable
/// marked `sourcing` (reliable sourcing from work-queue and interest
/// streams, ADR-60: `JS_MIRROR_…`, ack policy `flow_control`, metadata
/// `_nats.mirror.stream`; seen on 2.15.1), no application's to move.
pub fn is_application_durable(consumer_info: &Value) -> bool {
    let c = &consumer_info["config"];
    let servers = c["direct"].as_bool() == Some(true) || c["sourcing"].as_bool() == Some(true);
    let name = c["durable_name"].as_str().unwrap_or_default();
    !name.is_empty() && !servers && !name.starts_with(MIRROR_CONSUMER_PREFIX)
}

/// The durable a paced copy reads A through (`engine::steps::create`):
/// `CUTOVER_MIRROR_<B>` on A. Ours, never an application's.
pub const MIRROR_CONSUMER_PREFIX: &str = "CUTOVER_MIRROR_";

/// [`MIRROR_CONSUMER_PREFIX`] for copy `b`.
pub fn mirror_consumer_name(b: &str) -> String {
    format!("{MIRROR_CONSUMER_PREFIX}{b}")
}

/// How long after a resume a paused push consumer's pause ends (see
/// [`Js::consumer_pause`]): long enough to outlast the request's way to the
/// consumer's leader, short enough to go unnoticed.
pub const RESUME_NUDGE: std::time::Duration = std::time::Duration::from_millis(150);

impl Js {
    pub fn new(client: Client, timeout: Duration) -> Self {
        Self {
            client,
            prefix: "$JS.API".into(),
            timeout,
            gets: Arc::new(AtomicU64::new(0)),
            fence: None,
            source: None,
            options: None,
        }
    }

    /// One client for a move across systems (accounts, JetStream domains,
    /// leaf nodes, clusters: docs/cross-system.md): every request about the
    /// stream `from` goes to `source`, the connection to the system that holds
    /// it; everything else (B, its durables, the `CUTOVER` bucket with the
    /// journal, lease and routes) to `self`, the target side. The side is
    /// chosen by the stream a request names, so the engine, `verify` and
    /// rollback run unchanged across the boundary; B needs another name than
    /// A (the plan refuses the same name, as on one system).
    pub fn across(self, source: Js, from: &str) -> Js {
        Js { source: Some(Arc::new((from.to_string(), source))), ..self }
    }

    /// This client without its source side: every request to the target
    /// side, whatever stream it names. The second hop of a move across
    /// systems that keeps the stream's name runs on it (there the old
    /// name is the new stream's, on the target side).
    pub fn target_only(&self) -> Js {
        Js { source: None, ..self.clone() }
    }

    /// The source side of a move across systems, if this is one.
    pub fn source_side(&self) -> Option<&Js> {
        self.source.as_deref().map(|(_, js)| js)
    }

    /// A move across systems needs the source side's connection too: run,
    /// resume, rollback and verify refuse without it (a rollback that could not
    /// reach A once resumed nothing there and left its durables paused for good).
    pub fn both_sides(&self, plan: &cutover_core::plan::Plan) -> Result<()> {
        if (plan.external.is_some() || plan.across) && self.source_side().is_none() {
            let id = cutover_core::journal::migration_id(&plan.from, &plan.to);
            return Err(Error::Input(format!("migration {id} moves {} across systems: give the source side's connection too (--from-server or --from-context)", plan.from)));
        }
        Ok(())
    }

    /// The connection that holds `stream`: the source side for the old
    /// stream of a move across systems, else this one.
    pub fn side(&self, stream: &str) -> &Js {
        match self.source.as_deref() {
            Some((from, js)) if from == stream => js,
            _ => self,
        }
    }

    /// The client that reaches `stream` (see [`Js::side`]).
    pub fn client_for(&self, stream: &str) -> &Client {
        &self.side(stream).client
    }

    /// The target side's server version (what B's behaviour depends on).
    pub fn target_version(&self) -> Option<ServerVersion> {
        ServerVersion::parse(&self.client.server_info().version)
    }

    /// This client, awaiting `fence` before every JetStream API request (each
    /// try of it): a runner's requests stop once its lease is gone.
    /// Remembers how the client was connected (see the `options` field).
    pub fn with_options(self, options: crate::connect::ConnectOptions) -> Js {
        Js { options: Some(Arc::new(options)), ..self }
    }

    /// How the client was connected, when [`Js::with_options`] said so.
    pub fn options(&self) -> Option<&crate::connect::ConnectOptions> {
        self.options.as_deref()
    }

    pub fn fenced(&self, fence: Fence) -> Js {
        Js { fence: Some(fence), ..self.clone() }
    }

    /// The same client without a fence: for reads the fence itself may
    /// need (the lease).
    pub fn unfenced(&self) -> Js {
        Js { fence: None, ..self.clone() }
    }

    /// How long one request waits for its answer.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The largest message the server takes (its INFO's max_payload).
    pub fn max_payload(&self) -> usize {
        self.client.server_info().max_payload
    }

    /// The server version; across systems the older side's, so a feature is
    /// used only where both sides have it (pause acts on A, reset on B).
    pub fn server_version(&self) -> Option<ServerVersion> {
        let own = self.target_version();
        match self.source_side() {
            Some(src) => match (own, src.target_version()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                _ => None,
            },
            None => own,
        }
    }

    /// Message gets issued so far (translation is measured in gets, not time).
    pub fn gets(&self) -> u64 {
        self.gets.load(Ordering::Relaxed)
    }

    /// One JetStream API request; an `error` in the answer becomes [`Error::Api`].
    /// One JetStream API request. Failures that a cluster shows while it elects
    /// a leader (no answer in time, no responders, "JetStream system temporarily
    /// unavailable") are tried again for up to three request timeouts: every
    /// request the engine makes is idempotent or reconciled with the server.
    pub async fn api(&self, what: &str, subject: &str, body: &Value) -> Result<Value> {
        let deadline = std::time::Instant::now() + self.timeout * 3;
        let mut backoff = Duration::from_millis(50);
        loop {
            if let Some(fence) = &self.fence {
                fence().await?;
            }
            match self.api_once(what, subject, body).await {
                Err(e) if transient(&e) && std::time::Instant::now() + backoff < deadline => {
                    tracing::debug!("{what}: {e}; trying again in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                r => return r,
            }
        }
    }

    async fn api_once(&self, what: &str, subject: &str, body: &Value) -> Result<Value> {
        if let Some(stream) = stream_of(subject) {
            let side = self.side(stream);
            if !std::ptr::eq(side, self) {
                return Box::pin(side.api_once(what, subject, body)).await;
            }
        }
        let payload = if body.is_null() {
            Bytes::new()
        } else {
            Bytes::from(serde_json::to_vec(body).expect("json"))
        };
        let info = subject.starts_with("STREAM.INFO.") || subject.starts_with("CONSUMER.INFO.");
        let subject = format!("{}.{}", self.prefix, subject);
        let req = async_nats::Request::new().payload(payload).timeout(Some(self.timeout));
        let msg = self.send(what, subject, req).await?;
        let v: Value = serde_json::from_slice(&msg.payload)
            .map_err(|e| Error::Decode { what: what.into(), reason: e.to_string() })?;
        if let Some(err) = v.get("error") {
            return Err(Error::Api {
                what: what.into(),
                code: ApiErrorCode(err.get("err_code").and_then(Value::as_u64).unwrap_or(0)),
                description: err
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error")
                    .to_string(),
            });
        }
        if info && stale_leader(&v) {
            return Err(Error::Api {
                what: what.into(),
                code: ApiErrorCode::CLUSTER_NOT_AVAILABLE,
                description: format!("answered by a replica that knows no leader, or by a leader that has not heard from its replicas for {} s (cut off from them, or back from a partition): its state may be stale", STALE_LEADER.as_secs()),
            });
        }
        Ok(v)
    }

    /// One request. A request sent just before the connection dropped (the
    /// server restarted) is lost, and the client does not send it again once
    /// reconnected: its answer never comes and the wait would last the whole
    /// timeout (5 s by default), with a consumer paused meanwhile. So a
    /// reconnection during the wait ends it as a timeout, which [`Js::api`]
    /// tries again at once (every request the engine makes may be sent twice:
    /// it is idempotent or reconciled with the server).
    async fn send(
        &self,
        what: &str,
        subject: String,
        req: async_nats::Request,
    ) -> Result<async_nats::Message> {
        let stats = self.client.statistics();
        let connects = stats.connects.load(Ordering::Relaxed);
        let since = crate::denied::mark();
        let denied = |subject: &str| {
            crate::denied::for_request(subject, since).map(|d| Error::PermissionDenied {
                what: what.into(),
                op: d.op,
                subject: d.subject,
            })
        };
        let answer = self.client.send_request(subject.clone(), req);
        tokio::pin!(answer);
        loop {
            tokio::select! {
                r = &mut answer => return r.map_err(|e| denied(&subject).unwrap_or_else(|| request_error(what, e))),
                _ = tokio::time::sleep(Duration::from_millis(20)) => {
                    // A denied request is dropped unanswered: say so now
                    // rather than as a timeout (crate::denied).
                    if let Some(e) = denied(&subject) {
                        return Err(e);
                    }
                    if stats.connects.load(Ordering::Relaxed) != connects {
                        return Err(Error::Timeout { what: what.into() });
                    }
                }
            }
        }
    }

    pub async fn account_info(&self) -> Result<Value> {
        self.api("read account info", "INFO", &Value::Null).await
    }

    pub async fn stream_info_raw(&self, name: &str) -> Result<Value> {
        match self
            .api(&format!("read stream {name}"), &format!("STREAM.INFO.{name}"), &Value::Null)
            .await
        {
            Err(e) if e.api_code() == Some(ApiErrorCode::STREAM_NOT_FOUND) => {
                Err(Error::StreamNotFound(name.into()))
            }
            r => r,
        }
    }

    pub async fn stream_info(&self, name: &str) -> Result<(Value, StreamInfo)> {
        let raw = self.stream_info_raw(name).await?;
        let view = serde_json::from_value(raw.clone()).map_err(|e| Error::Decode {
            what: format!("stream {name} info"),
            reason: e.to_string(),
        })?;
        Ok((raw, view))
    }

    /// `None` when the stream does not exist.
    pub async fn stream_info_opt(&self, name: &str) -> Result<Option<(Value, StreamInfo)>> {
        match self.stream_info(name).await {
            Err(Error::StreamNotFound(_)) => Ok(None),
            r => r.map(Some),
        }
    }

    pub async fn stream_create(&self, config: &Value) -> Result<Value> {
        let name = config["name"].as_str().unwrap_or_default();
        self.api(&format!("create stream {name}"), &format!("STREAM.CREATE.{name}"), config).await
    }

    pub async fn stream_update(&self, config: &Value) -> Result<Value> {
        let name = config["name"].as_str().unwrap_or_default();
        self.api(&format!("update stream {name}"), &format!("STREAM.UPDATE.{name}"), config).await
    }

    /// Purges `stream`'s messages below sequence `below` (on `filter` only,
    /// when given); returns how many went.
    pub async fn stream_purge_below(
        &self,
        stream: &str,
        filter: Option<&str>,
        below: u64,
    ) -> Result<u64> {
        let mut body = json!({ "seq": below });
        if let Some(f) = filter {
            body["filter"] = json!(f);
        }
        let v = self
            .api(&format!("purge {stream} below {below}"), &format!("STREAM.PURGE.{stream}"), &body)
            .await?;
        Ok(v["purged"].as_u64().unwrap_or(0))
    }

    /// Deletes the stream; one already gone counts as deleted (a retried
    /// delete whose first answer was lost finds it gone).
    pub async fn stream_delete(&self, name: &str) -> Result<()> {
        match self
            .api(&format!("delete stream {name}"), &format!("STREAM.DELETE.{name}"), &Value::Null)
            .await
        {
            Err(e) if e.api_code() == Some(ApiErrorCode::STREAM_NOT_FOUND) => Ok(()),
            r => r.map(|_| ()),
        }
    }

    pub async fn consumer_info_raw(&self, stream: &str, name: &str) -> Result<Value> {
        match self
            .api(
                &format!("read consumer {stream}/{name}"),
                &format!("CONSUMER.INFO.{stream}.{name}"),
                &Value::Null,
            )
            .await
        {
            Err(e) if e.api_code() == Some(ApiErrorCode::CONSUMER_NOT_FOUND) => {
                Err(Error::ConsumerNotFound { stream: stream.into(), consumer: name.into() })
            }
            Err(e) if e.api_code() == Some(ApiErrorCode::STREAM_NOT_FOUND) => {
                Err(Error::StreamNotFound(stream.into()))
            }
            r => r,
        }
    }

    pub async fn consumer_info(&self, stream: &str, name: &str) -> Result<(Value, ConsumerInfo)> {
        let raw = self.consumer_info_raw(stream, name).await?;
        let view = serde_json::from_value(raw.clone()).map_err(|e| Error::Decode {
            what: format!("consumer {stream}/{name} info"),
            reason: e.to_string(),
        })?;
        Ok((raw, view))
    }

    pub async fn consumer_info_opt(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<Option<(Value, ConsumerInfo)>> {
        match self.consumer_info(stream, name).await {
            Err(Error::ConsumerNotFound { .. }) => Ok(None),
            r => r.map(Some),
        }
    }

    /// Every consumer's info on `stream`, in one paged request
    /// (`CONSUMER.LIST`), so that a look at durables nobody planned needs
    /// no permission per consumer.
    pub async fn consumer_infos(&self, stream: &str) -> Result<Vec<Value>> {
        let mut infos = vec![];
        loop {
            let v = self
                .api(
                    &format!("list consumers of {stream}"),
                    &format!("CONSUMER.LIST.{stream}"),
                    &json!({ "offset": infos.len() }),
                )
                .await
                .map_err(|e| match e.api_code() {
                    Some(ApiErrorCode::STREAM_NOT_FOUND) => Error::StreamNotFound(stream.into()),
                    _ => e,
                })?;
            let page = v["consumers"].as_array().cloned().unwrap_or_default();
            let total = v["total"].as_u64().unwrap_or(0) as usize;
            let n = page.len();
            infos.extend(page);
            if n == 0 || infos.len() >= total {
                break;
            }
        }
        Ok(infos)
    }

    /// The application durables on `stream` not named in `known`, with
    /// their infos, by name: what an application created beside the ones a
    /// migration moves ([`is_application_durable`]).
    pub async fn unknown_durables(
        &self,
        stream: &str,
        known: &[&str],
    ) -> Result<Vec<(String, Value)>> {
        let mut out = vec![];
        for raw in self.consumer_infos(stream).await? {
            let Some(n) = raw["name"].as_str().map(String::from) else { continue };
            if !known.contains(&n.as_str()) && is_application_durable(&raw) {
                out.push((n, raw));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    pub async fn consumer_names(&self, stream: &str) -> Result<Vec<String>> {
        let mut names = vec![];
        loop {
            let v = self
                .api(
                    &format!("list consumers of {stream}"),
                    &format!("CONSUMER.NAMES.{stream}"),
                    &json!({ "offset": names.len() }),
                )
                .await
                .map_err(|e| {
                    if e.api_code() == Some(ApiErrorCode::STREAM_NOT_FOUND) {
                        Error::StreamNotFound(stream.into())
                    } else {
                        e
                    }
                })?;
            let page: Vec<String> = v["consumers"]
                .as_array()
                .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
                .unwrap_or_default();
            let total = v["total"].as_u64().unwrap_or(0) as usize;
            let n = page.len();
            names.extend(page);
            if n == 0 || names.len() >= total {
                break;
            }
        }
        names.sort();
        Ok(names)
    }

    /// Creates a consumer, or with [`Action::CreateOrUpdate`] updates one too.
    pub async fn consumer_create(
        &self,
        stream: &str,
        name: &str,
        config: &Value,
        action: Action,
    ) -> Result<Value> {
        let mut body = json!({ "stream_name": stream, "config": config });
        if action == Action::Create {
            body["action"] = json!("create");
        }
        self.api(
            &format!("create consumer {stream}/{name}"),
            &format!("CONSUMER.CREATE.{stream}.{name}"),
            &body,
        )
        .await
    }

    pub async fn consumer_delete(&self, stream: &str, name: &str) -> Result<()> {
        match self
            .api(
                &format!("delete consumer {stream}/{name}"),
                &format!("CONSUMER.DELETE.{stream}.{name}"),
                &Value::Null,
            )
            .await
        {
            Err(e) if e.api_code() == Some(ApiErrorCode::CONSUMER_NOT_FOUND) => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// Pauses until `until` (RFC 3339), or resumes with `None`
    /// (`$JS.API.CONSUMER.PAUSE`, 2.11+; server jetstream_api.go
    /// `jsConsumerPauseRequest`: an empty body resumes).
    /// Pauses the consumer until `until` (RFC 3339), or resumes it (`None`).
    ///
    /// A push consumer is resumed by a pause that ends a moment later on
    /// the server's clock ([`RESUME_NUDGE`]): resumed at once, it delivers
    /// nothing until a message arrives on the stream. Its redelivery timer
    /// runs during the pause and queues an expired message once, signalling
    /// the delivery loop, which sees the pause and waits again; a resume
    /// (an empty body, or a time in the past) only stops the unpause timer,
    /// without a signal; the timer's own firing signals (consumer.go
    /// `checkPending`, `loopAndGatherMsgs`, `updatePauseState`; the same on
    /// 2.11 to 2.15). A newcomer's drain on an idle stream waited 121 s for
    /// a message whose ack_wait was 30 s. Pull consumers are signalled by
    /// their next pull request and are resumed at once.
    pub async fn consumer_pause(
        &self,
        stream: &str,
        name: &str,
        until: Option<&str>,
    ) -> Result<bool> {
        let nudge = match until {
            Some(_) => None,
            None => self.resume_nudge(stream, name).await?,
        };
        let body = match (until, &nudge) {
            (Some(t), _) => json!({ "pause_until": t }),
            (None, Some(t)) => json!({ "pause_until": t }),
            (None, None) => Value::Null,
        };
        let what = format!(
            "{} consumer {stream}/{name}",
            if until.is_some() { "pause" } else { "resume" }
        );
        let v = self.api(&what, &format!("CONSUMER.PAUSE.{stream}.{name}"), &body).await.map_err(
            |e| match e.api_code() {
                Some(ApiErrorCode::CONSUMER_NOT_FOUND) => {
                    Error::ConsumerNotFound { stream: stream.into(), consumer: name.into() }
                }
                _ => e,
            },
        )?;
        let paused = v["paused"].as_bool().unwrap_or(false);
        if nudge.is_some() && !paused {
            // The nudge's end had passed on the server already (a slow
            // answer): it was a plain resume, which may deliver nothing.
            tracing::debug!(stream, name, "push consumer resumed without its unpause timer");
        }
        Ok(paused && until.is_some())
    }

    /// Waits until everything consumer `name`'s leader proposed before now
    /// is applied to its state: an ack, with a reply, of the message at its
    /// ack floor. That message is not pending, so the ack changes nothing,
    /// but on a replicated consumer it goes through the consumer's raft
    /// group and is answered only once applied (consumer.go `processAck` →
    /// `processAckMsgLocked` → `updateAcks`, answered by
    /// `processReplicatedAck`), and raft applies in order. Consumer info
    /// reads delivered from the applied state, while a delivery is proposed
    /// before it is sent (`deliverMsg`): read right after a pause took effect,
    /// it can be short of deliveries still in flight (a newcomer's fence was
    /// one short, and a message processed twice). Nothing to wait for with
    /// no ack floor yet (`floor` 0).
    pub async fn consumer_barrier(
        &self,
        stream: &str,
        name: &str,
        floor: &SequenceInfo,
    ) -> Result<()> {
        if floor.stream_seq == 0 {
            return Ok(());
        }
        let subject =
            format!("$JS.ACK.{stream}.{name}.1.{}.{}.0.0", floor.stream_seq, floor.consumer_seq);
        let what = format!("wait for consumer {stream}/{name}'s state to be applied");
        // Sent again while the consumer has no leader (an election: nobody
        // answers acks then, or they are lost), within twice the timeout.
        let deadline = Instant::now() + self.timeout * 2;
        loop {
            let req = async_nats::Request::new().payload("+ACK".into()).timeout(Some(self.timeout));
            match self.side(stream).send(&what, subject.clone(), req).await {
                Ok(_) => return Ok(()),
                Err(e @ Error::PermissionDenied { .. }) => return Err(e),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// A paused consumer's state once nothing it delivered is in flight:
    /// [`Js::consumer_barrier`] then a read, until two in a row agree on
    /// what it delivered. One barrier is not enough: a delivery the
    /// consumer's loop took before it saw the pause can be proposed after
    /// the barrier (an R3 consumer under load, one read in 60 after a
    /// barrier); a pause stops the loop, so the second finds it applied.
    /// Bounded by twice the request timeout.
    pub async fn settled_read(&self, stream: &str, name: &str) -> Result<(Value, ConsumerInfo)> {
        let deadline = Instant::now() + self.timeout * 2;
        let (_, mut last) = self.consumer_info(stream, name).await?;
        loop {
            self.consumer_barrier(stream, name, &last.ack_floor).await?;
            let (raw, ci) = self.consumer_info(stream, name).await?;
            if ci.delivered == last.delivered || Instant::now() > deadline {
                return Ok((raw, ci));
            }
            last = ci;
        }
    }

    /// For a paused push consumer: the time, on the server's clock (the
    /// `ts` of its consumer info), [`RESUME_NUDGE`] from now. `None` for a
    /// pull consumer, one that is not paused, or a server whose info has no
    /// time.
    async fn resume_nudge(&self, stream: &str, name: &str) -> Result<Option<String>> {
        use time::format_description::well_known::Rfc3339;
        let raw = match self.consumer_info_raw(stream, name).await {
            Ok(raw) => raw,
            Err(Error::ConsumerNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let push = raw["config"]["deliver_subject"].as_str().is_some_and(|d| !d.is_empty());
        if !push || raw["paused"].as_bool() != Some(true) {
            return Ok(None);
        }
        let Some(now) =
            raw["ts"].as_str().and_then(|t| time::OffsetDateTime::parse(t, &Rfc3339).ok())
        else {
            return Ok(None);
        };
        Ok((now + RESUME_NUDGE).format(&Rfc3339).ok())
    }

    /// The message at `seq` ([`Lookup::Exact`]) or the first one at or after it
    /// ([`Lookup::AtOrAfter`]); `None` when there is none.
    pub async fn get_msg(
        &self,
        stream: &str,
        seq: u64,
        lookup: Lookup,
        via: Via,
    ) -> Result<Option<StoredMsg>> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        let mut req = json!({ "seq": seq });
        if lookup == Lookup::AtOrAfter {
            req["next_by_subj"] = json!(">");
        }
        self.get_with(stream, req, via == Via::Direct).await
    }

    /// The first message at or after `seq` whose subject matches `filter`
    /// (wildcards allowed).
    pub async fn next_matching(
        &self,
        stream: &str,
        seq: u64,
        filter: &str,
        direct: bool,
    ) -> Result<Option<StoredMsg>> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.get_with(stream, json!({ "seq": seq.max(1), "next_by_subj": filter }), direct).await
    }

    /// The first message of `origin` after `after` that `b_source` selects:
    /// what B still has to source. Messages the source filters out do not count.
    pub async fn next_sourced(
        &self,
        origin: &StreamInfo,
        b_source: Option<&cutover_core::model::StreamSource>,
        after: u64,
    ) -> Result<Option<u64>> {
        let filters: Vec<String> = match b_source {
            Some(s) if s.filter_subject.as_deref().is_some_and(|f| !f.is_empty()) => {
                vec![s.filter_subject.clone().unwrap()]
            }
            Some(s) if !s.subject_transforms.is_empty() => s
                .subject_transforms
                .iter()
                .map(|t| if t.src.is_empty() { ">".to_string() } else { t.src.clone() })
                .collect(),
            _ => vec![">".to_string()],
        };
        let mut first: Option<u64> = None;
        for f in filters {
            if let Some(m) = self
                .next_matching(
                    &origin.config.name,
                    after + 1,
                    &f,
                    origin.config.exact_direct_gets(),
                )
                .await?
            {
                first = Some(first.map_or(m.seq, |x| x.min(m.seq)));
            }
        }
        Ok(first)
    }

    /// The first message stored at or after `time` (RFC 3339), 2.11+.
    pub async fn first_since(
        &self,
        stream: &str,
        time: &str,
        direct: bool,
    ) -> Result<Option<StoredMsg>> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.get_with(stream, json!({ "start_time": time }), direct).await
    }

    /// The last message of `stream` on `subject`, read from the stream's
    /// leader (tried again through elections, as every API request).
    pub async fn last_on_subject(&self, stream: &str, subject: &str) -> Result<Option<StoredMsg>> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.get_with(stream, json!({ "last_by_subj": subject }), false).await
    }

    /// The last message of the stream.
    pub async fn last_msg(&self, stream: &str, direct: bool) -> Result<Option<StoredMsg>> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.get_with(stream, json!({ "last_by_subj": ">" }), direct).await
    }

    async fn get_with(&self, stream: &str, req: Value, direct: bool) -> Result<Option<StoredMsg>> {
        let what = format!("get message from {stream}");
        let side = self.side(stream);
        if direct && !std::ptr::eq(side, self) {
            return Box::pin(side.get_with(stream, req, direct)).await;
        }
        if direct {
            let subject = format!("{}.DIRECT.GET.{stream}", self.prefix);
            let r = async_nats::Request::new()
                .payload(Bytes::from(req.to_string()))
                .timeout(Some(self.timeout));
            let msg = self.send(&what, subject, r).await?;
            if let Some(st) = msg.status {
                if st == async_nats::StatusCode::NOT_FOUND {
                    return Ok(None);
                }
                if st != async_nats::StatusCode::OK {
                    return Err(Error::Request {
                        what,
                        reason: format!("status {st} {}", msg.description.unwrap_or_default()),
                    });
                }
            }
            let headers = msg.headers.as_ref().map(headers_vec).unwrap_or_default();
            let seq = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("Nats-Sequence"))
                .and_then(|(_, v)| v.parse().ok());
            let subject = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("Nats-Subject"))
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let Some(seq) = seq else {
                return Err(Error::Decode {
                    what,
                    reason: "direct get answer has no Nats-Sequence header".into(),
                });
            };
            let time = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("Nats-Time-Stamp"))
                .map(|(_, v)| v.clone());
            return Ok(Some(StoredMsg { seq, subject, headers, payload: msg.payload, time }));
        }
        match self.api(&what, &format!("STREAM.MSG.GET.{stream}"), &req).await {
            Err(e) if e.api_code() == Some(ApiErrorCode::NO_MESSAGE_FOUND) => Ok(None),
            Err(e) => Err(e),
            Ok(v) => {
                let m = &v["message"];
                let b64 = base64::engine::general_purpose::STANDARD;
                let headers = m["hdrs"]
                    .as_str()
                    .and_then(|h| b64.decode(h).ok())
                    .map(|b| parse_header_block(&b))
                    .unwrap_or_default();
                let payload =
                    m["data"].as_str().and_then(|d| b64.decode(d).ok()).unwrap_or_default();
                Ok(Some(StoredMsg {
                    seq: m["seq"].as_u64().unwrap_or(0),
                    subject: m["subject"].as_str().unwrap_or_default().to_string(),
                    headers,
                    payload: Bytes::from(payload),
                    time: m["time"].as_str().map(String::from),
                }))
            }
        }
    }
}

/// How long a leader may go without hearing from a quorum of its replicas
/// before its answers are taken as stale (see [`stale_leader`]).
const STALE_LEADER: Duration = Duration::from_secs(5);

/// Whether an INFO answer may come from a stale replica: from a member of a
/// replicated stream's group that knows no leader, or from a leader that has
/// not heard from a quorum of its replicas for [`STALE_LEADER`].
/// - A member that knows no leader answers stream info from its own replica
///   (nats-server jetstream_api.go `jsStreamInfoRequest`: "only the stream
///   leader should answer" unless `isGroupLeaderless`): a node back from a
///   partition does until it hears from the leader. Seen right after a heal:
///   stream info saying A ended at 830 of 3,937 messages (verify then
///   reported 2,786 "extra"); the first answer wins.
/// - A leader cut off from its replicas keeps answering as leader until it
///   notices (raft.go: the `lostQuorum` check runs every 10 s and steps down
///   after 10 s without a quorum). `active` is how long ago it last heard
///   from a replica (jetstream_cluster.go `clusterInfo`); a live leader
///   hears from each at least every heartbeat (1 s).
///
/// Such an answer is tried again (transient): the group's leader answers too.
fn stale_leader(v: &Value) -> bool {
    let Some(replicas) = v["cluster"]["replicas"].as_array() else { return false };
    if v["cluster"]["leader"].as_str().is_none_or(str::is_empty) {
        return !replicas.is_empty();
    }
    let size = replicas.len() + 1;
    let quorum = size / 2 + 1;
    let fresh =
        |r: &&Value| r["active"].as_u64().is_some_and(|ns| ns < STALE_LEADER.as_nanos() as u64);
    1 + replicas.iter().filter(fresh).count() < quorum
}

/// A failure a cluster shows while it elects a leader.
fn transient(e: &Error) -> bool {
    match e {
        Error::Timeout { .. } | Error::NoResponders { .. } => true,
        Error::Api { code, .. } => *code == ApiErrorCode::CLUSTER_NOT_AVAILABLE,
        _ => false,
    }
}

pub(crate) fn request_error(what: &str, e: async_nats::RequestError) -> Error {
    use async_nats::RequestErrorKind as K;
    match e.kind() {
        K::NoResponders => Error::NoResponders { what: what.into() },
        K::TimedOut => Error::Timeout { what: what.into() },
        _ => Error::Request { what: what.into(), reason: e.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::stream_of;

    #[test]
    fn a_leader_that_heard_from_no_quorum_answers_stale() {
        use serde_json::json;
        let info = |actives: &[u64]| {
            let replicas: Vec<_> = actives
                .iter()
                .map(|a| json!({"name": "n", "current": true, "active": a}))
                .collect();
            json!({"cluster": {"leader": "n0", "replicas": replicas}})
        };
        let (ms, s) = (1_000_000u64, 1_000_000_000u64);
        assert!(!super::stale_leader(&info(&[20 * ms, 300 * ms])), "live R3");
        assert!(!super::stale_leader(&info(&[20 * ms, 60 * s])), "R3, one replica down");
        assert!(super::stale_leader(&info(&[7 * s, 8 * s])), "R3 leader cut off");
        assert!(super::stale_leader(&info(&[9 * s, 7 * s, 20 * ms, 8 * s])), "R5, 1 of 4 heard");
        assert!(!super::stale_leader(&info(&[9 * s, 7 * s, 20 * ms, 8 * ms])), "R5, 2 of 4");
        assert!(!super::stale_leader(&json!({"config": {}})), "not clustered");
        assert!(!super::stale_leader(&info(&[])), "R1");
        let leaderless = json!({"cluster": {"replicas": [{"name": "n1", "active": 0}]}});
        assert!(super::stale_leader(&leaderless), "a member that knows no leader");
    }

    #[test]
    fn requests_are_routed_by_the_stream_they_name() {
        for (subject, stream) in [
            ("STREAM.INFO.A", Some("A")),
            ("STREAM.UPDATE.A", Some("A")),
            ("STREAM.MSG.GET.A", Some("A")),
            ("STREAM.PURGE.A", Some("A")),
            ("CONSUMER.INFO.A.c", Some("A")),
            ("CONSUMER.CREATE.A.c", Some("A")),
            ("CONSUMER.PAUSE.A.c", Some("A")),
            ("CONSUMER.NAMES.A", Some("A")),
            ("CONSUMER.DURABLE.CREATE.A.c", Some("A")),
            ("CONSUMER.MSG.NEXT.A.c", Some("A")),
            ("DIRECT.GET.A", Some("A")),
            ("INFO", None),
            ("STREAM.NAMES", None),
            ("STREAM.LIST", None),
        ] {
            assert_eq!(stream_of(subject), stream, "{subject}");
        }
    }
}
