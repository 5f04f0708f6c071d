//! `verify` against a real server, through the library and the CLI: a correct
//! migration verifies clean (live, with the applications' audit) and a lost
//! message fails it. The other faults, each made by hand on the server after a
//! real migration, are cutover-nats' tests (crates/cutover-nats/tests/it/),
//! whose fixture this shares.

use crate::common::*;
use crate::run::{finish_after, load_cfg, orders_stream, request, until_processed};
use crate::verify_fixture::*;
use cutover_core::verify::{AKnown, Kind};
use cutover_demo::load::Load;
use cutover_nats::api::{Lookup, Via};
use cutover_nats::engine::{self, events::Collect, RunOptions};
use cutover_nats::verify::VerifyOptions;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_correct_migration_verifies_clean_and_the_cli_exits_0() {
    let e = env().await;
    migrated(&e).await;
    publish_direct(&e, 8).await;
    let r = check(&e, &VerifyOptions::default()).await;
    assert!(r.holds, "{:#?}", r.offenders);
    let w = r.consumers.iter().find(|c| c.name == "worker").unwrap();
    assert_eq!((w.a_selected, w.b_sourced, w.b_direct, w.counts.checked), (21, 21, 8, 29));
    assert_eq!(w.adjacency.last_before_start.unwrap().origin, Some(8));
    assert_eq!(w.adjacency.first_at_start.unwrap().origin, Some(9));
    // The filtered consumer: orders.1 is m-1, m-5, m-9, m-13, m-17 and two direct.
    let eu = r.consumers.iter().find(|c| c.name == "eu").unwrap();
    assert_eq!(
        (eu.a_filters.clone(), eu.a_selected, eu.b_direct),
        (vec!["orders.1".to_string()], 5, 2)
    );
    assert_eq!(r.streams.slip.as_ref().map(|s| s.direct_ids), Some(8));
    assert_eq!((r.streams.b.sourced, r.streams.b.direct), (21, 8));
    // A is not read: `worker` selects everything (A's state says what it
    // holds), `eu`'s selected messages are counted on A and match B's.
    assert_eq!(r.streams.a.read, 0);
    assert_eq!((w.a_known, eu.a_known), (AKnown::State, AKnown::Counted));
    // Nothing left behind: the ordered consumers are gone.
    assert_eq!(e.js.consumer_names("ORDERS").await.unwrap(), Vec::<String>::new());
    assert_eq!(
        e.js.consumer_names("ORDERS_V2").await.unwrap(),
        vec!["eu".to_string(), "worker".to_string()]
    );

    let out = e.cli(&["verify", "--migration", ID, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["holds"], true);
    assert_eq!(v["summary"]["checked"], 29 + 7);
    assert_eq!(v["consumers"][0]["name"], "worker");
    let out = e.cli(&move_args(&["verify"], "ORDERS", "ORDERS_V2", "eu", &[]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("HOLDS"), "{out:?}");
    let out = e.cli(&["verify", "--migration", "ORDERS.NOPE"]);
    assert_eq!(out.code, 2, "an unknown migration is bad input: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_deleted_from_b_is_lost() {
    let e = env().await;
    migrated(&e).await;
    e.js.api("delete a message", "STREAM.MSG.DELETE.ORDERS_V2", &json!({"seq": 15})).await.unwrap();
    let r = check(&e, &VerifyOptions::default()).await;
    only(&r, Kind::Lost, 1);
    let o = r.offenders.iter().find(|o| o.kind == Kind::Lost).unwrap();
    assert_eq!(
        (o.consumer.as_deref(), o.a_seq, o.msg_id.as_deref(), o.subject.as_deref()),
        (Some("worker"), Some(15), Some("m-14"), Some("orders.2"))
    );
    let out = e.cli(&["verify", "--migration", ID, "--json"]);
    assert_eq!(out.code, 6, "NOT_VERIFIED: {out:?}");
    assert_eq!(out.json()["summary"]["lost"], 1);
}

/// The live cut-over with every worker auditing what it processed: verify with
/// the audit holds; then one record is deleted and another published twice, and
/// both messages are named.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_migration_with_audit_verifies_clean_and_names_a_missing_and_a_doubled_record() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    e.stream(json!({"name": "AUDIT", "subjects": ["audit.>"]})).await;
    let load = Load::start_with_audit(
        e.js.client.clone(),
        load_cfg(1000, 3000),
        Some("audit.orders".into()),
    )
    .await;
    until_processed(&load, 400).await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    let lr = finish_after(load, 300).await;
    let opts = VerifyOptions { audit: Some("audit.>".into()), ..Default::default() };
    let r = check(&e, &opts).await;
    assert!(r.holds, "{:#?}", r.offenders);
    let w = &r.consumers[0];
    assert_eq!(w.counts.checked, lr.published);
    assert!(w.b_direct > 0, "publishers moved to B during the run");
    assert_eq!(r.audit.as_ref().unwrap().records, lr.processed_total);
    assert_eq!(w.audit_pending, Some(0));
    // No consumer filters: A's state says which messages it holds, A is not read.
    assert_eq!((r.streams.a.read, w.a_selected), (0, r.streams.a.last_seq));

    // One record lost, one doubled.
    let rec = |seq: u64| {
        let js = e.js.clone();
        async move { js.get_msg("AUDIT", seq, Lookup::Exact, Via::Leader).await.unwrap().unwrap() }
    };
    let deleted: cutover_core::audit::AuditRecord =
        serde_json::from_slice(&rec(100).await.payload).unwrap();
    let doubled = rec(200).await;
    let doubled_rec: cutover_core::audit::AuditRecord =
        serde_json::from_slice(&doubled.payload).unwrap();
    e.js.api("delete a record", "STREAM.MSG.DELETE.AUDIT", &json!({"seq": 100})).await.unwrap();
    e.ctx.publish("audit.orders", doubled.payload.clone()).await.unwrap().await.unwrap();
    let r = check(&e, &VerifyOptions { audit: Some("AUDIT".into()), ..Default::default() }).await;
    assert_eq!(
        (r.summary.audit_lost, r.summary.audit_duplicated, r.summary.audit_unknown),
        (1, 1, 0),
        "{:#?}",
        r.offenders
    );
    assert_eq!(r.summary.failures(), 2);
    let key = |a: Option<u64>, b: Option<u64>| {
        if let Some(a) = a {
            ("ORDERS".to_string(), a)
        } else {
            ("ORDERS_V2".to_string(), b.unwrap())
        }
    };
    let lost = r.offenders.iter().find(|o| o.kind == Kind::AuditLost).unwrap();
    assert_eq!(key(lost.a_seq, lost.b_seq), (deleted.stream.clone(), deleted.seq));
    assert_eq!(lost.msg_id, deleted.msg_id);
    let dup = r.offenders.iter().find(|o| o.kind == Kind::AuditDuplicated).unwrap();
    assert_eq!(key(dup.a_seq, dup.b_seq), (doubled_rec.stream.clone(), doubled_rec.seq));
    let out = e.cli(&["verify", "--migration", ID, "--audit", "AUDIT"]);
    assert_eq!(out.code, 6, "{out:?}");
    assert!(
        out.stdout.contains("audit_lost") && out.stdout.contains("audit_duplicated"),
        "{out:?}"
    );
}
