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
