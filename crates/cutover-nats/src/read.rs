//! A stream read in order, message by message, with an ephemeral ordered
//! consumer that is deleted afterwards: what verify, dual-write's proof and
//! the split publishers' tail read through.

use crate::api::Js;
use crate::error::{Error, Result};
use async_nats::jetstream::{self, consumer::pull::OrderedConfig, consumer::DeliverPolicy};
use futures::StreamExt;
use std::time::Duration;

/// Reads `stream` from `first` to `last` in order with an ordered consumer,
/// calling `each(message, stream sequence, timestamp ms)` until it returns false.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn read<F>(
    js: &Js,
    stream: &str,
    first: u64,
    last: u64,
    filters: &[String],
    headers_only: bool,
    stall: Duration,
    mut each: F,
) -> Result<u64>
where
    F: FnMut(&jetstream::Message, u64, i64) -> bool,
{
    if last == 0 || first > last {
        return Ok(0);
    }
    let what = format!("read stream {stream}");
    let rerr =
        |e: &dyn std::fmt::Display| Error::Request { what: what.clone(), reason: e.to_string() };
    let ctx = jetstream::new(js.client_for(stream).clone());
    let s = ctx.get_stream(stream).await.map_err(|e| rerr(&e))?;
    let name = format!("nats-cutover-verify-{}", nuid());
    let consumer = s
        .create_consumer(OrderedConfig {
            name: Some(name.clone()),
            deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: first.max(1) },
            filter_subject: if filters.len() == 1 { filters[0].clone() } else { String::new() },
            filter_subjects: if filters.len() > 1 { filters.to_vec() } else { vec![] },
            headers_only,
            ..Default::default()
        })
        .await
        .map_err(|e| rerr(&e))?;
    let mut messages = consumer.messages().await.map_err(|e| rerr(&e))?;
    let mut n = 0u64;
    let result = loop {
        let next = match tokio::time::timeout(stall, messages.next()).await {
            Err(_) => {
                break Err(Error::Timeout {
                    what: format!("{what} (nothing delivered for {stall:?})"),
                })
            }
            Ok(None) => break Ok(()),
            Ok(Some(Err(e))) => break Err(rerr(&e)),
            Ok(Some(Ok(m))) => m,
        };
        let (seq, pending, ts_ms) = match next.info() {
            Ok(i) => (
                i.stream_sequence,
                i.pending,
                (i.published.unix_timestamp_nanos() / 1_000_000) as i64,
            ),
            Err(e) => break Err(rerr(&e)),
        };
        // Messages stored after verification began are not judged.
        if seq > last {
            break Ok(());
        }
        n += 1;
        if !each(&next, seq, ts_ms) || seq >= last {
            break Ok(());
        }
        if pending == 0 {
            match more_selected(js, stream, seq, last, filters).await {
                Ok(true) => {}
                done => break done.map(|_| ()),
            }
        }
    };
    drop(messages);
    // The ordered consumer is ephemeral and would expire by itself; delete it now
    // so verify leaves nothing behind.
    let _ = js.consumer_delete(stream, &name).await;
    result.map(|_| n)
}

/// Whether `stream`'s leader holds a message after `seq`, up to `last`, that
/// `filters` select (all messages when there are none): asked when a read's
/// ordered consumer has nothing pending. That consumer is R1 on any replica
/// of the stream (server jetstream_cluster.go `createGroupForConsumer`
/// shuffles the peers), and its pending count is what that replica holds:
/// one back from a partition trails the leader. Seen before this check: the
/// last message B stored was not read (one message fewer checked than were
/// published). A read ends only when the leader holds nothing more (or this
/// fails: it ends then too, deleting its consumer).
async fn more_selected(
    js: &Js,
    stream: &str,
    seq: u64,
    last: u64,
    filters: &[String],
) -> Result<bool> {
    let all = [">".to_string()];
    for f in if filters.is_empty() { &all[..] } else { filters } {
        if js.next_matching(stream, seq + 1, f, false).await?.is_some_and(|m| m.seq <= last) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A name no other reader of this process or another uses at once.
pub(crate) fn nuid() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{:016x}", h.finish())
}
