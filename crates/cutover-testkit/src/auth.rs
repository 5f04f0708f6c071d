//! Servers that ask for credentials: the configuration snippets and the files
//! a client needs, generated per test (nothing shared, nothing checked in).
//!
//! - [`operator_mode`]: an operator, an account with JetStream and a user as
//!   signed JWTs (nkeys), a creds file, and the server configuration that
//!   trusts the operator (resolver MEMORY, accounts preloaded).
//! - [`tls_files`]: a throwaway CA, a server certificate for 127.0.0.1 and a
//!   client certificate, made with the `openssl` command.
//!
//! JWTs are encoded here (header, claims, ed25519 signature by the issuer's
//! nkey, base64url without padding) as nats-io/jwt v2 `Decode` reads them: it
//! checks the signature over `header.claims` and the issuer's key type, not
//! the `jti`. The signing itself is the nkeys crate's.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use nkeys::KeyPair;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// An operator-mode server's configuration and one user's credentials.
pub struct OperatorMode {
    /// Server configuration: `operator`, `system_account`, `resolver: MEMORY`
    /// and `resolver_preload` with both accounts.
    pub config: String,
    /// The user's creds file (JWT and seed), as `nsc` writes it.
    pub creds: PathBuf,
    /// The user's JWT and seed, for tests that must not find them anywhere.
    pub user_jwt: String,
    pub user_seed: String,
    /// The account's key pair: [`OperatorMode::user`] issues more users.
    account: KeyPair,
    dir: PathBuf,
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A JWT with these claims, signed by `issuer`.
fn encode(issuer: &KeyPair, subject: &str, name: &str, nats: Value) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let claims = json!({
        "jti": format!("T{}X{}", N.fetch_add(1, Ordering::Relaxed), now()),
        "iat": now(),
        "iss": issuer.public_key(),
        "sub": subject,
        "name": name,
        "nats": nats,
    });
    let head = B64.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let signed = format!("{head}.{}", B64.encode(claims.to_string()));
    let sig = issuer.sign(signed.as_bytes()).expect("sign a JWT");
    format!("{signed}.{}", B64.encode(sig))
}

fn account_jwt(operator: &KeyPair, account: &KeyPair, name: &str, jetstream: bool) -> String {
    let js = if jetstream { -1 } else { 0 };
    let limits = json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
        "mem_storage": js, "disk_storage": js, "streams": js, "consumer": js,
    });
    let nats = json!({"limits": limits, "type": "account", "version": 2});
    encode(operator, &account.public_key(), name, nats)
}

/// The creds file text for a user JWT and seed (nsc's layout, which the
/// clients parse).
pub fn creds_text(jwt: &str, seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    )
}

/// An operator, a JetStream account `APP` and a system account `SYS`, and a
/// user of `APP` with every permission; files go to `dir`.
pub fn operator_mode(dir: &Path) -> OperatorMode {
    std::fs::create_dir_all(dir).expect("create the credentials directory");
    let operator = KeyPair::new_operator();
    let account = KeyPair::new_account();
    let system = KeyPair::new_account();
    let op_nats = json!({"type": "operator", "version": 2, "system_account": system.public_key()});
    let op_jwt = encode(&operator, &operator.public_key(), "OP", op_nats);
    let config = format!(
        "operator: {op_jwt}\nsystem_account: {sys}\nresolver: MEMORY\nresolver_preload: {{\n  {acc}: {acc_jwt}\n  {sys}: {sys_jwt}\n}}\n",
        sys = system.public_key(),
        acc = account.public_key(),
        acc_jwt = account_jwt(&operator, &account, "APP", true),
        sys_jwt = account_jwt(&operator, &system, "SYS", false),
    );
    let mut m = OperatorMode {
        config,
        creds: PathBuf::new(),
        user_jwt: String::new(),
        user_seed: String::new(),
        account,
        dir: dir.to_path_buf(),
    };
    let (creds, jwt, seed) = m.user("app", None);
    (m.creds, m.user_jwt, m.user_seed) = (creds, jwt, seed);
    m
}

impl OperatorMode {
    /// Another user of the account, `permissions` the JWT's `{"pub": {...},
    /// "sub": {...}}` (None: every permission): its creds file, JWT and seed.
    pub fn user(&self, name: &str, permissions: Option<Value>) -> (PathBuf, String, String) {
        let user = KeyPair::new_user();
        let mut nats = json!({"subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2});
        if let Some(Value::Object(p)) = permissions {
            for (k, v) in p {
                nats[k] = v;
            }
        }
        let jwt = encode(&self.account, &user.public_key(), name, nats);
        let seed = user.seed().expect("a user seed");
        let creds = self.dir.join(format!("{name}.creds"));
        std::fs::write(&creds, creds_text(&jwt, &seed)).expect("write a creds file");
        (creds, jwt, seed)
    }
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate signed
/// by it, in one directory.
pub struct TlsFiles {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl TlsFiles {
    /// A server `tls` block; `verify`: client certificates required.
    pub fn server_config(&self, verify: bool) -> String {
        format!(
            "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: {verify}\n}}\n",
            self.server_cert.display(),
            self.server_key.display(),
            self.ca.display()
        )
    }
}

/// Makes [`TlsFiles`] in `dir` with `openssl` (panics naming the missing
/// command: a test must fail, not skip).
pub fn tls_files(dir: &Path) -> TlsFiles {
    std::fs::create_dir_all(dir).expect("create the certificate directory");
    let run = |args: &[&str]| {
        let o = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is needed for the TLS tests: apt-get install openssl");
        assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let key = ["-newkey", "rsa:2048", "-nodes", "-keyout"];
    let ca = ["ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=nats-cutover test CA"];
    run(&[&["req", "-x509"], &key[..], &ca[..]].concat());
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        .expect("write the SAN extension");
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n")
        .expect("write the client extension");
    for (who, cn) in [("server", "/CN=127.0.0.1"), ("client", "/CN=nats-cutover test client")] {
        let (k, csr, pem, ext) = (
            format!("{who}.key"),
            format!("{who}.csr"),
            format!("{who}.pem"),
            format!("{who}.ext"),
        );
        run(&[&["req"], &key[..], &[&k, "-out", &csr, "-subj", cn]].concat());
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "1",
            "-extfile",
            &ext,
        ]);
    }
    TlsFiles {
        ca: dir.join("ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
    }
}
