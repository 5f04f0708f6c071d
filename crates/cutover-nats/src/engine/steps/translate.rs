//! A checkpoint F of A translated into B's sequence space: the first B
//! sequence after origin sequence F, once B has sourced F
//! (`cutover_core::checkpoint::TranslateSearch` over message gets).

use super::catch_up::Stall;
use crate::api::{Js, Lookup, Via};
use crate::engine::ctx::Ctx;
use crate::engine::progress::source_progress;
use crate::error::{Error, Result};
use cutover_core::checkpoint::{self, TranslateSearch};
use std::time::{Duration, Instant};

/// The first B sequence after origin sequence F, once B has sourced F.
pub(in crate::engine) async fn translate(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    f: u64,
) -> Result<(u64, u32)> {
    let mut stall = Stall::new(ctx.opts.stall_timeout);
    let mut checked = Instant::now();
    loop {
        if let Some(r) = translate_once(ctx.js, from, to, f).await? {
            return Ok(r);
        }
        // The stall check costs its own reads: a few a second are plenty for
        // a limit of seconds, not one per poll.
        if checked.elapsed() > Duration::from_millis(250) {
            let p = source_progress(ctx.js, to, from).await?;
            stall.check_why(ctx.js, &p, to, from).await?;
            checked = Instant::now();
        }
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
}

/// One attempt at translating checkpoint `F` of `from` into `to`'s sequence
/// space: `None` while `to` has not yet sourced everything of `from` up to F,
/// else the start sequence and the number of gets the search used.
pub async fn translate_once(js: &Js, from: &str, to: &str, f: u64) -> Result<Option<(u64, u32)>> {
    let (_, a) = js.stream_info(from).await?;
    let (_, b) = js.stream_info(to).await?;
    if b.config.mirror.as_ref().is_some_and(|m| m.name == from) {
        // A mirror has A's sequences: the start is F + 1 once it holds F (or
        // A has nothing between what the mirror holds and F).
        let reach = Some(b.state.last_seq);
        let next = match checkpoint::reached(reach, f) {
            true => None,
            false => js
                .next_matching(from, b.state.last_seq + 1, ">", a.config.exact_direct_gets())
                .await?
                .map(|m| m.seq),
        };
        let held = checkpoint::holds_through(reach, next, f);
        return Ok(held.then_some((f + 1, 0)));
    }
    let b_source = b.config.sources.iter().find(|s| s.name == from).cloned();
    let direct = b.config.exact_direct_gets();
    let last = if b.state.messages == 0 { None } else { js.last_msg(to, direct).await? };
    let last_origin = match &last {
        Some(m) => Some(m.origin_seq(from)?.ok_or_else(|| Error::Unsafe(format!("message {} of {to} did not come from {from}: translation needs every message of {to} to be sourced from {from}", m.seq)))?),
        None => None,
    };
    // B must hold F (or everything A has up to F) before the start is final.
    // Or nothing in A that B sources between what B has and F: B holds all
    // it needs (messages B's source filters out do not count).
    let next = match checkpoint::reached(last_origin, f) {
        true => None,
        false => js.next_sourced(&a, b_source.as_ref(), last_origin.unwrap_or(0)).await?,
    };
    let sourced_enough = checkpoint::holds_through(last_origin, next, f);
    if !sourced_enough {
        return Ok(None);
    }
    // The search's upper end is the last message we read, not the stream
    // info's last_seq: B keeps sourcing between the two reads, and pairing a
    // stale last_seq with a newer message's origin would place the start too
    // early (every message up to the stale end would look <= F).
    let b_last = last.as_ref().map(|m| m.seq).unwrap_or(b.state.last_seq);
    let gets_before = js.gets();
    let mut s = TranslateSearch::new(f, b.state.first_seq, b_last, last_origin);
    while let Some(p) = s.next_probe() {
        let m = js.get_msg(to, p, Lookup::AtOrAfter, Via::direct_if(direct)).await?;
        let probe = match m {
            Some(m) if m.seq <= b_last => {
                let o = m.origin_seq(from)?.ok_or_else(|| {
                    Error::Unsafe(format!("message {} of {to} did not come from {from}", m.seq))
                })?;
                Some((m.seq, o))
            }
            _ => None,
        };
        s.observe(probe);
    }
    let start = s.result().expect("search finished");
    let gets = (js.gets() - gets_before) as u32;
    // If B started sourcing mid-stream, A messages after F but before B's
    // first origin would be skipped: refuse instead.
    if start == b.state.first_seq.max(1) && b.state.messages > 0 {
        if let Some(first) =
            js.get_msg(to, b.state.first_seq, Lookup::AtOrAfter, Via::direct_if(direct)).await?
        {
            if let Some(o) = first.origin_seq(from)? {
                if o > f + 1 {
                    if let Some(seq) = js.next_sourced(&a, b_source.as_ref(), f).await? {
                        if seq < o {
                            return Err(Error::Unsafe(format!("{to} does not hold {from}'s messages from {seq} on (its first is origin {o}); the consumer's checkpoint is {f}: source {from} from the start")));
                        }
                    }
                }
            }
        }
    }
    Ok(Some((start, gets)))
}
