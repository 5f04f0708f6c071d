//! Credentials in the server URL, as the nats CLI takes them:
//! `nats://TOKEN@host:port` and `nats://USER:PASSWORD@host:port`. Wrong ones
//! are refused with the credentials named (never shown) and exit code 4.

use crate::common::*;
use cutover_testkit::{NatsServer, ServerOptions};
use serde_json::json;

const BAD_INPUT: i32 = 2;
const SERVER: i32 = 4;

fn server(config: &str) -> NatsServer {
    NatsServer::start_with(ServerOptions { config: Some(config.into()), ..Default::default() })
        .unwrap()
}

/// `nats://127.0.0.1:port` with `userinfo@` put in.
fn url_with(s: &NatsServer, userinfo: &str) -> String {
    s.url().replacen("://", &format!("://{userinfo}@"), 1)
}

async fn stream_a(client: async_nats::Client) {
    let js = cutover_nats::Js::new(client, std::time::Duration::from_secs(5));
    js.stream_create(&json!({"name": "A", "subjects": ["a.>"]})).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_in_the_url_authenticates() {
    let s = server("authorization { token: \"s3cret-tok\" }\n");
    stream_a(
        async_nats::ConnectOptions::with_token("s3cret-tok".into()).connect(s.url()).await.unwrap(),
    )
    .await;
    let out = cli(&["--server", &url_with(&s, "s3cret-tok"), "--json", "inspect", "A"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["stream"]["config"]["name"], "A", "{out:?}");

    let out = cli(&["--server", &url_with(&s, "wr0ng-tok"), "inspect", "A"]);
    assert_eq!(out.code, SERVER, "{out:?}");
    assert!(out.stderr.contains("authorization violation"), "{out:?}");
    assert!(out.stderr.contains("the token in the server URL"), "{out:?}");
    assert!(out.stderr.contains("nats://***@127.0.0.1"), "the URL is named, redacted: {out:?}");
    assert!(!out.stderr.contains("wr0ng-tok"), "the secret must not be shown: {out:?}");

    let out = cli(&["--server", s.url(), "inspect", "A"]);
    assert_eq!(out.code, SERVER, "{out:?}");
    assert!(out.stderr.contains("requires credentials and none were given"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn user_and_password_in_the_url_authenticate() {
    let s = server(
        "authorization { users: [ { user: op, password: \"p@ss:w0rd\" }, { user: other, password: x } ] }\n",
    );
    stream_a(
        async_nats::ConnectOptions::with_user_and_password("op".into(), "p@ss:w0rd".into())
            .connect(s.url())
            .await
            .unwrap(),
    )
    .await;
    // Percent-encoded, as a password holding '@' or ':' must be in a URL.
    let good = url_with(&s, "op:p%40ss%3Aw0rd");
    let out = cli(&["--server", &good, "inspect", "A"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("Stream A"), "{out:?}");
    // The URL's credentials win over --user/--password, as in the nats CLI.
    let out = cli(&["--server", &good, "--user", "other", "--password", "nope", "inspect", "A"]);
    assert_eq!(out.code, 0, "{out:?}");

    let out = cli(&["--server", &url_with(&s, "op:n0t-it"), "inspect", "A"]);
    assert_eq!(out.code, SERVER, "{out:?}");
    assert!(out.stderr.contains("authorization violation"), "{out:?}");
    assert!(out.stderr.contains("user \"op\" with the password in the server URL"), "{out:?}");
    assert!(out.stderr.contains("nats://op:***@127.0.0.1"), "{out:?}");
    assert!(!out.stderr.contains("n0t-it"), "the secret must not be shown: {out:?}");

    // Wrong flags name the flags.
    let out = cli(&["--server", s.url(), "--user", "op", "--password", "n0t-it", "inspect", "A"]);
    assert_eq!(out.code, SERVER, "{out:?}");
    assert!(out.stderr.contains("--user \"op\" with its --password"), "{out:?}");

    let out = cli(&["--server", &url_with(&s, ":n0t-it"), "inspect", "A"]);
    assert_eq!(out.code, BAD_INPUT, "{out:?}");
    assert!(out.stderr.contains("has a password but no user"), "{out:?}");
    assert!(!out.stderr.contains("n0t-it"), "{out:?}");
}
