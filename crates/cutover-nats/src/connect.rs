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
        Error::Input(format!("cannot read nats context {name:?} at {}: {e}; list contexts with `nats context ls` or pass --server", path.display()))
    })?;
    serde_json::from_str(&text).map(Some).map_err(|e| {
        Error::Input(format!("nats context file {} is not valid JSON: {e}", path.display()))
    })
}

fn nonempty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn readable(flag: &str, p: &Path) -> Result<()> {
    std::fs::metadata(p).map(|_| ()).map_err(|e| {
        Error::Input(format!(
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
    ///
    /// Credentials in the URL (`nats://TOKEN@host`, `nats://USER:PASSWORD@host`)
    /// are used as the nats CLI uses them: they win over --user/--password and
    /// --token (and a context's). They are never shown: errors name the URL
    /// with the secret replaced by `***`.
    pub async fn connect(&self) -> Result<async_nats::Client> {
        let o = self.clone().resolve()?;
        let server = o.server_url();
        let shown = redact_urls(&server);
        let (urls, url_auth) = server_urls(&server, &shown)?;
        // What was sent, for the error if the server refuses it.
        let mut sent = vec![];
        // A permissions violation comes only as an event: recorded, a
        // request the server dropped for it is named, not a timeout.
        let opts = async_nats::ConnectOptions::new().name("nats-cutover").event_callback(
            |ev| async move {
                if let async_nats::Event::ServerError(async_nats::ServerError::Other(m)) = ev {
                    crate::denied::record(&m);
                }
            },
        );
        let opts = o.with_files(opts, &mut sent).await?;
        let opts = o.with_auth(opts, url_auth, &mut sent)?;
        let mut opts = o.with_tls(opts)?;
        let timeout = o.timeout.unwrap_or(Duration::from_secs(5));
        opts = opts.connection_timeout(timeout).request_timeout(Some(timeout));
        // Fail fast on the first connect: an operator's typo must not hang.
        tokio::time::timeout(timeout + Duration::from_secs(1), opts.connect(urls))
            .await
            .map_err(|_| Error::Connect {
                server: shown.clone(),
                reason: format!("no answer within {timeout:?}"),
            })?
            .map_err(|e| Error::Connect {
                server: shown.clone(),
                reason: connect_reason(&e, &sent),
            })
    }

    /// The --creds and --nkey files.
    async fn with_files(
        &self,
        mut opts: async_nats::ConnectOptions,
        sent: &mut Vec<String>,
    ) -> Result<async_nats::ConnectOptions> {
        if let Some(p) = &self.creds {
            readable("--creds", p)?;
            opts = opts.credentials_file(p).await.map_err(|e| {
                Error::Input(format!("cannot use --creds file {}: {e}", p.display()))
            })?;
            sent.push(format!("the --creds file {}", p.display()));
        }
        if let Some(p) = &self.nkey {
            readable("--nkey", p)?;
            let seed = std::fs::read_to_string(p).map_err(|e| {
                Error::Input(format!("cannot read --nkey file {}: {e}", p.display()))
            })?;
            let seed =
                seed.lines().map(str::trim).find(|l| l.starts_with('S')).unwrap_or("").to_string();
            if seed.is_empty() {
                return Err(Error::Input(format!(
                    "--nkey file {} holds no seed (a line starting with S)",
                    p.display()
                )));
            }
            opts = opts.nkey(seed);
            sent.push(format!("the --nkey file {}", p.display()));
        }
        Ok(opts)
    }

    /// The URL's credentials, else --user/--password and --token.
    fn with_auth(
        &self,
        mut opts: async_nats::ConnectOptions,
        url_auth: Option<UrlAuth>,
        sent: &mut Vec<String>,
    ) -> Result<async_nats::ConnectOptions> {
        match url_auth {
            Some(UrlAuth::Token(t)) => {
                opts = opts.token(t);
                sent.push("the token in the server URL".into());
            }
            Some(UrlAuth::UserPassword(u, p)) => {
                sent.push(format!("user {u:?} with the password in the server URL"));
                opts = opts.user_and_password(u, p);
            }
            None => {
                match (&self.user, &self.password) {
                    (Some(u), p) => {
                        opts = opts.user_and_password(u.clone(), p.clone().unwrap_or_default());
                        sent.push(format!("--user {u:?} with its --password"));
                    }
                    (None, Some(_)) => return Err(Error::Input("--password needs --user".into())),
                    _ => {}
                }
                if let Some(t) = &self.token {
                    opts = opts.token(t.clone());
                    sent.push("--token".into());
                }
            }
        }
        Ok(opts)
    }

    /// A client certificate and a CA (either one requires TLS).
    fn with_tls(&self, mut opts: async_nats::ConnectOptions) -> Result<async_nats::ConnectOptions> {
        match (&self.tlscert, &self.tlskey) {
            (Some(c), Some(k)) => {
                readable("--tlscert", c)?;
                readable("--tlskey", k)?;
                opts = opts.add_client_certificate(c.clone(), k.clone()).require_tls(true);
            }
            (None, None) => {}
            _ => return Err(Error::Input("--tlscert and --tlskey go together".into())),
        }
        if let Some(ca) = &self.tlsca {
            readable("--tlsca", ca)?;
            opts = opts.add_root_certificates(ca.clone()).require_tls(true);
        }
        Ok(opts)
    }
}

/// `--server` takes a comma-separated list, as the nats CLI does; credentials
/// in the URLs must be the same in each that carries some. `shown`: the list
/// redacted, for errors.
pub(crate) fn server_urls(server: &str, shown: &str) -> Result<(Vec<String>, Option<UrlAuth>)> {
    let mut urls = vec![];
    let mut url_auth: Option<UrlAuth> = None;
    for u in server.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let (url, auth) = split_url_auth(u)?;
        if let Some(a) = auth {
            if url_auth.as_ref().is_some_and(|prev| *prev != a) {
                return Err(Error::Input(format!(
                    "the server URLs {shown} carry different credentials; a connection uses one set: give it in one URL, or with --user/--password or --token"
                )));
            }
            url_auth = Some(a);
        }
        urls.push(url);
    }
    Ok((urls, url_auth))
}

/// Credentials carried by a server URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlAuth {
    /// `nats://TOKEN@host`
    Token(String),
    /// `nats://USER:PASSWORD@host` (`USER:` is an empty password)
    UserPassword(String, String),
}

/// Where the credentials of `url` are, if it has any: (start, end) of the
/// user-info part, without its `@`.
fn userinfo_span(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://").map(|i| i + 3).unwrap_or(0);
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    authority.rfind('@').map(|at| (start, start + at))
}

/// `%40` → `@`: user-info is percent-encoded in a URL (a password holding `@`,
/// `:` or `/` must be). A malformed escape is kept as written.
fn percent_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits a server URL into the URL without credentials (what the client
/// library is given) and the credentials it carried.
pub fn split_url_auth(url: &str) -> Result<(String, Option<UrlAuth>)> {
    let Some((start, at)) = userinfo_span(url) else { return Ok((url.to_string(), None)) };
    let clean = format!("{}{}", &url[..start], &url[at + 1..]);
    let info = &url[start..at];
    let auth = match info.split_once(':') {
        None if info.is_empty() => None,
        None => Some(UrlAuth::Token(percent_decode(info))),
        Some(("", _)) => {
            return Err(Error::Input(format!(
                "the server URL {} has a password but no user: write nats://USER:PASSWORD@HOST, or nats://TOKEN@HOST for a token",
                redact_url(url)
            )))
        }
        Some((u, p)) => Some(UrlAuth::UserPassword(percent_decode(u), percent_decode(p))),
    };
    Ok((clean, auth))
}

/// The URL with its secret (token or password) replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    let Some((start, at)) = userinfo_span(url) else { return url.to_string() };
    let shown = match url[start..at].split_once(':') {
        Some((u, _)) => format!("{u}:***"),
        None => "***".into(),
    };
    format!("{}{shown}{}", &url[..start], &url[at..])
}

/// [`redact_url`] for a comma-separated list.
pub fn redact_urls(urls: &str) -> String {
    urls.split(',').map(|u| redact_url(u.trim())).collect::<Vec<_>>().join(",")
}

fn connect_reason(e: &async_nats::ConnectError, sent: &[String]) -> String {
    use async_nats::ConnectErrorKind as K;
    match e.kind() {
        K::AuthorizationViolation if sent.is_empty() => "authorization violation: the server requires credentials and none were given; pass --user/--password, --token, --creds or --nkey, or put them in the URL (nats://USER:PASSWORD@HOST or nats://TOKEN@HOST)".into(),
        K::AuthorizationViolation => format!(
            "authorization violation: the server refused {}; check them",
            sent.join(" and ")
        ),
        K::Authentication => format!("authentication failed: {e}"),
        K::Io => format!("connection refused or unreachable ({e}); is nats-server running there?"),
        K::Tls => format!("TLS failed: {e}; check --tlsca/--tlscert/--tlskey"),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(u: &str) -> (String, Option<UrlAuth>) {
        split_url_auth(u).unwrap()
    }

    #[test]
    fn url_credentials_are_taken_out_of_the_url() {
        assert_eq!(split("nats://127.0.0.1:4222"), ("nats://127.0.0.1:4222".into(), None));
        assert_eq!(
            split("nats://s3cret@127.0.0.1:4222"),
            ("nats://127.0.0.1:4222".into(), Some(UrlAuth::Token("s3cret".into())))
        );
        assert_eq!(
            split("tls://op:pw@nats.example.com:4222/"),
            (
                "tls://nats.example.com:4222/".into(),
                Some(UrlAuth::UserPassword("op".into(), "pw".into()))
            )
        );
        // Percent-encoded, and an '@' in the password (the last '@' ends it).
        assert_eq!(
            split("nats://op:p%40ss%3Aw@host:1"),
            ("nats://host:1".into(), Some(UrlAuth::UserPassword("op".into(), "p@ss:w".into())))
        );
        assert_eq!(
            split("op:p@ss@host:1"),
            ("host:1".into(), Some(UrlAuth::UserPassword("op".into(), "p@ss".into())))
        );
        assert_eq!(
            split("nats://op:@host"),
            ("nats://host".into(), Some(UrlAuth::UserPassword("op".into(), "".into())))
        );
        assert_eq!(split("nats://@host"), ("nats://host".into(), None));
        // An '@' after the host is not user-info.
        assert_eq!(split("nats://host:1/x@y"), ("nats://host:1/x@y".into(), None));
        // A stray '%' is kept as written.
        assert_eq!(split("nats://a%zz%4@h").1, Some(UrlAuth::Token("a%zz%4".into())));
    }

    #[test]
    fn a_password_without_a_user_is_refused_without_showing_it() {
        let e = split_url_auth("nats://:secret@host:1").unwrap_err().to_string();
        assert!(e.contains("has a password but no user"), "{e}");
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn secrets_are_redacted_in_what_is_shown() {
        assert_eq!(redact_url("nats://s3cret@h:1"), "nats://***@h:1");
        assert_eq!(redact_url("nats://op:pw@h:1"), "nats://op:***@h:1");
        assert_eq!(redact_url("nats://h:1"), "nats://h:1");
        assert_eq!(redact_urls("nats://t@a:1, nats://b:2"), "nats://***@a:1,nats://b:2");
    }
}
