//! Issue 25: applications written on the clients people use, with nothing
//! of ours, through a change: nats.js (`tests/apps/js/`, npm `@nats-io/*`)
//! and nats-py (`tests/apps/`).

use crate::common::*;
use crate::pyapps::{lines, App};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// A bucket's KV watchers through `kv cfg --set storage=memory` under a
/// live nats-py writer: nats.js 3.4's `kv.watch()` (every key, and updates
/// only) and nats-py's. The change deletes the bucket's stream, and with it
/// their ordered push consumers, telling their clients nothing: nats.js's
/// was silent 82-85 s after the change (it checks heartbeats every 30 s and
/// resets after two missed), nats-py's 15 s. Hop 2 creates them again (see
/// engine/steps/watchers.rs) and each client resets onto the bucket from its
/// own position at once: every watcher holds every write acknowledged
/// before the run ended within 8 s of its end (the goal is 5 s), and sees
/// each write once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_watchers_in_nats_js_and_nats_py_are_whole_again_right_after_a_bucket_change() {
    let e = env().await;
    crate::buckets::bucket_stream(&e, true).await;
    let dir = TempDir::new("kv-watchers");
    let f = |n: &str| dir.0.join(n).to_str().unwrap().to_string();
    let (wf, until) = (f("writer.jsonl"), f("stop"));
    let url = e.server.url();
    let common = ["--server", url, "--bucket", "cfg"];
    let watchers = [
        ("nats.js", f("js.jsonl")),
        ("nats.js updates", f("jsu.jsonl")),
        ("nats-py", f("py.jsonl")),
    ];
    let apps = [
        App::node("kv_watcher.mjs", &[&common[..], &["--out", &watchers[0].1]].concat()),
        App::node(
            "kv_watcher.mjs",
            &[&common[..], &["--updates", "--out", &watchers[1].1]].concat(),
        ),
        App::start("kv_app.py", &[&["watcher"], &common[..], &["--out", &watchers[2].1]].concat()),
    ];
    let writer_args = ["--out", &wf, "--keys", "50", "--rate", "100", "--until", &until];
    let writer = App::start("kv_app.py", &[&["writer"], &common[..], &writer_args[..]].concat());
    let written = || -> Vec<Value> {
        lines(Path::new(&wf))
            .into_iter()
            .filter(|l| l.get("rev").is_some() && l.get("i").is_some())
            .collect()
    };
    wait_until("the writer writes", Duration::from_secs(30), || async { written().len() >= 100 })
        .await;
    let out = e.cli(&["kv", "cfg", "--set", "storage=memory", "--yes"]);
    let ended = now_s();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("ordered consumer(s) created again on KV_cfg"), "{out:?}");
    let before_end = written().iter().filter_map(|l| l["rev"].as_u64()).max().unwrap();
    let seen = |file: &str| lines(Path::new(file)).iter().filter_map(|l| l["rev"].as_u64()).max();
    for (who, file) in &watchers {
        wait_until(
            &format!("the {who} watcher is whole again"),
            Duration::from_secs(8),
            || async { seen(file) >= Some(before_end) },
        )
        .await;
        eprintln!("{who}: whole again {:.2} s after the run ended", now_s() - ended);
    }
    std::fs::write(&until, "").unwrap();
    assert!({ writer }.0.wait().unwrap().success());
    let writes = written();
    let errors: Vec<&Value> = writes.iter().filter(|l| l.get("error").is_some()).collect();
    assert!(errors.is_empty(), "writes failed: {errors:?}");
    let revs: Vec<u64> = writes.iter().filter_map(|l| l["rev"].as_u64()).collect();
    let last = *revs.iter().max().unwrap();
    for (who, file) in &watchers {
        wait_until(
            &format!("the {who} watcher sees the last write"),
            Duration::from_secs(8),
            || async { seen(file) >= Some(last) },
        )
        .await;
    }
    for app in apps {
        app.stop();
    }
    for (who, file) in &watchers {
        let got: Vec<u64> =
            lines(Path::new(file)).iter().filter_map(|l| l["rev"].as_u64()).collect();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{who}: each revision once, in order");
        let missed: Vec<&u64> = revs.iter().filter(|r| !got.contains(r)).collect();
        assert!(missed.is_empty(), "{who} missed revisions {missed:?}");
        eprintln!("{who}: {} revisions, 0 missed, 0 repeated", got.len());
    }
}

/// Issue 25 item 5: route followers written from docs/protocol.md in
/// nats.js (`worker.mjs --follow-route`, a `fetch()` loop) and nats.go
/// (`natsapp worker --follow-route`, nats.go 1.22's legacy API), nothing of
/// ours, sharing one durable under a nats-py publisher through an in-place
/// change (they follow the route to the temporary stream and back home when
/// hop 2 deletes it) and then a move to ORDERS_V2: every acknowledged
/// publish processed once, by both clients, and the last ones from
/// ORDERS_V2.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn route_followers_in_nats_js_and_nats_go_follow_an_in_place_change_and_a_move() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let dir = TempDir::new("route-followers");
    let (js_out, go_out, published) =
        (dir.0.join("js.jsonl"), dir.0.join("go.jsonl"), dir.0.join("pub.jsonl"));
    let url = e.server.url();
    let bind = ["--server", url, "--stream", "ORDERS", "--consumer", "worker", "--mode", "pull"];
    let js_args = ["--api", "fetch", "--expires", "1000", "--follow-route"];
    let js_app = App::node(
        "worker.mjs",
        &[&bind[..], &js_args[..], &["--out", js_out.to_str().unwrap()]].concat(),
    );
    let go_args = ["worker", "--follow-route", "--out", go_out.to_str().unwrap()];
    let go_app = App::go(&[&go_args[..1], &bind[..], &go_args[1..]].concat());
    let files = [js_out.clone(), go_out.clone()];
    let records = || -> Vec<Value> {
        files.iter().flat_map(|f| lines(f)).filter(|l| l["id"].is_string()).collect()
    };
    let mut publisher = App::publisher(url, 6000, 300, &published);
    wait_until("both process", Duration::from_secs(30), || async { records().len() >= 300 }).await;
    let in_place = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = e.cli(&in_place);
    assert_eq!(out.code, 0, "{out:?}");
    let moved = ["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker", "--yes"];
    let out = e.cli(&moved);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(publisher.0.wait().unwrap().success());
    let acked: Vec<String> = lines(&published)
        .iter()
        .filter(|l| l.get("failed").is_none())
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(acked.len(), 6000);
    wait_until("every message processed", Duration::from_secs(60), || async {
        records().len() >= acked.len()
    })
    .await;
    js_app.stop();
    go_app.stop();
    let recs = records();
    let mut n = std::collections::HashMap::<&str, u32>::new();
    for r in &recs {
        *n.entry(r["id"].as_str().unwrap()).or_default() += 1;
    }
    let twice: Vec<_> = n.iter().filter(|(_, c)| **c > 1).collect();
    assert!(twice.is_empty(), "processed twice: {twice:?}");
    let lost: Vec<_> = acked.iter().filter(|id| !n.contains_key(id.as_str())).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    let from = |f: &Path, stream: &str| {
        lines(f).iter().filter(|l| l["id"].is_string() && l["stream"] == stream).count()
    };
    for (who, f) in [("nats.js", &js_out), ("nats.go", &go_out)] {
        let (home, via, v2) = (from(f, "ORDERS"), from(f, "ORDERS_CUTOVER"), from(f, "ORDERS_V2"));
        eprintln!("{who}: {home} from ORDERS, {via} from ORDERS_CUTOVER, {v2} from ORDERS_V2");
        assert!(home > 0 && v2 > 0, "{who} followed the route to ORDERS_V2: {home} {v2}");
    }
    let t = |r: &Value| r["t_ms"].as_f64().unwrap_or(0.0);
    let last = recs.iter().max_by(|a, b| t(a).total_cmp(&t(b))).unwrap();
    assert_eq!(last["stream"], "ORDERS_V2", "{last}");
}
