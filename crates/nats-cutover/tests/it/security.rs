//! Security (issue 13, item 6): every way the nats CLI authenticates carries a
//! whole migration (plan, run with a report, verify, status, watch), and no
//! secret appears in what the tool leaves: its output, its logs, its JSON
//! events, the journal, route and lease records in KV, the HTML report.
//! A user without one permission a command needs gets an error naming it.

use crate::common::*;
use cutover_nats::api::{Lookup, Via};
use cutover_testkit::auth::{operator_mode, tls_files};
use cutover_testkit::{NatsServer, ServerOptions};
use std::process::Command;

/// A server asking for one kind of credentials, the CLI's flags for them,
/// the secrets that must not leak, and the test's own (admin) client.
struct Secured {
    e: Env,
    args: Vec<String>,
    secrets: Vec<String>,
    /// Holds the credential files.
    _dir: TempDir,
}

async fn secured(
    tag: &str,
    config: String,
    admin: async_nats::ConnectOptions,
    args: Vec<String>,
    secrets: Vec<String>,
    dir: TempDir,
) -> Secured {
    let server =
        NatsServer::start_with(ServerOptions { config: Some(config), ..Default::default() })
            .unwrap_or_else(|e| panic!("{tag}: {e}"));
    let client = admin.connect(server.url()).await.unwrap_or_else(|e| panic!("{tag}: {e}"));
    let e = Env {
        js: cutover_nats::Js::new(client.clone(), std::time::Duration::from_secs(5)),
        ctx: async_nats::jetstream::new(client),
        server,
    };
    let args = [s(&["--server", e.server.url()]), args].concat();
    Secured { e, args, secrets, _dir: dir }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn path(p: &std::path::Path) -> String {
    p.to_str().unwrap().to_string()
}

/// The six ways: user/password in the URL, a token, an nkey seed file, a
/// creds file (operator mode), a nats context with the URL and a creds file,
/// mutual TLS with user/password flags.
async fn each_way() -> Vec<(&'static str, Secured)> {
    let mut out = vec![];
    let pw = "pw-Q7xK2mZ9";
    let conf = format!("authorization {{ users: [ {{ user: op, password: \"{pw}\" }} ] }}\n");
    let admin = async_nats::ConnectOptions::with_user_and_password("op".into(), pw.into());
    let mut sec = secured("user", conf, admin, vec![], s(&[pw]), TempDir::new("sec-user")).await;
    sec.args = s(&["--server", &sec.e.server.url().replacen("://", &format!("://op:{pw}@"), 1)]);
    out.push(("user/password in the URL", sec));

    let tok = "tok-Vb81LpW3";
    let conf = format!("authorization {{ token: \"{tok}\" }}\n");
    let admin = async_nats::ConnectOptions::with_token(tok.into());
    let sec =
        secured("token", conf, admin, s(&["--token", tok]), s(&[tok]), TempDir::new("sec-tok"))
            .await;
    out.push(("--token", sec));

    let dir = TempDir::new("sec-nkey");
    let kp = nkeys::KeyPair::new_user();
    let seed = kp.seed().unwrap();
    let seed_file = dir.0.join("user.nk");
    std::fs::write(&seed_file, format!("{seed}\n")).unwrap();
    let conf = format!("authorization {{ users: [ {{ nkey: {} }} ] }}\n", kp.public_key());
    let admin = async_nats::ConnectOptions::with_nkey(seed.clone());
    let args = s(&["--nkey", &path(&seed_file)]);
    out.push(("--nkey", secured("nkey", conf, admin, args, vec![seed], dir).await));

    let dir = TempDir::new("sec-creds");
    let m = operator_mode(&dir.0.join("jwt"));
    let admin = async_nats::ConnectOptions::with_credentials_file(&m.creds).await.unwrap();
    let args = s(&["--creds", &path(&m.creds)]);
    let secrets = vec![m.user_seed.clone(), m.user_jwt.clone()];
    out.push((
        "--creds (operator mode)",
        secured("creds", m.config, admin, args, secrets, dir).await,
    ));

    out.push(context_way().await);

    let dir = TempDir::new("sec-tls");
    let t = tls_files(&dir.0.join("tls"));
    let pw = "pw-TlsM4c8R";
    let conf = format!(
        "{}authorization {{ users: [ {{ user: tlsop, password: \"{pw}\" }} ] }}\n",
        t.server_config(true)
    );
    let admin = async_nats::ConnectOptions::with_user_and_password("tlsop".into(), pw.into())
        .add_root_certificates(t.ca.clone())
        .add_client_certificate(t.client_cert.clone(), t.client_key.clone())
        .require_tls(true);
    let args = [
        ["--tlsca", &path(&t.ca)],
        ["--tlscert", &path(&t.client_cert)],
        ["--tlskey", &path(&t.client_key)],
        ["--user", "tlsop"],
        ["--password", pw],
    ]
    .concat()
    .into_iter()
    .map(String::from)
    .collect();
    // A line from the middle of the client's private key.
    let key = std::fs::read_to_string(&t.client_key).unwrap();
    let key_line = key.lines().nth(5).unwrap().to_string();
    let secrets = vec![pw.to_string(), key_line];
    out.push(("mutual TLS", secured("tls", conf, admin, args, secrets, dir).await));
    out
}

/// A nats CLI context holding the URL and a creds file (operator mode).
async fn context_way() -> (&'static str, Secured) {
    let dir = TempDir::new("sec-ctx");
    let m = operator_mode(&dir.0.join("jwt"));
    let admin = async_nats::ConnectOptions::with_credentials_file(&m.creds).await.unwrap();
    let secrets = vec![m.user_seed.clone(), m.user_jwt.clone()];
    let ctx = dir.0.join("ctx.json");
    let creds = path(&m.creds);
    let mut sec = secured("context", m.config, admin, vec![], secrets, dir).await;
    let context = serde_json::json!({"url": sec.e.server.url(), "creds": creds});
    std::fs::write(&ctx, context.to_string()).unwrap();
    sec.args = s(&["--context", &path(&ctx)]);
    ("--context (URL and creds)", sec)
}

/// The CLI with the secured server's flags first, every log (trace) on.
fn cli_as(sec: &Secured, args: &[&str]) -> Out {
    let o = Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
        .args(&sec.args)
        .args(args)
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT")
        .env("NATS_CUTOVER_LOG", "trace")
        .env("HOME", std::env::temp_dir().join("nats-cutover-test-home"))
        .output()
        .expect("run nats-cutover");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

/// Every message the KV bucket CUTOVER ever stored (journal, lease, routes),
/// deleted revisions included as far as the stream keeps them.
async fn kv_history(e: &Env) -> String {
    let (_, info) = e.js.stream_info("KV_CUTOVER").await.unwrap();
    let mut all = String::new();
    for seq in info.state.first_seq..=info.state.last_seq {
        if let Some(m) = e.js.get_msg("KV_CUTOVER", seq, Lookup::Exact, Via::Leader).await.unwrap()
        {
            all.push_str(&m.subject);
            all.push_str(&String::from_utf8_lossy(&m.payload));
            all.push('\n');
        }
    }
    all
}

/// Each way of authenticating carries plan, run (with a report and JSON
/// events), verify, status and watch; then the secrets are looked for in all
/// they wrote: none may appear.
#[tokio::test(flavor = "multi_thread")]
async fn every_auth_method_runs_a_migration_and_no_secret_leaks() {
    for (how, sec) in each_way().await {
        let e = &sec.e;
        crate::run::orders_stream(e, 30_000).await;
        e.publish("orders.eu", "m", 20).await;
        let report = sec._dir.0.join("report.html");
        let report_arg = path(&report);
        let moving = ["--from", "ORDERS", "--to", "ORDERS_V2"];
        let runs = [
            [&["--json", "plan"][..], &moving, &["--consumer", "worker"]].concat(),
            [
                &["--json", "run"][..],
                &moving,
                &["--consumer", "worker", "--yes", "--report", &report_arg],
            ]
            .concat(),
            [&["--json", "verify"][..], &moving].concat(),
            vec!["--json", "status"],
            vec!["--json", "watch", "ORDERS_V2", "--consumer", "worker", "--count", "1"],
            // A failure's message too (a stream that does not exist).
            vec!["--json", "inspect", "NOPE"],
        ];
        let mut seen = String::new();
        for args in &runs {
            let out = cli_as(&sec, args);
            let want = if args[1] == "inspect" { 2 } else { 0 };
            assert_eq!(out.code, want, "{how}: {args:?}: {out:?}");
            if args[1] == "verify" {
                assert_eq!(out.json()["holds"], true, "{how}: {out:?}");
            }
            seen.push_str(&out.stdout);
            seen.push_str(&out.stderr);
        }
        seen.push_str(&std::fs::read_to_string(&report).expect("the report was written"));
        seen.push_str(&kv_history(e).await);
        assert!(seen.contains("ORDERS.ORDERS_V2"), "{how}: the journal was read");
        for secret in &sec.secrets {
            assert!(!seen.contains(secret.as_str()), "{how}: a secret leaked: {secret}");
        }
        eprintln!("{how}: {} bytes of output, reports and records, no secret", seen.len());
    }
}

/// The permission lists of docs/permissions.md: command → (publish,
/// subscribe), with `<A>`, `<B>`, `<C>` replaced.
fn documented_permissions(a: &str, b: &str) -> Vec<(String, Vec<String>, Vec<String>)> {
    let doc = std::fs::read_to_string(cutover_testkit::repo_root().join("docs/permissions.md"))
        .expect("read docs/permissions.md");
    let mut out = vec![];
    let mut lines = doc.lines();
    while let Some(l) = lines.next() {
        let Some(cmd) = l.strip_prefix("```permissions ") else { continue };
        let (mut publish, mut subscribe) = (vec![], vec![]);
        for l in lines.by_ref().take_while(|l| !l.starts_with("```")) {
            let l = l.replace("<A>", a).replace("<B>", b).replace("<C>", "worker");
            match l.split_once(' ') {
                Some(("publish", x)) => publish.push(x.to_string()),
                Some(("subscribe", x)) => subscribe.push(x.to_string()),
                _ => assert!(l.trim().is_empty(), "docs/permissions.md: not a permission: {l}"),
            }
        }
        out.push((cmd.trim().to_string(), publish, subscribe));
    }
    out
}

/// A permission list as server configuration. An empty allow list would
/// allow everything: it allows one unused subject instead.
fn quoted(v: &[String]) -> String {
    if v.is_empty() {
        return "\"nothing.allowed\"".into();
    }
    v.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", ")
}

/// A server with an `admin` user (every permission, the test's) and these
/// users: (name, publish allowed, subscribe allowed), password = name.
async fn env_with_users(users: &[(String, Vec<String>, Vec<String>)]) -> Env {
    let users: Vec<String> = users
        .iter()
        .map(|(u, p, s)| {
            format!(
                "{{ user: {u}, password: {u}, permissions: {{ publish: {{ allow: [{}] }}, subscribe: {{ allow: [{}] }} }} }}",
                quoted(p),
                quoted(s)
            )
        })
        .collect();
    let conf = format!(
        "accounts: {{ APP: {{ jetstream: enabled, users: [ {{ user: admin, password: a }},\n{} ] }} }}\n",
        users.join(",\n")
    );
    let server =
        NatsServer::start_with(ServerOptions { config: Some(conf), ..Default::default() }).unwrap();
    let client = async_nats::ConnectOptions::with_user_and_password("admin".into(), "a".into())
        .connect(server.url())
        .await
        .unwrap();
    Env {
        js: cutover_nats::Js::new(client.clone(), std::time::Duration::from_secs(5)),
        ctx: async_nats::jetstream::new(client),
        server,
    }
}

/// `args` as `user` (password = name).
fn cli_user(e: &Env, user: &str, args: &[&str]) -> Out {
    let url = e.server.url().replacen("://", &format!("://{user}:{user}@"), 1);
    cli(&[&["--server", url.as_str()][..], args].concat())
}

/// docs/permissions.md's lists, each given to one user with nothing else,
/// carry plan, run, verify, watch and status.
#[tokio::test(flavor = "multi_thread")]
async fn the_documented_permissions_are_enough_for_each_command() {
    let perms = documented_permissions("ORDERS", "ORDERS_V2");
    let names: Vec<&str> = perms.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(names, ["plan", "run", "verify", "watch", "status"]);
    let e = env_with_users(&perms).await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "m", 20).await;
    let moving = ["--from", "ORDERS", "--to", "ORDERS_V2"];
    let runs: [(&str, Vec<&str>); 5] = [
        ("plan", [&["plan"][..], &moving, &["--consumer", "worker"]].concat()),
        ("run", [&["run"][..], &moving, &["--consumer", "worker", "--yes"]].concat()),
        ("verify", [&["--json", "verify"][..], &moving].concat()),
        (
            "watch",
            vec![
                "watch",
                "ORDERS_V2",
                "--consumer",
                "worker",
                "--count",
                "2",
                "--interval",
                "100ms",
            ],
        ),
        ("status", vec!["status"]),
    ];
    for (user, args) in runs {
        let out = cli_user(&e, user, &args);
        assert_eq!(out.code, 0, "{user} with exactly the documented permissions: {out:?}");
        if user == "verify" {
            assert_eq!(out.json()["holds"], true, "{out:?}");
        }
    }
}

/// One permission taken away from a command's documented list: (the
/// command's arguments, the user's publish and subscribe lists, what is
/// missing: op and subject).
type Without = (Vec<String>, (Vec<String>, Vec<String>), (&'static str, String));

/// Each of plan's permissions taken away in turn, its reply inbox, and one
/// each of verify, watch and status: the error names exactly that subject
/// and the fix (exit 4), and the server is unchanged. A finished migration
/// ORDERS -> ORDERS_V2 is in the journal, so plan reads it too.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_permission_is_named_with_its_fix() {
    let mut cases: Vec<Without> = vec![];
    let doc = documented_permissions("ORDERS_V2", "ORDERS_V3");
    let (_, publish, subscribe) = doc.iter().find(|p| p.0 == "plan").unwrap().clone();
    let plan = s(&move_args(&["plan"], "ORDERS_V2", "ORDERS_V3", "worker", &[]));
    for i in 0..publish.len() {
        let mut p = publish.clone();
        let missing = p.remove(i);
        cases.push((plan.clone(), (p, subscribe.clone()), ("publish", missing)));
    }
    cases.push((plan, (publish, vec![]), ("subscribe", "_INBOX.".into())));
    let doc = documented_permissions("ORDERS", "ORDERS_V2");
    for (cmd, args, missing) in [
        (
            "verify",
            s(&["verify", "--from", "ORDERS", "--to", "ORDERS_V2"]),
            "$JS.API.CONSUMER.CREATE.ORDERS_V2.>",
        ),
        (
            "verify",
            s(&["verify", "--from", "ORDERS", "--to", "ORDERS_V2"]),
            "$JS.API.STREAM.INFO.KV_CUTOVER",
        ),
        (
            "watch",
            s(&["watch", "ORDERS_V2", "--consumer", "worker", "--count", "1"]),
            "$JS.API.CONSUMER.INFO.ORDERS_V2.worker",
        ),
        ("status", s(&["status"]), "$JS.API.STREAM.MSG.GET.KV_CUTOVER"),
    ] {
        let (_, mut p, sub) = doc.iter().find(|p| p.0 == cmd).unwrap().clone();
        p.retain(|x| x != missing);
        cases.push((args, (p, sub), ("publish", missing.into())));
    }
    let users: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("u{i}"), c.1 .0.clone(), c.1 .1.clone()))
        .collect();
    let e = env_with_users(&users).await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "m", 5).await;
    let admin = e.server.url().replacen("://", "://admin:a@", 1);
    let out = cli(&run_orders(&["--server", &admin], &[]));
    assert_eq!(out.code, 0, "{out:?}");
    let before = e.snapshot().await;
    for (i, (args, _, (op, missing))) in cases.iter().enumerate() {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cli_user(&e, &format!("u{i}"), &args);
        assert_eq!(out.code, 4, "{args:?} without {op} {missing}: {out:?}");
        // The subject sent is named (under a wildcard, the one it matched).
        let sent = match missing.strip_suffix('>') {
            Some(prefix) => prefix.to_string(),
            None if missing.ends_with('.') => missing.clone(),
            None => format!("{missing}\""),
        };
        let named = format!("the server denied this user permission to {op} \"{sent}");
        assert!(out.stderr.contains(&named), "{args:?} without {op} {missing}: {out:?}");
        assert!(out.stderr.contains("docs/permissions.md"), "{out:?}");
        assert_eq!(e.snapshot().await, before, "{args:?} without {missing}: the server changed");
    }
}

/// A server on a free port with a monitoring endpoint and this JetStream
/// sync setting; its monitoring URL.
async fn env_with_sync(sync: &str) -> (Env, String) {
    let port = cutover_testkit::free_port();
    let conf = format!("http: \"127.0.0.1:{port}\"\njetstream {{ sync_interval: {sync} }}\n");
    let server = NatsServer::start_with(ServerOptions { config: Some(conf), ..Default::default() })
        .unwrap_or_else(|e| panic!("{e}"));
    let client = async_nats::connect(server.url()).await.unwrap();
    let e = Env {
        js: cutover_nats::Js::new(client.clone(), std::time::Duration::from_secs(5)),
        ctx: async_nats::jetstream::new(client),
        server,
    };
    (e, format!("http://127.0.0.1:{port}"))
}

/// plan reads the server's sync setting from its monitoring endpoint (varz;
/// an application account cannot see it) and warns when acknowledged
/// messages may be on no disk yet; without --monitor it says it was not read.
#[tokio::test(flavor = "multi_thread")]
async fn plan_warns_when_the_sync_setting_leaves_acknowledged_messages_unsynced() {
    let (e, monitor) = env_with_sync("\"10s\"").await;
    orders(&e).await;
    let plan = move_args(&["plan"], "A", "B", "C", &["--monitor", &monitor]);
    let out = e.cli(&plan);
    assert_eq!(out.code, 0, "a warning, not a refusal: {out:?}");
    assert!(out.stdout.contains("WARNING: the server syncs to disk every 10s"), "{out:?}");
    assert!(out.stdout.contains("B is R1: a crash of its machine loses them"), "{out:?}");
    let out = e.cli(&move_args(&["plan"], "A", "B", "C", &[]));
    assert!(
        out.stdout.contains("sync_interval") && out.stdout.contains("pass --monitor"),
        "{out:?}"
    );
    // Bad or unreachable --monitor: named, nothing changed.
    let before = e.snapshot().await;
    let out = e.cli(&move_args(&["plan"], "A", "B", "C", &["--monitor", "https://127.0.0.1:1"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("is not an http:// URL"), "{out:?}");
    let nothing = format!("http://127.0.0.1:{}", cutover_testkit::free_port());
    let out = e.cli(&move_args(&["plan"], "A", "B", "C", &["--monitor", &nothing]));
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("cannot read the monitoring endpoint"), "{out:?}");
    assert_eq!(e.snapshot().await, before);

    let (e, monitor) = env_with_sync("always").await;
    orders(&e).await;
    let out = e.cli(&move_args(&["--json", "plan"], "A", "B", "C", &["--monitor", &monitor]));
    assert_eq!(out.code, 0, "{out:?}");
    let findings = out.json()["findings"].as_array().unwrap().clone();
    let sync = findings.iter().find(|f| f["setting"] == "sync_interval").unwrap();
    assert_eq!(sync["from"], "always", "{sync:#}");
    assert_eq!(sync["verdict"], "ok", "{sync:#}");
}
