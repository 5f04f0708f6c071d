//! The demo is the README's first command: it must work and prove itself.

use crate::common::cli;

#[test]
fn demo_moves_a_live_workload_with_nothing_lost_or_duplicated() {
    let dir = crate::common::TempDir::new("demo-test");
    let report = dir.0.join("report.html");
    let out = cli(&[
        "demo",
        "--json",
        "--rate",
        "400",
        "--duration",
        "3",
        "--workers",
        "3",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let summary: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["kind"], "demo");
    assert_eq!(summary["lost"], 0, "{summary:#}");
    assert_eq!(summary["duplicated"], 0, "{summary:#}");
    assert_eq!(summary["verified"], true);
    assert_eq!(summary["verify"]["holds"], true, "{summary:#}");
    assert!(summary["verify"]["summary"]["checked"].as_u64().unwrap() > 0, "{summary:#}");
    assert!(summary["published"].as_u64().unwrap() > 500, "{summary:#}");
    assert_eq!(summary["steps"].as_array().unwrap().len(), 7);
    assert!(std::fs::metadata(&report).unwrap().len() > 1000);
}

/// `demo --mode fence`: the workload's workers follow the application
/// protocol; the same exact verification, and the handoff's gap reported.
#[test]
fn demo_in_fence_mode_moves_the_workload_exactly() {
    let out = cli(&[
        "demo",
        "--json",
        "--mode",
        "fence",
        "--rate",
        "400",
        "--duration",
        "3",
        "--workers",
        "3",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let summary: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["mode"], "fence", "{summary:#}");
    assert_eq!((summary["lost"].as_u64(), summary["duplicated"].as_u64()), (Some(0), Some(0)));
    assert_eq!(summary["verified"], true, "{summary:#}");
    assert_eq!(summary["verify"]["holds"], true, "{summary:#}");
    assert!(summary["handoff_gap_ms"].as_f64().is_some(), "{summary:#}");
    assert_eq!(summary["consumers"][0]["phase"], "retired", "{summary:#}");
}

/// `demo --strategy dual-write`: the workload's publisher follows the
/// publisher record (both streams, then B only) and its workers the
/// idempotency guard; nothing lost or twice by the workload's records, no
/// publish error, and verify (by msg-id) holds.
#[test]
fn demo_with_dual_write_moves_the_workload_exactly() {
    let out = cli(&[
        "demo",
        "--json",
        "--strategy",
        "dual-write",
        "--rate",
        "400",
        "--duration",
        "3",
        "--workers",
        "3",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let summary: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["strategy"], "dual-write", "{summary:#}");
    assert_eq!((summary["lost"].as_u64(), summary["duplicated"].as_u64()), (Some(0), Some(0)));
    assert_eq!(summary["publish_failures"], 0, "{summary:#}");
    assert_eq!(summary["verified"], true, "{summary:#}");
    let v = &summary["verify"];
    assert_eq!(v["holds"], true, "{summary:#}");
    assert!(v["dual_write"]["a_after_point"].as_u64().unwrap() > 0, "{summary:#}");
    assert_eq!(v["dual_write"]["missing_in_b"], 0, "{summary:#}");
    assert_eq!(summary["consumers"][0]["phase"], "retired", "{summary:#}");
}

/// `demo --strategy rolling` (the spelling of `--mode rolling`):
/// the workload's instances are replaced one by one by instances of the next
/// version once the fence is published; the run only ends once none is
/// bound to the old consumer, and the same exact verification holds.
#[test]
fn demo_in_rolling_mode_replaces_the_instances_exactly() {
    let out = cli(&[
        "demo",
        "--json",
        "--strategy",
        "rolling",
        "--rate",
        "400",
        "--duration",
        "3",
        "--workers",
        "3",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let summary: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["mode"], "rolling", "{summary:#}");
    assert_eq!((summary["lost"].as_u64(), summary["duplicated"].as_u64()), (Some(0), Some(0)));
    assert_eq!(summary["verified"], true, "{summary:#}");
    assert_eq!(summary["verify"]["holds"], true, "{summary:#}");
    assert_eq!(summary["consumers"][0]["phase"], "retired", "{summary:#}");
}

#[test]
fn demo_refuses_unbounded_or_empty_workloads() {
    let out = cli(&["demo", "--duration", "1h"]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = cli(&["demo", "--rate", "0"]);
    assert_eq!(out.code, 2, "{out:?}");
}
