//! TLS and token connection options against a real server configured for them.

use crate::common::{cli, TempDir};
use cutover_testkit::{NatsServer, ServerOptions};
use std::path::Path;
use std::process::Command;

/// A throwaway CA and a server certificate for 127.0.0.1, made with openssl.
fn make_certs(dir: &Path) {
    let run = |args: &[&str]| {
        let o = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is needed for the TLS test: apt-get install openssl");
        assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=nats-cutover test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    ]);
}

#[test]
fn tls_with_ca_and_token_auth() {
    let guard = TempDir::new("tls");
    let dir = guard.0.clone();
    make_certs(&dir);
    let conf = format!(
        "tls {{\n  cert_file: \"{d}/server.pem\"\n  key_file: \"{d}/server.key\"\n}}\nauthorization {{ token: s3cret }}\n",
        d = dir.display()
    );
    let s = NatsServer::start_with(ServerOptions { config: Some(conf), ..Default::default() })
        .unwrap_or_else(|e| panic!("{e}"));
    let url = s.url().to_string();
    assert!(url.starts_with("tls://"), "{url}");
    let ca = dir.join("ca.pem");
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
