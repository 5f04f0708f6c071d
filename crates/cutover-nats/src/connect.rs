//! Connection options, named as the nats CLI names them, and nats CLI contexts.
//!
//! Precedence as in the nats CLI: an explicit option wins over the selected
//! context, which wins over the defaults.

use crate::error::{Error, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    pub server: Option<String>,
    pub context: Option<String>,
    pub creds: Option<PathBuf>,
    pub nkey: Option<PathBuf>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    pub tlscert: Option<PathBuf>,
    pub tlskey: Option<PathBuf>,
    pub tlsca: Option<PathBuf>,
    pub timeout: Option<Duration>,
}

/// The fields of a nats CLI context file (`~/.config/nats/context/NAME.json`)
/// that matter for connecting.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct NatsContext {
    pub url: String,
    pub token: String,
    pub user: String,
    pub password: String,
    pub creds: String,
    pub nkey: String,
    pub cert: String,
    pub key: String,
    pub ca: String,
}

fn config_dir() -> Option<PathBuf> {
    if let Ok(x) = std::env::var("XDG_CONFIG_HOME") {
        if !x.is_empty() {
            return Some(PathBuf::from(x).join("nats"));
        }
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config").join("nats"))
}

/// Reads a context by name, or the selected one (`context.txt`) when `name` is
/// None; `Ok(None)` when no context is selected.
pub fn load_context(name: Option<&str>) -> Result<Option<NatsContext>> {
    let Some(dir) = config_dir() else { return Ok(None) };
    let name = match name {
        Some(n) => n.to_string(),
        None => match std::fs::read_to_string(dir.join("context.txt")) {
            Ok(s) if !s.trim().is_empty() => s.trim().to_string(),
            _ => return Ok(None),
        },
    };
    let path = if name.ends_with(".json") || name.contains('/') {
        PathBuf::from(&name)
    } else {
        dir.join("context").join(format!("{name}.json"))
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::Config(format!("cannot read nats context {name:?} at {}: {e}; list contexts with `nats context ls` or pass --server", path.display()))
    })?;
    serde_json::from_str(&text).map(Some).map_err(|e| {
        Error::Config(format!("nats context file {} is not valid JSON: {e}", path.display()))
    })
}

fn nonempty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn readable(flag: &str, p: &Path) -> Result<()> {
    std::fs::metadata(p).map(|_| ()).map_err(|e| {
        Error::Config(format!(
            "cannot read {flag} file {}: {e}; check the path and its permissions",
            p.display()
        ))
    })
}

impl ConnectOptions {
    /// Fills what was not given explicitly from the context.
    pub fn resolve(mut self) -> Result<Self> {
        if let Some(ctx) = load_context(self.context.as_deref())? {
            self.server = self.server.or(nonempty(&ctx.url));
            self.creds = self.creds.or(nonempty(&ctx.creds).map(PathBuf::from));
            self.nkey = self.nkey.or(nonempty(&ctx.nkey).map(PathBuf::from));
            self.user = self.user.or(nonempty(&ctx.user));
            self.password = self.password.or(nonempty(&ctx.password));
            self.token = self.token.or(nonempty(&ctx.token));
            self.tlscert = self.tlscert.or(nonempty(&ctx.cert).map(PathBuf::from));
            self.tlskey = self.tlskey.or(nonempty(&ctx.key).map(PathBuf::from));
            self.tlsca = self.tlsca.or(nonempty(&ctx.ca).map(PathBuf::from));
        }
        Ok(self)
    }

    pub fn server_url(&self) -> String {
        self.server.clone().unwrap_or_else(|| "nats://127.0.0.1:4222".into())
    }

    /// Connects, failing fast (no retry loop) with the server named.
    pub async fn connect(&self) -> Result<async_nats::Client> {
        let o = self.clone().resolve()?;
        let server = o.server_url();
        let mut opts = async_nats::ConnectOptions::new().name("nats-cutover");
        if let Some(p) = &o.creds {
            readable("--creds", p)?;
            opts = opts.credentials_file(p).await.map_err(|e| {
                Error::Config(format!("cannot use --creds file {}: {e}", p.display()))
            })?;
        }
        if let Some(p) = &o.nkey {
            readable("--nkey", p)?;
            let seed = std::fs::read_to_string(p).map_err(|e| {
                Error::Config(format!("cannot read --nkey file {}: {e}", p.display()))
            })?;
            let seed =
                seed.lines().map(str::trim).find(|l| l.starts_with('S')).unwrap_or("").to_string();
            if seed.is_empty() {
                return Err(Error::Config(format!(
                    "--nkey file {} holds no seed (a line starting with S)",
                    p.display()
                )));
            }
            opts = opts.nkey(seed);
        }
        match (&o.user, &o.password) {
            (Some(u), p) => opts = opts.user_and_password(u.clone(), p.clone().unwrap_or_default()),
            (None, Some(_)) => return Err(Error::Config("--password needs --user".into())),
            _ => {}
        }
        if let Some(t) = &o.token {
            opts = opts.token(t.clone());
        }
        match (&o.tlscert, &o.tlskey) {
            (Some(c), Some(k)) => {
                readable("--tlscert", c)?;
                readable("--tlskey", k)?;
                opts = opts.add_client_certificate(c.clone(), k.clone()).require_tls(true);
            }
            (None, None) => {}
            _ => return Err(Error::Config("--tlscert and --tlskey go together".into())),
        }
        if let Some(ca) = &o.tlsca {
            readable("--tlsca", ca)?;
            opts = opts.add_root_certificates(ca.clone()).require_tls(true);
        }
        let timeout = o.timeout.unwrap_or(Duration::from_secs(5));
        opts = opts.connection_timeout(timeout).request_timeout(Some(timeout));
        // Fail fast on the first connect: an operator's typo must not hang.
        // `--server` takes a comma-separated list, as the nats CLI does.
        let urls: Vec<String> =
            server.split(',').map(|u| u.trim().to_string()).filter(|u| !u.is_empty()).collect();
        tokio::time::timeout(timeout + Duration::from_secs(1), opts.connect(urls))
            .await
            .map_err(|_| Error::Connect {
                server: server.clone(),
                reason: format!("no answer within {timeout:?}"),
            })?
            .map_err(|e| Error::Connect { server: server.clone(), reason: connect_reason(&e) })
    }
}

fn connect_reason(e: &async_nats::ConnectError) -> String {
    use async_nats::ConnectErrorKind as K;
    match e.kind() {
        K::AuthorizationViolation => {
            "authorization violation: check --user/--password, --token, --creds or --nkey".into()
        }
        K::Authentication => format!("authentication failed: {e}"),
        K::Io => format!("connection refused or unreachable ({e}); is nats-server running there?"),
        K::Tls => format!("TLS failed: {e}; check --tlsca/--tlscert/--tlskey"),
        _ => e.to_string(),
    }
}
