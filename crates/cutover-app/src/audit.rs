//! End-to-end audit: one small record per processed message, one call.
//!
//! ```ignore
//! let worker = Worker { consumer: "worker".into(), instance: hostname, version: env!("CARGO_PKG_VERSION").into() };
//! // in the handler, after processing and before acknowledging:
//! cutover_app::audit::record_message(&client, "audit.orders", &msg, &worker).await?;
//! msg.double_ack().await?;
//! ```
//!
//! The record ([`AuditRecord`], format in docs/audit.md) names the message by where
//! it was first stored, so the same message processed once from the old stream and
//! once from the new one shows up as processed twice; `nats-cutover verify --audit`
//! reads the records back and reports every message processed never or twice.
//! Publish the records into a stream of their own (limits retention, file storage):
//! a record that is not stored cannot be counted.

use async_nats::jetstream;
use async_nats::HeaderMap;
use bytes::Bytes;
pub use cutover_core::audit::{AuditRecord, Via, Worker};
use cutover_core::source_header;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum AuditError {
    #[error("cannot audit a message that did not come from a JetStream consumer (no reply subject with its stream and sequence): {0}")]
    NotJetStream(String),
    #[error("cannot publish the audit record of {stream} {seq} to {subject}: {reason}; is a stream capturing {subject}? (do not acknowledge the message: it is redelivered and audited again)")]
    Publish { stream: String, seq: u64, subject: String, reason: String },
}

/// The audit record of a message delivered to `worker`.
pub fn record_of(msg: &jetstream::Message, worker: &Worker) -> Result<AuditRecord, AuditError> {
    let info = msg.info().map_err(|e| AuditError::NotJetStream(e.to_string()))?;
    let h = msg.headers.as_ref();
    let source = h.and_then(|h| h.get(source_header::HEADER)).map(|v| v.as_str());
    let msg_id = h.and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID)).map(|v| v.as_str());
    let via = Via {
        stream: info.stream.to_string(),
        seq: info.stream_sequence,
        delivered: info.delivered.max(1) as u64,
    };
    Ok(AuditRecord::new(via, source, msg_id, worker))
}

/// Publishes `rec` to `subject` and waits until JetStream stored it. Published
/// with a `Nats-Msg-Id` of its delivery, so a retried record is stored once.
pub async fn record(
    client: &async_nats::Client,
    subject: &str,
    rec: &AuditRecord,
) -> Result<(), AuditError> {
    let err = |reason: String| AuditError::Publish {
        stream: rec.stream.clone(),
        seq: rec.seq,
        subject: subject.to_string(),
        reason,
    };
    let payload = Bytes::from(serde_json::to_vec(rec).expect("audit record serializes"));
    let mut h = HeaderMap::new();
    h.insert("Nats-Msg-Id", rec.publish_id().as_str());
    let ack = jetstream::new(client.clone())
        .publish_with_headers(subject.to_string(), h, payload)
        .await
        .map_err(|e| err(e.to_string()))?;
    ack.await.map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// The one call a handler makes: the record of `msg`, published to `subject`.
pub async fn record_message(
    client: &async_nats::Client,
    subject: &str,
    msg: &jetstream::Message,
    worker: &Worker,
) -> Result<(), AuditError> {
    record(client, subject, &record_of(msg, worker)?).await
}
