//! TLS and token connection options against a real server configured for them.

use crate::common::{cli, TempDir};
use cutover_testkit::auth::tls_files;
use cutover_testkit::{NatsServer, ServerOptions};

#[test]
fn tls_with_ca_and_token_auth() {
    let guard = TempDir::new("tls");
    let dir = guard.0.clone();
    let t = tls_files(&dir);
    let conf = format!("{}authorization {{ token: s3cret }}\n", t.server_config(false));
    let s = NatsServer::start_with(ServerOptions { config: Some(conf), ..Default::default() })
        .unwrap_or_else(|e| panic!("{e}"));
    let url = s.url().to_string();
    assert!(url.starts_with("tls://"), "{url}");
    let ca = t.ca.clone();
    // `inspect NOPE` verifying the server against the CA, with `token`.
    let with_ca = |token: &str| {
        cli(&[
            "--server",
            &url,
            "--tlsca",
            ca.to_str().unwrap(),
            "--token",
            token,
            "inspect",
            "NOPE",
        ])
    };
    // Verified against the CA, with the token: connects (the stream is missing: bad input).
    let out = with_ca("s3cret");
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("stream \"NOPE\" does not exist"), "{out:?}");
    // Without the CA the server's certificate is not trusted.
    let out = cli(&["--server", &url, "--token", "s3cret", "--timeout", "2s", "inspect", "NOPE"]);
    assert_eq!(out.code, 4, "{out:?}");
    // A wrong token is refused by the server.
    let out = with_ca("wrong");
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("authorization"), "{out:?}");
    // Half of a client certificate pair is bad input.
    let out = cli(&["--server", &url, "--tlscert", ca.to_str().unwrap(), "inspect", "NOPE"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--tlscert and --tlskey go together"), "{out:?}");
    drop(s);
}

#[test]
fn nkey_seed_file_authenticates() {
    let kp = nkeys::KeyPair::new_user();
    let conf = format!("authorization {{ users: [ {{ nkey: {} }} ] }}\n", kp.public_key());
    let s = NatsServer::start_with(ServerOptions { config: Some(conf), ..Default::default() })
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = s.dir().join("keys");
    std::fs::create_dir_all(&dir).unwrap();
    let seed = dir.join("user.nk");
    std::fs::write(&seed, format!("{}\n", kp.seed().unwrap())).unwrap();
    let out = cli(&["--server", s.url(), "--nkey", seed.to_str().unwrap(), "inspect", "NOPE"]);
    assert_eq!(out.code, 2, "authenticated, only the stream is missing: {out:?}");
    let other = dir.join("other.nk");
    std::fs::write(&other, format!("{}\n", nkeys::KeyPair::new_user().seed().unwrap())).unwrap();
    let out = cli(&["--server", s.url(), "--nkey", other.to_str().unwrap(), "inspect", "NOPE"]);
    assert_eq!(out.code, 4, "an unknown key is refused: {out:?}");
    std::fs::write(&other, "not a seed\n").unwrap();
    let out = cli(&["--server", s.url(), "--nkey", other.to_str().unwrap(), "inspect", "NOPE"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("holds no seed"), "{out:?}");
}

/// The commit window's "no responders" answers go out on a connection the
/// runner opens itself (cutover_nats::no_responders: async-nats cannot write
/// a status line): with each way the runner authenticates (a token in the
/// URL and --token over TLS verified against --tlsca, a client certificate,
/// user and password, an nkey seed, a creds file on an operator-mode
/// server), a request answered through it fails as nats.go, nats.js,
/// nats-py and async-nats read the server's own: no responders.
#[tokio::test(flavor = "multi_thread")]
async fn the_runners_answering_connection_authenticates_as_the_runner_does() {
    use cutover_nats::connect::ConnectOptions;
    use futures::StreamExt;
    let guard = TempDir::new("answers");
    let t = tls_files(&guard.0);
    let nkey = nkeys::KeyPair::new_user();
    let seed = guard.0.join("user.nk");
    std::fs::write(&seed, format!("{}\n", nkey.seed().unwrap())).unwrap();
    let jwt = cutover_testkit::auth::operator_mode(&guard.0.join("jwt"));
    let tls_token = format!("{}authorization {{ token: s3cret }}\n", t.server_config(false));
    type Options = Box<dyn Fn(&str) -> ConnectOptions>;
    let cases: Vec<(&str, String, Options)> = vec![
        ("a token over TLS", tls_token.clone(), {
            let ca = t.ca.clone();
            Box::new(move |url| ConnectOptions {
                server: Some(url.into()),
                token: Some("s3cret".into()),
                tlsca: Some(ca.clone()),
                ..Default::default()
            })
        }),
        ("a token in the URL over TLS", tls_token, {
            let ca = t.ca.clone();
            Box::new(move |url| ConnectOptions {
                server: Some(url.replacen("://", "://s3cret@", 1)),
                tlsca: Some(ca.clone()),
                ..Default::default()
            })
        }),
        ("a client certificate", t.server_config(true), {
            let (ca, cert, key) = (t.ca.clone(), t.client_cert.clone(), t.client_key.clone());
            Box::new(move |url| ConnectOptions {
                server: Some(url.into()),
                tlsca: Some(ca.clone()),
                tlscert: Some(cert.clone()),
                tlskey: Some(key.clone()),
                ..Default::default()
            })
        }),
        (
            "user and password",
            "authorization { users: [ { user: op, password: \"p@ss\" } ] }\n".into(),
            Box::new(|url| ConnectOptions {
                server: Some(url.into()),
                user: Some("op".into()),
                password: Some("p@ss".into()),
                ..Default::default()
            }),
        ),
        (
            "an nkey",
            format!("authorization {{ users: [ {{ nkey: {} }} ] }}\n", nkey.public_key()),
            {
                let seed = seed.clone();
                Box::new(move |url| ConnectOptions {
                    server: Some(url.into()),
                    nkey: Some(seed.clone()),
                    ..Default::default()
                })
            },
        ),
        ("a creds file", jwt.config.clone(), {
            let creds = jwt.creds.clone();
            Box::new(move |url| ConnectOptions {
                server: Some(url.into()),
                creds: Some(creds.clone()),
                ..Default::default()
            })
        }),
    ];
    for (what, conf, options) in cases {
        let s = NatsServer::start_with(ServerOptions { config: Some(conf), ..Default::default() })
            .unwrap_or_else(|e| panic!("{e}"));
        let o = options(s.url());
        // The runner's own connection, with the same options.
        let client = o.connect().await.unwrap_or_else(|e| panic!("{what}: {e}"));
        let responder = o.responder().await.unwrap_or_else(|e| panic!("{what}: {e}"));
        let mut sub = client.subscribe("window.x").await.unwrap();
        client.flush().await.unwrap();
        let task = tokio::spawn(async move {
            let m = sub.next().await.unwrap();
            responder.no_responders(m.reply.as_deref().unwrap());
        });
        let e = client.request("window.x", "p".into()).await.unwrap_err();
        assert_eq!(e.kind(), async_nats::RequestErrorKind::NoResponders, "{what}: {e:?}");
        task.await.unwrap();
        // Wrong credentials are refused by name, not hung on.
        let mut bad = options(s.url());
        bad.token = bad.token.map(|_| "wrong".into());
        bad.password = bad.password.map(|_| "wrong".into());
        if bad.token.is_some() || bad.password.is_some() {
            let e = bad.responder().await.err().unwrap_or_else(|| panic!("{what}: accepted"));
            assert!(e.to_string().contains("refused"), "{what}: {e}");
        }
    }
}
