//! `apply --from-server/--from-context`: a whole account or domain (every
//! stream, KV bucket and object store of the source side, or those the
//! files describe, narrowed by --only/--except) moved to the target system
//! under its names. Each asset is one same-name move
//! (`engine::run_in_place` with a source side: hop 1 across to
//! `<STREAM>_CUTOVER`, hop 2 back to the name on the target side), judged,
//! journaled and run as the fleet's live changes are (`super::carry_out`).

use super::{Action, Item};
use crate::cli::ApplyArgs;
use crate::error::Result;
use cutover_core::desired::{self, Asset};
use cutover_nats::engine::{self, InPlaceRequest};
use cutover_nats::{ErrorKind, Js};
use serde_json::{json, Map, Value};

/// Both sides of the fleet's moves.
#[derive(Clone)]
pub struct Sides {
    pub target: Js,
    pub source: Js,
}

impl Sides {
    /// The client for the move of `stream`: its requests about `stream` to
    /// the source side, the others to the target side ([`Js::across`]).
    pub fn for_stream(&self, stream: &str) -> Js {
        self.target.clone().across(self.source.clone(), stream)
    }
}

/// The source side's streams as assets (their own configuration desired:
/// a move as they are), but the tool's own and its temporary streams.
pub async fn source_assets(src: &Js) -> Result<Vec<Asset>> {
    let mut out = vec![];
    for name in super::stream_names(src).await? {
        if super::tools_own(&name) || name.ends_with("_CUTOVER") {
            continue;
        }
        let Some((raw, _)) = src.stream_info_opt(&name).await? else { continue };
        let origin = "the source side".to_string();
        let a = desired::from_document(&json!({ "config": raw["config"] }), &origin)
            .map_err(|e| cutover_nats::Error::Input(e.to_string()))?;
        out.push(a);
    }
    Ok(out)
}

/// The request of the move of `asset`.
pub fn request(
    asset: &Asset,
    settings: Option<Map<String, Value>>,
    a: &ApplyArgs,
) -> InPlaceRequest {
    InPlaceRequest {
        repoint_publishers: a.repoint_publishers,
        ..super::request(asset, settings, a.retry_horizon)
    }
}

/// What the move of `asset` needs: `Move` (resumed if one is under way),
/// `Unchanged` once moved (both hops journaled done on the target side),
/// `Create` on the target side for an asset the files describe and neither
/// side has, `Refused` with the reason.
pub async fn judge(sides: &Sides, asset: &Asset, a: &ApplyArgs) -> Result<(Action, bool)> {
    let js = sides.for_stream(&asset.stream);
    let probe = request(asset, None, a);
    if engine::in_place_under_way(&js, &probe).await? {
        let action = Action::Move { changes: vec![], outline: None, settings: None };
        return Ok((action, true));
    }
    let source = sides.source.stream_info_opt(&asset.stream).await?;
    let target = sides.target.stream_info_opt(&asset.stream).await?;
    if target.is_some() {
        if engine::in_place_done(&js, &probe).await? {
            return Ok((Action::Unchanged, false));
        }
        return Ok((
            Action::Refused {
                changes: vec![],
                reason: format!(
                    "the target side has a stream {} already, not moved here by nats-cutover",
                    asset.stream
                ),
                fix: format!(
                    "delete or rename {} on the target side, or leave it out (--except {})",
                    asset.stream, asset.stream
                ),
            },
            false,
        ));
    }
    let Some((raw, _)) = source else {
        return Ok((Action::Create(asset.create_config()), false));
    };
    let changes = desired::diff(&raw["config"], &asset.settings);
    let settings = (!changes.is_empty()).then(|| desired::settings_of(&changes));
    let req = request(asset, settings.clone(), a);
    let fix = format!("`nats-cutover --from-server ... plan --from {s} --to {s}` shows the whole plan of its move: fix what it names, or leave it out (--except {s})", s = asset.stream);
    Ok((
        match engine::outline_in_place(&js, &req).await {
            Ok(o) if o.hop1.safe => Action::Move { changes, outline: Some(Box::new(o)), settings },
            Ok(o) => Action::Refused {
                changes,
                reason: format!("its move is unsafe: {}", o.hop1.unsafe_reasons()),
                fix,
            },
            Err(e) if e.kind() == ErrorKind::Incompatible => Action::Refused {
                changes,
                reason: format!("its move is not possible here: {e}"),
                fix,
            },
            Err(e) => return Err(e.into()),
        },
        false,
    ))
}

/// The move of one item, run (or resumed) to its end.
pub async fn carry(
    sides: &Sides,
    item: &Item,
    a: &ApplyArgs,
    opts: &cutover_nats::engine::RunOptions,
    sink: &dyn cutover_nats::engine::Sink,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> cutover_nats::Result<()> {
    let Action::Move { settings, .. } = &item.action else { unreachable!() };
    let req = request(&item.asset, settings.clone(), a);
    engine::run_in_place(&sides.for_stream(&item.asset.stream), &req, opts, sink, shutdown).await?;
    Ok(())
}
