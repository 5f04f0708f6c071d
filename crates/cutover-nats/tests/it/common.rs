//! Shared helpers: a server per test and a client. The CLI's integration
//! tests (crates/nats-cutover/tests/it/common.rs) include this file too and
//! add the CLI and server snapshots to [`Env`].

use async_nats::jetstream;
use cutover_nats::api::Action;
use cutover_nats::Js;
use cutover_testkit::NatsServer;
use serde_json::Value;
use std::time::{Duration, Instant};

pub struct Env {
    /// Held for the test: dropping it stops the server. (Only the CLI's tests
    /// read it, for its URL.)
    #[allow(dead_code)]
    pub server: NatsServer,
    pub js: Js,
    pub ctx: jetstream::Context,
}

pub async fn env() -> Env {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.expect("connect to test server");
    // With its options, as the CLI makes it: the commit window's bridge
    // opens its answering connection from them (on by default).
    let options = cutover_nats::connect::ConnectOptions {
        server: Some(server.url().to_string()),
        ..Default::default()
    };
    let js = Js::new(client.clone(), Duration::from_secs(5)).with_options(options);
    let ctx = jetstream::new(client);
    Env { server, js, ctx }
}

impl Env {
    pub async fn stream(&self, cfg: Value) {
        self.js.stream_create(&cfg).await.expect("create stream");
    }

    pub async fn consumer(&self, stream: &str, cfg: Value) {
        let name = cfg["durable_name"].as_str().unwrap().to_string();
        self.js
            .consumer_create(stream, &name, &cfg, Action::CreateOrUpdate)
            .await
            .expect("create consumer");
    }

    /// Publishes n messages to `subject` with msg-ids `{prefix}-{i}`, awaiting acks.
    pub async fn publish(&self, subject: &str, prefix: &str, n: usize) {
        for i in 0..n {
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", format!("{prefix}-{i}").as_str());
            self.ctx
                .publish_with_headers(subject.to_string(), h, format!("{i}").into())
                .await
                .expect("publish")
                .await
                .expect("publish ack");
        }
    }
}

/// Waits for a condition with a deadline: never a bare sleep.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
