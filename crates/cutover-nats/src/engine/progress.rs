//! How far B has sourced A, measured by sequences.
//!
//! A source's `lag` in stream info is only refreshed when messages flow, so it
//! freezes at its last value when A goes quiet: we compare A's last sequence with
//! the origin sequence in B's newest `Nats-Stream-Source` header instead.

use crate::api::Js;
use crate::error::Result;
use serde::Serialize;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SourceProgress {
    pub origin: String,
    pub origin_last_seq: u64,
    /// The origin sequence of B's newest message from `origin`, if B's newest
    /// message came from it.
    pub sourced_origin_seq: Option<u64>,
    pub b_last_seq: u64,
    /// No message of `origin` exists after what B sourced.
    pub caught_up: bool,
    /// What the server's `lag` field says, for comparison only.
    pub reported_lag: Option<u64>,
}

use cutover_core::plan::HANDOVER_KEY;

pub async fn source_progress(js: &Js, b: &str, origin: &str) -> Result<SourceProgress> {
    let (_, b_info) = js.stream_info(b).await?;
    let (_, a_info) = js.stream_info(origin).await?;
    // A mirror, or a stream handed over from mirroring to sourcing A
    // (steps::handover): A's sequences, read alike.
    let handed_over = b_info.config.metadata.as_ref().is_some_and(|m| m.contains_key(HANDOVER_KEY))
        && b_info.config.sources.iter().any(|s| s.name == origin);
    if handed_over || b_info.config.mirror.as_ref().is_some_and(|m| m.name == origin) {
        return mirror_progress(js, &b_info, &a_info).await;
    }
    let reported_lag = b_info.sources.iter().find(|s| s.name == origin).map(|s| s.lag);
    let a_last = a_info.state.last_seq;
    let sourced = if b_info.state.messages == 0 {
        None
    } else {
        match js.last_msg(b, b_info.config.exact_direct_gets()).await? {
            Some(m) => m.origin_seq(origin)?,
            None => None,
        }
    };
    // Caught up when A holds no message after the newest one B sourced. Comparing
    // with A's last sequence alone would wait forever if A's tail was deleted
    // before B sourced it, or if B's source filters A's tail out, so a shortfall
    // is confirmed with one get on A for the next message B's source selects.
    let caught_up = match sourced {
        Some(s) if s >= a_last => true,
        _ if a_info.state.messages == 0 => true,
        s => js
            .next_sourced(
                &a_info,
                b_info.config.sources.iter().find(|x| x.name == origin),
                s.unwrap_or(0),
            )
            .await?
            .is_none(),
    };
    Ok(SourceProgress {
        origin: origin.into(),
        origin_last_seq: a_last,
        sourced_origin_seq: sourced,
        b_last_seq: b_info.state.last_seq,
        caught_up,
        reported_lag,
    })
}

/// A mirror keeps A's sequences: it holds everything of A up to its own last
/// sequence, and is caught up when A has no message after that.
async fn mirror_progress(
    js: &Js,
    b_info: &cutover_core::model::StreamInfo,
    a_info: &cutover_core::model::StreamInfo,
) -> Result<SourceProgress> {
    let (b_last, a_last) = (b_info.state.last_seq, a_info.state.last_seq);
    let caught_up = b_last >= a_last
        || a_info.state.messages == 0
        || js
            .next_matching(&a_info.config.name, b_last + 1, ">", a_info.config.exact_direct_gets())
            .await?
            .is_none();
    Ok(SourceProgress {
        origin: a_info.config.name.clone(),
        origin_last_seq: a_last,
        sourced_origin_seq: (b_last > 0).then_some(b_last),
        b_last_seq: b_last,
        caught_up,
        reported_lag: b_info.mirror.as_ref().map(|m| m.lag),
    })
}
