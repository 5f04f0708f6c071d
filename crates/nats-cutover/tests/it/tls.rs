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
