//! Command-line definitions. Doc comments are the help text.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Move the consumers and publishers of a NATS JetStream stream to a new stream,
/// live: publishers never stop, nothing is lost, nothing is processed twice.
#[derive(Debug, Parser)]
#[command(name = "nats-cutover", version, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Machine-readable output (JSON; one event per line for `run`).
    #[arg(long, global = true, help_heading = "Output")]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// Connection options, named as in the nats CLI.
#[derive(Debug, Args, Clone)]
pub struct ConnArgs {
    /// NATS server URL(s), comma separated (across systems: the target side,
    /// where B, its durables and the journal live).
    #[arg(
        short = 's',
        long,
        visible_alias = "to-server",
        env = "NATS_URL",
        global = true,
        help_heading = "Connection"
    )]
    pub server: Option<String>,
    /// nats CLI context to use (default: the selected one, if any; across
    /// systems: the target side's).
    #[arg(
        long,
        visible_alias = "to-context",
        env = "NATS_CONTEXT",
        global = true,
        help_heading = "Connection"
    )]
    pub context: Option<String>,
    /// User credentials file (JWT + seed).
    #[arg(long, env = "NATS_CREDS", global = true, help_heading = "Connection")]
    pub creds: Option<PathBuf>,
    /// NKey seed file.
    #[arg(long, env = "NATS_NKEY", global = true, help_heading = "Connection")]
    pub nkey: Option<PathBuf>,
    /// Username.
    #[arg(long, env = "NATS_USER", global = true, help_heading = "Connection")]
    pub user: Option<String>,
    /// Password.
    #[arg(long, env = "NATS_PASSWORD", global = true, help_heading = "Connection")]
    pub password: Option<String>,
    /// Authentication token.
    #[arg(long, env = "NATS_TOKEN", global = true, help_heading = "Connection")]
    pub token: Option<String>,
    /// TLS client certificate.
    #[arg(long, env = "NATS_CERT", global = true, help_heading = "Connection")]
    pub tlscert: Option<PathBuf>,
    /// TLS client key.
    #[arg(long, env = "NATS_KEY", global = true, help_heading = "Connection")]
    pub tlskey: Option<PathBuf>,
    /// TLS CA certificate to verify the server.
    #[arg(long, env = "NATS_CA", global = true, help_heading = "Connection")]
    pub tlsca: Option<PathBuf>,
    /// Connection and request timeout (e.g. 5s, 500ms).
    #[arg(long, env = "NATS_TIMEOUT", value_parser = parse_timeout, global = true, help_heading = "Connection")]
    pub timeout: Option<Duration>,
    /// Across systems (another account, JetStream domain, leaf node or
    /// cluster; docs/cross-system.md): the URL(s) of the source side, the
    /// system that holds the old stream. The other connection options are
    /// the target side's.
    #[arg(long, global = true, help_heading = "Across systems")]
    pub from_server: Option<String>,
    /// Across systems: the nats CLI context of the source side.
    #[arg(long, global = true, help_heading = "Across systems")]
    pub from_context: Option<String>,
    /// Across systems: the source side's credentials file.
    #[arg(long, global = true, help_heading = "Across systems")]
    pub from_creds: Option<PathBuf>,
    /// Across systems: the source side's username.
    #[arg(long, global = true, help_heading = "Across systems")]
    pub from_user: Option<String>,
    /// Across systems: the source side's password.
    #[arg(long, global = true, help_heading = "Across systems")]
    pub from_password: Option<String>,
}

impl ConnArgs {
    /// Whether a source side is given: the move crosses systems.
    pub fn across(&self) -> bool {
        self.from_server.is_some() || self.from_context.is_some()
    }
}

// Parsed once per process: the size of the largest variant (`run`'s options)
// costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show a stream, its sources' real catch-up and its consumers' settled state.
    Inspect(InspectArgs),
    /// Explain, read-only, how consumers would move from one stream to another.
    #[command(after_help = PLAN_EXAMPLES)]
    Plan(PlanCmdArgs),
    /// Carry out the cut-over, live (resumes an interrupted one).
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Give a KV bucket new settings under its own name, live: `nats kv add`'s
    /// option names (history, ttl, max-value-size, max-bucket-size, storage,
    /// replicas, compression, description, marker-ttl); revisions, watchers'
    /// positions and every durable kept. See docs/in-place.md.
    #[command(after_help = KV_EXAMPLES)]
    Kv(BucketArgs),
    /// Give an object store new settings under its own name, live: `nats obj
    /// add`'s option names (ttl, max-bucket-size, storage, replicas,
    /// compression, description). See docs/in-place.md.
    #[command(after_help = OBJ_EXAMPLES)]
    Obj(BucketArgs),
    /// Bring streams, KV buckets and object stores to the state files describe
    /// (the nats CLI's stream JSON, NACK resources), live: a dry run by
    /// default; `--yes` creates, updates and changes in place. See
    /// docs/apply.md.
    ///
    /// Each asset's action: unchanged, create, update (the server takes it),
    /// change in place (a live migration, as `run --in-place`) or refused
    /// (why, and what would make it possible). Exit codes of the dry run: 0
    /// nothing would change, 7 changes pending, 3 some asset refused; 2 bad
    /// input (a file, a field), as for every command.
    #[command(after_help = APPLY_EXAMPLES)]
    Apply(ApplyArgs),
    /// Show running and finished migrations.
    Status(StatusArgs),
    /// Undo a migration that has not passed its commit point.
    Rollback(RollbackArgs),
    /// Remove the record of a finished, rolled-back or never-started migration
    /// and its expired lease (a live one is refused); routes stay.
    Forget(ForgetArgs),
    /// Prove a migration exact: every message once, in order, handed over without
    /// gap or overlap; optionally against the applications' audit records.
    Verify(VerifyArgs),
    /// Start a local server, run a live workload, cut it over, and show the proof.
    ///
    /// With --server (or --context) given on the command line, the demo runs on
    /// that server instead (not because NATS_URL is set): it creates streams
    /// ORDERS and ORDERS_V2 there, refuses a server that already has them, and
    /// leaves them to inspect. The local server's binary is taken from
    /// $NATS_SERVER, .nats-server/<version>/ under the current directory or this
    /// program's (or their parents), or PATH.
    Demo(DemoArgs),
    /// Watch a consumer drain: its lag, the settled/checkpoint condition and a
    /// status (ok, draining, stalled, stopped) every tick.
    ///
    /// Statuses are judged over the last --window reads; pausing or resuming
    /// starts afresh. ok: nothing awaits an ack and nothing is pending or the
    /// consumer is paused (its position is stable), or deliveries and acks move.
    /// draining: paused while acks come in, or nothing left to deliver and ack
    /// pending falling. stalled: messages awaited an ack in every read and none
    /// was acknowledged (a worker holds them, or max_ack_pending is reached).
    /// stopped: not paused, messages pending, nothing delivered and no pull
    /// request waiting (no worker is pulling); or paused in every read while
    /// messages arrive, with no nats-cutover runner holding its stream (a
    /// failed run's pause, or someone else's). Read-only.
    Watch(WatchArgs),
}

const PLAN_EXAMPLES: &str = "\
Examples:
  nats-cutover plan --from ORDERS --to ORDERS_V2 --consumer worker
  nats-cutover plan --from ORDERS --to ORDERS_V2 --all-consumers --to-config b.json --out plan.toml
  nats-cutover plan --in-place ORDERS --all-consumers --set storage=memory
  nats-cutover -s nats://hub:4222 --from-server nats://leaf:4222 plan --from ORDERS --to ORDERS_V2 --consumer worker";

const RUN_EXAMPLES: &str = "\
Examples:
  nats-cutover run --from ORDERS --to ORDERS_V2 --consumer worker --yes
  nats-cutover run --plan plan.toml --yes --report run.html
  nats-cutover run --from ORDERS --to ORDERS_V2 --consumer worker --mode fence --yes
  nats-cutover run --from ORDERS --to ORDERS_V2 --consumer worker --mode rolling --new-version 2 --yes
  nats-cutover run --in-place ORDERS --all-consumers --set storage=memory --yes
  nats-cutover run --resume ORDERS.ORDERS_V2          (after a crash or Ctrl-C; `rollback ORDERS.ORDERS_V2` undoes it)";

const KV_EXAMPLES: &str = "\
Examples:
  nats-cutover kv config --set storage=memory --yes
  nats-cutover kv sessions --set history=10 --set ttl=24h --yes
  nats-cutover kv config --set replicas=3 --yes          (the server updates it in place: no migration)";

const APPLY_EXAMPLES: &str = "\
Examples:
  nats-cutover apply streams/                       (dry run: the diff and action per asset)
  nats-cutover apply streams/ nack/buckets.yaml --yes
  nats-cutover apply streams/ --only 'ORDERS*' --except ORDERS_TEST --yes --parallel 2
  nats-cutover apply streams/ --yes --skip-refused  (apply what can be, leave the refused as they are)";

const OBJ_EXAMPLES: &str = "\
Examples:
  nats-cutover obj files --set storage=file --yes
  nats-cutover obj files --set replicas=3 --set compression=s2 --yes";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Messages per second the embedded publisher sends.
    #[arg(long, default_value_t = 1000)]
    pub rate: u32,
    /// How long the workload runs (seconds, or a duration such as 10s, 1m).
    #[arg(long, default_value = "6s", value_parser = parse_secs_or_duration)]
    pub duration: Duration,
    /// Worker instances consuming the durable.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Processing time per message in each worker.
    #[arg(long, default_value = "1ms", value_parser = humantime::parse_duration)]
    pub processing: Duration,
    /// How B gets A's messages (`--strategy rolling` is read as `--mode
    /// rolling`).
    #[arg(long, value_enum, default_value = "source")]
    pub strategy: StrategyArg,
    /// How the consumers' position is handed over.
    #[arg(long, value_enum, default_value = "drain")]
    pub mode: ModeArg,
    /// Write a self-contained HTML report (timeline, steps, verification).
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// A nak delay: at least a second (instances that follow docs/protocol.md
/// use at least that anyway).
pub fn parse_nak_delay(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 30s: {e}"))?;
    if d < Duration::from_secs(1) {
        return Err(format!("{s} is shorter than 1s: messages above the fence would come back to the instances almost at once; use 1s or more"));
    }
    Ok(d)
}

fn duration_at_least(s: &str, min: Duration, what: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 5s or 500ms: {e}"))?;
    if d < min {
        return Err(format!("{s} is shorter than {}: {what}", humantime::format_duration(min)));
    }
    Ok(d)
}

/// `--max-pause`: at least 10ms (shorter, the drain would only resume and
/// pause the consumer again, never letting it settle).
pub fn parse_max_pause(s: &str) -> Result<Duration, String> {
    duration_at_least(s, Duration::from_millis(10), "the drain would resume the consumer as soon as it paused it; use 10ms or more (default 5s)")
}

/// `--lease-ttl`: at least 1s (the runner renews it between requests).
pub fn parse_lease_ttl(s: &str) -> Result<Duration, String> {
    duration_at_least(s, Duration::from_secs(1), "the lease would lapse between two renewals and another runner could take the migration over; use 1s or more (default 30s)")
}

/// `--timeout`, `--settle-timeout`, `--fence-ack-timeout`: more than zero.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    duration_at_least(
        s,
        Duration::from_millis(1),
        "a wait of zero would fail at once; give a positive duration such as 5s",
    )
}

/// `10` means ten seconds; `10s`, `1m`, `500ms` are humantime durations.
pub fn parse_secs_or_duration(s: &str) -> Result<Duration, String> {
    if let Ok(n) = s.trim().parse::<f64>() {
        if n.is_finite() && n >= 0.0 {
            return Ok(Duration::from_secs_f64(n));
        }
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is neither seconds nor a duration like 10s or 1m: {e}"))
}

/// The seed question and issue 11 call the rolling upgrade a strategy:
/// `--strategy rolling` (or `--strategy=rolling`) is read as `--mode
/// rolling` with the default strategy, source, which is what it is (a fence
/// that splits versions). Given together with `--mode`, it is refused as
/// bad input rather than guessed.
pub fn spell_rolling(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let mut out = Vec::with_capacity(args.len());
    let (mut rolling, mut mode) = (false, false);
    let mut it = args.into_iter().peekable();
    while let Some(a) = it.next() {
        mode |= a == "--mode" || a.to_str().is_some_and(|a| a.starts_with("--mode="));
        let spelled = if a == "--strategy" && it.peek().is_some_and(|v| v == "rolling") {
            it.next();
            true
        } else {
            a == "--strategy=rolling"
        };
        if spelled {
            rolling = true;
            out.extend(["--mode".into(), "rolling".into()]);
        } else {
            out.push(a);
        }
    }
    if rolling && mode {
        return Err("--strategy rolling is --mode rolling (a rolling upgrade with strategy source): give one of them, not both".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategy_rolling_is_mode_rolling() {
        let v = |s: &str| s.split(' ').map(OsString::from).collect::<Vec<_>>();
        let run = "x run --from A --to B --consumer C --new-version 2";
        for given in ["--strategy rolling", "--strategy=rolling"] {
            let args = spell_rolling(v(&format!("{run} {given}"))).unwrap();
            let cli = Cli::try_parse_from(args).unwrap();
            let Command::Run(r) = cli.command else { panic!("run") };
            assert_eq!((r.plan.strategy, r.plan.mode), (StrategyArg::Source, ModeArg::Rolling));
        }
        let demo = Cli::try_parse_from(spell_rolling(v("x demo --strategy rolling")).unwrap());
        let Command::Demo(d) = demo.unwrap().command else { panic!("demo") };
        assert_eq!((d.strategy, d.mode), (StrategyArg::Source, ModeArg::Rolling));
        // Without --new-version, clap says what a rolling run needs.
        let args = spell_rolling(v("x run --from A --to B --consumer C --strategy rolling"));
        assert!(Cli::try_parse_from(args.unwrap()).is_err());
        let both = spell_rolling(v(&format!("{run} --strategy rolling --mode fence")));
        assert!(both.unwrap_err().contains("give one of them"));
        let other = v(&format!("{run} --strategy mirror"));
        assert_eq!(spell_rolling(other.clone()).unwrap(), other);
    }

    /// `--help` of the commands a newcomer starts with: options grouped
    /// under headings in a fixed order, the connection options once, and an
    /// example block at the end.
    #[test]
    fn help_is_grouped_under_headings_with_examples() {
        use clap::CommandFactory;
        let want: &[(&str, &[&str])] = &[
            (
                "run",
                &[
                    "What moves",
                    "Strategy and mode",
                    "Publishers",
                    "In place",
                    "Limits and timeouts",
                    "Connection",
                    "Across systems",
                    "Output",
                ],
            ),
            (
                "plan",
                &[
                    "What moves",
                    "Strategy and mode",
                    "Publishers",
                    "In place",
                    "Connection",
                    "Across systems",
                    "Output",
                ],
            ),
            (
                "apply",
                &[
                    "What changes",
                    "Publishers",
                    "Limits and timeouts",
                    "Output",
                    "Connection",
                    "Across systems",
                ],
            ),
            (
                "kv",
                &[
                    "Publishers",
                    "In place",
                    "Across systems",
                    "Limits and timeouts",
                    "Connection",
                    "Output",
                ],
            ),
        ];
        for (name, headings) in want {
            let mut cmd = Cli::command();
            cmd.build();
            let sub = cmd.find_subcommand_mut(name).expect(name);
            let help = sub.render_long_help().to_string();
            let seen: Vec<&str> = help
                .lines()
                .filter_map(|l| l.strip_suffix(':'))
                .filter(|l| {
                    !l.starts_with(' ')
                        && !["Usage", "Options", "Arguments", "Examples"].contains(l)
                })
                .collect();
            assert_eq!(&seen, headings, "{name} --help headings");
            for flag in
                ["--server <SERVER>", "--creds <CREDS>", "--from-server <FROM_SERVER>", "--json"]
            {
                assert_eq!(help.matches(flag).count(), 1, "{name} --help shows {flag} once");
            }
            let examples = help.split("Examples:\n").nth(1).expect("an example block");
            assert!(examples.lines().all(|l| l.starts_with("  nats-cutover ")), "{examples}");
        }
    }

    #[test]
    fn durations_take_seconds_or_humantime() {
        assert_eq!(parse_secs_or_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_secs_or_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_secs_or_duration("10s").unwrap(), Duration::from_secs(10));
        assert!(parse_secs_or_duration("soon").is_err());
    }

    #[test]
    fn connection_options_go_before_or_after_the_subcommand() {
        let a = Cli::try_parse_from([
            "nats-cutover",
            "--server",
            "nats://x:1",
            "plan",
            "--from",
            "A",
            "--to",
            "B",
            "--consumer",
            "C",
        ])
        .unwrap();
        let b = Cli::try_parse_from([
            "nats-cutover",
            "plan",
            "--from",
            "A",
            "--to",
            "B",
            "--consumer",
            "C",
            "--server",
            "nats://x:1",
            "--json",
        ])
        .unwrap();
        assert_eq!(a.conn.server, b.conn.server);
        assert!(b.json);
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Execute a plan file written by `plan --out` instead of planning anew.
    #[arg(long = "plan", value_name = "FILE", help_heading = "What moves")]
    pub plan_file: Option<PathBuf>,
    /// Resume the interrupted migration with this id (see `status`).
    #[arg(long, value_name = "ID", help_heading = "What moves")]
    pub resume: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Keep the old stream, sealed (default).
    #[arg(long, conflicts_with = "delete_old", help_heading = "What moves")]
    pub keep_old: bool,
    /// Delete the old stream once everything moved.
    #[arg(long, help_heading = "What moves")]
    pub delete_old: bool,
    /// Keep the old durables, paused for good, instead of deleting them: plain
    /// applications still bound to them wait without errors until redeployed.
    #[arg(long, conflicts_with = "delete_old", help_heading = "What moves")]
    pub keep_old_consumers: bool,
    /// How long a runner's lease lasts without renewal (another runner may take
    /// over a crashed one's migration after this).
    #[arg(long, value_parser = parse_lease_ttl, default_value = "30s", help_heading = "Limits and timeouts")]
    pub lease_ttl: Duration,
    /// Give up safely if a consumer has not settled after this long (default:
    /// 10 × its ack_wait, at least 1 minute).
    #[arg(long, value_parser = parse_timeout, help_heading = "Limits and timeouts")]
    pub settle_timeout: Option<Duration>,
    /// The longest the old consumer stays paused without ack progress (capped by
    /// its ack_wait); then it is resumed for as long and paused again, so a dead
    /// worker or a nak'd message cannot stall the applications.
    #[arg(long, value_parser = parse_max_pause, default_value = "5s", help_heading = "Limits and timeouts")]
    pub max_pause: Duration,
    /// --mode fence: how long to wait, once the old consumer settled to the
    /// fence, for every live instance to acknowledge it (then the run goes on
    /// and names the missing ones; the old consumer stays paused for good).
    #[arg(long, value_parser = parse_timeout, default_value = "10s", help_heading = "Limits and timeouts")]
    pub fence_ack_timeout: Duration,
    /// --mode fence: the delay instances give the old consumer's messages above
    /// the fence when they nak them (at least 1s; docs/protocol.md).
    #[arg(long, value_parser = parse_nak_delay, default_value = "30s", help_heading = "Limits and timeouts")]
    pub nak_delay: Duration,
    /// --mode rolling: go on without waiting for the instances still bound to
    /// the old consumer (safe: it is settled to the fence, so they process
    /// nothing more; it is deleted at the end, unless --keep-old-consumers
    /// keeps it paused so they idle without errors until replaced); use with
    /// --resume after stopping a run that waits. Across systems with the
    /// publishers repointed: `run --resume ID --proceed` tells the run that
    /// waits for them (running or stopped) to seal the old stream.
    #[arg(long, help_heading = "Strategy and mode")]
    pub proceed: bool,
    /// The default, kept for scripts: the runner answers the commit window's
    /// publishes (see --no-answer-publishes).
    #[arg(long, hide = true, conflicts_with = "no_answer_publishes")]
    pub answer_publishes: bool,
    /// Leave the commit window's publishes to the server. By default the
    /// runner listens on the publishers' subjects while no stream holds
    /// them: a publish with a Nats-Msg-Id is stored once a stream holds
    /// them again and gets that stream's ack; one without is answered
    /// "no responders" as soon as no stream can store it (on a cluster the
    /// server sometimes leaves it unanswered until the publisher's timeout).
    #[arg(long, help_heading = "Publishers")]
    pub no_answer_publishes: bool,
    /// Messages a mirror's copy may have in flight from the old stream
    /// (servers 2.14+, a limits stream, a copy of one replica; a replicated
    /// copy uses the server's own mirror consumer): the copy reads it through a durable
    /// CUTOVER_MIRROR_<COPY> with this max_ack_pending, deleted with the
    /// mirror. Smaller: publishes to the old stream wait less behind the
    /// copy, and the copy takes longer; 0: the server's own mirror consumer
    /// (copies fastest; publishes waited up to 0.6 s behind a copy of a
    /// million messages).
    #[arg(long, default_value_t = cutover_nats::engine::DEFAULT_COPY_WINDOW, help_heading = "Publishers")]
    pub copy_window: u64,
    /// --strategy dual-write: how long old and new consumers run side by side
    /// (publishers writing both streams) before writes to the old stream stop.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s", help_heading = "Strategy and mode")]
    pub side_by_side: Duration,
    #[command(flatten)]
    pub more: PlanMoreArgs,
    /// Across systems with the publishers repointed (the plan says they are
    /// split): go on to seal the old stream, without the go-ahead of
    /// `run --resume ID --proceed`, once it stored nothing for this long.
    #[arg(long, value_parser = parse_timeout, help_heading = "Across systems")]
    pub seal_when_idle: Option<Duration>,
    /// Write a self-contained HTML report (timeline of the consumers' state with
    /// every step and checkpoint, the journal, the plan), also when the run fails.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub report: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics while the run lasts
    /// (e.g. 127.0.0.1:9477); nothing is served without it.
    #[arg(long, value_name = "ADDR", help_heading = "Output")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

#[derive(Debug, Args)]
pub struct BucketArgs {
    /// The bucket's name (its stream is KV_<BUCKET> or OBJ_<BUCKET>).
    pub bucket: String,
    /// How long writers keep retrying a write with the same Nats-Msg-Id
    /// (default: the bucket's duplicate window). On a cluster each hop waits
    /// this long before its commit; KV and object-store clients write
    /// without msg-ids unless the application sets one, so `0s` is exact
    /// for them.
    #[arg(long, value_parser = humantime::parse_duration, help_heading = "Publishers")]
    pub retry_horizon: Option<Duration>,
    /// Leave the commit windows' writes to the server (see `run
    /// --no-answer-publishes`); by default a write without a msg-id in a
    /// window is answered "no responders" at once.
    #[arg(long, help_heading = "Publishers")]
    pub no_answer_publishes: bool,
    /// Messages each copy may have in flight (see `run --copy-window`).
    #[arg(long, default_value_t = cutover_nats::engine::DEFAULT_COPY_WINDOW, help_heading = "Publishers")]
    pub copy_window: u64,
    /// A new setting, OPTION=VALUE with the nats CLI's option names
    /// (--set history=10 --set storage=memory --set ttl=24h); repeatable.
    /// Required unless the bucket moves to another system as it is
    /// (--from-server/--from-context: the source side holds it).
    #[arg(long, value_name = "OPTION=VALUE", help_heading = "In place")]
    pub set: Vec<String>,
    /// The temporary stream (default: <STREAM>_CUTOVER).
    #[arg(long, value_name = "STREAM", help_heading = "In place")]
    pub via: Option<String>,
    /// Across systems (--from-server/--from-context): the bucket's clients
    /// are repointed to the target side at the commit point, as they must
    /// be across a leaf connection between JetStream domains (the server
    /// never lets `$KV.>` and `$OBJ.>` cross it): from the commit point a
    /// write still sent to the old system is answered "no responders"
    /// (nothing stored) until its client reconnects to the target side.
    #[arg(long, help_heading = "Across systems")]
    pub repoint_publishers: bool,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// How long a runner's lease lasts without renewal.
    #[arg(long, value_parser = parse_lease_ttl, default_value = "30s", help_heading = "Limits and timeouts")]
    pub lease_ttl: Duration,
    /// The longest a durable of the bucket's stream stays paused without ack
    /// progress (see `run --max-pause`).
    #[arg(long, value_parser = parse_max_pause, default_value = "5s", help_heading = "Limits and timeouts")]
    pub max_pause: Duration,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Files or directories with the desired state: *.json (a stream's
    /// configuration, bare or under `config` as `nats stream info` prints it in JSON; KV_x
    /// and OBJ_x for buckets, or {"kv": BUCKET, OPTION: VALUE} with `nats
    /// kv add`'s option names) and *.yaml/*.yml (NACK resources, several
    /// documents a file); directories are read recursively. Across systems
    /// (--from-server/--from-context) the files are optional: without them
    /// every stream, bucket and object store of the source side moves here
    /// under its name, as it is.
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Show what would change, change nothing (the default without --yes).
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,
    /// Carry it out: creates and updates at once, then the live changes.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Only assets whose name (or stream name) matches PATTERN (`*` for any
    /// characters); repeatable.
    #[arg(long, value_name = "PATTERN", help_heading = "What changes")]
    pub only: Vec<String>,
    /// Leave out assets whose name (or stream name) matches PATTERN;
    /// repeatable.
    #[arg(long, value_name = "PATTERN", help_heading = "What changes")]
    pub except: Vec<String>,
    /// With --yes: apply the others when some asset is refused (without it a
    /// refusal stops the apply before its first write).
    #[arg(long, help_heading = "What changes")]
    pub skip_refused: bool,
    /// Across systems (--from-server/--from-context): the applications that
    /// write (publishers, a bucket's clients) are repointed to the target
    /// side at each asset's commit point (see `kv --repoint-publishers`);
    /// needed where their subjects do not cross, as `$KV.>` and `$OBJ.>`
    /// never cross a leaf connection between JetStream domains.
    #[arg(long, help_heading = "What changes")]
    pub repoint_publishers: bool,
    /// How long publishers retry a publish with the same Nats-Msg-Id
    /// (default: each stream's duplicate window). On a cluster each hop of
    /// a live change waits this long before its commit; KV and object-store
    /// clients write without msg-ids unless the application sets one, so
    /// `0s` is exact for them.
    #[arg(long, value_parser = humantime::parse_duration, help_heading = "Publishers")]
    pub retry_horizon: Option<Duration>,
    /// How many live changes in place run at once (1 to 16). Each copies its
    /// stream twice and keeps the server busy meanwhile: the default 1 keeps
    /// publishers' stalls at the single change's (docs/benchmarks.md).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16), help_heading = "Limits and timeouts")]
    pub parallel: u16,
    /// How long a runner's lease lasts without renewal.
    #[arg(long, value_parser = parse_lease_ttl, default_value = "30s", help_heading = "Limits and timeouts")]
    pub lease_ttl: Duration,
    /// The longest a durable stays paused without ack progress (see `run
    /// --max-pause`).
    #[arg(long, value_parser = parse_max_pause, default_value = "5s", help_heading = "Limits and timeouts")]
    pub max_pause: Duration,
    /// With --yes: write the fleet's report, every asset's action, outcome
    /// and time and each hop's figures, also when the apply fails: HTML
    /// (self-contained), or JSON when FILE ends in .json; repeatable.
    #[arg(long, value_name = "FILE", requires = "yes", help_heading = "Output")]
    pub report: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The stream the consumer reads.
    pub stream: String,
    /// The durable consumer to watch.
    #[arg(long)]
    pub consumer: String,
    /// Time between reads (e.g. 1s, 250ms).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub interval: Duration,
    /// Reads the stalled and stopped rules look back over.
    #[arg(long, default_value_t = 5)]
    pub window: usize,
    /// Stop after this many reads (default: until Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics while watching
    /// (e.g. 127.0.0.1:9477); nothing is served without it.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A migration id (FROM.TO); all migrations when omitted.
    pub id: Option<String>,
}

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// The migration id (FROM.TO), as `status` lists it.
    pub id: String,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The migration id (FROM.TO).
    pub id: String,
    /// How long the rollback's lease lasts without renewal (another runner
    /// may take over after this if the rollback dies).
    #[arg(long, value_parser = parse_lease_ttl, default_value = "30s")]
    pub lease_ttl: Duration,
    /// Accepted as by every command that changes something; a rollback asks
    /// nothing (it is refused wherever it could not be exact).
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["migration", "from"])))]
pub struct VerifyArgs {
    /// The migration id (FROM.TO, see `status`).
    #[arg(long, value_name = "ID", conflicts_with_all = ["from", "to"])]
    pub migration: Option<String>,
    /// The stream the consumers left (with --to: the migration FROM.TO).
    #[arg(long, requires = "to")]
    pub from: Option<String>,
    /// The stream they moved to.
    #[arg(long, requires = "from")]
    pub to: Option<String>,
    /// Only this consumer (repeatable; default: every consumer the migration moved).
    #[arg(long)]
    pub consumer: Vec<String>,
    /// Also check the applications' audit records (docs/audit.md): a stream
    /// name, or a subject a stream captures.
    #[arg(long, value_name = "SUBJECT_OR_STREAM")]
    pub audit: Option<String>,
    /// How many offending messages to list per kind (all are counted).
    #[arg(long, default_value_t = 20)]
    pub first: usize,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The stream to inspect.
    pub stream: String,
    /// Only these consumers (default: all).
    #[arg(long)]
    pub consumer: Vec<String>,
}

/// How B gets A's messages: `source` (B sources A; sequences renumbered,
/// checkpoints translated), `mirror` (B mirrors A and is promoted at the
/// commit point, 2.12+; sequences kept) or `dual-write` (B has subjects of
/// its own; publishers following docs/protocol.md write both streams, then B
/// only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StrategyArg {
    Source,
    Mirror,
    DualWrite,
}

/// How the consumers' position is handed over: `drain` (pause, settle, move;
/// any application), `fence` (no stop of consumption; applications follow
/// docs/protocol.md) or `rolling` (a fence that splits versions: a rolling
/// upgrade to --new-version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    Drain,
    Fence,
    Rolling,
}

impl Command {
    /// Refuses, before anything connects, what a command does not do, the
    /// same way in every command (bad input, exit 2).
    pub fn check_available(&self) -> Result<(), String> {
        match self {
            Command::Plan(a) => rolling_flags(&a.plan, &a.more, None),
            Command::Run(a) => rolling_flags(&a.plan, &a.more, Some(a)),
            // The demo's scenario and its proof are built for strategies
            // source and dual-write.
            Command::Demo(a) if a.strategy == StrategyArg::Mirror => Err(
                "the demo runs strategy source or dual-write; try --strategy mirror with `run` on your own streams"
                    .into(),
            ),
            Command::Demo(a) if a.strategy == StrategyArg::DualWrite && a.mode != ModeArg::Drain => Err(
                "--strategy dual-write has its own consumer handoff (old and new side by side, guarded by msg-id): leave --mode out"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}

/// `--new-version` and `--proceed` belong to a rolling upgrade: given with
/// another mode they would be ignored, and the run would do something else
/// than asked.
fn rolling_flags(p: &PlanArgs, more: &PlanMoreArgs, run: Option<&RunArgs>) -> Result<(), String> {
    let rolling = p.mode == ModeArg::Rolling;
    // A plan file or a journal says the mode: `run` itself refuses flags
    // that contradict it.
    let planned = run.is_some_and(|r| r.plan_file.is_some() || r.resume.is_some());
    if p.new_version.is_some() && !rolling && !planned {
        return Err(
            "--new-version is for a rolling upgrade: add --mode rolling, or drop --new-version"
                .into(),
        );
    }
    if run.is_some_and(|r| r.seal_when_idle.is_some() && !planned && !more.repoint_publishers) {
        return Err("--seal-when-idle is for a move across systems whose publishers are repointed: add --repoint-publishers (with --from-server or --from-context), or drop --seal-when-idle".into());
    }
    if run.is_some_and(|r| r.proceed && r.resume.is_none() && !rolling) {
        return Err("--proceed is for a rolling upgrade: use it with --mode rolling, or with --resume ID to go on with a run that waits (for instances, or for publishers repointed across systems)".into());
    }
    Ok(())
}

/// `plan`'s options: what moves and how, then the rest.
#[derive(Debug, Args)]
pub struct PlanCmdArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    #[command(flatten)]
    pub more: PlanMoreArgs,
}

#[derive(Debug, Args, Clone)]
pub struct PlanArgs {
    /// The stream consumers and publishers leave.
    #[arg(long, help_heading = "What moves")]
    pub from: Option<String>,
    /// The stream they move to (created by `run` if it does not exist).
    #[arg(long, help_heading = "What moves")]
    pub to: Option<String>,
    /// A durable consumer to move (repeatable).
    #[arg(long, help_heading = "What moves")]
    pub consumer: Vec<String>,
    /// Move every durable consumer of --from.
    #[arg(long, conflicts_with = "consumer", help_heading = "What moves")]
    pub all_consumers: bool,
    /// How B gets A's messages (`--strategy rolling` is read as `--mode
    /// rolling`).
    #[arg(long, value_enum, default_value = "source", help_heading = "Strategy and mode")]
    pub strategy: StrategyArg,
    /// How the consumers' position is handed over.
    #[arg(long, value_enum, default_value = "drain", help_heading = "Strategy and mode")]
    pub mode: ModeArg,
    /// --mode rolling: the application version (the instances' registered
    /// app_version) that reads the new durable; other versions stay on the old
    /// consumer until they are replaced.
    #[arg(
        long,
        value_name = "VERSION",
        required_if_eq("mode", "rolling"),
        help_heading = "Strategy and mode"
    )]
    pub new_version: Option<String>,
    /// JSON file with settings for the new stream, in the server's stream-config
    /// shape (e.g. {"storage":"memory","subjects":["orders.>"]}); durations in ns.
    #[arg(long, help_heading = "What moves")]
    pub to_config: Option<PathBuf>,
    /// State that publishers are stopped (needed on servers without consumer
    /// pause, before 2.11).
    #[arg(long, help_heading = "Publishers")]
    pub publishers_stopped: bool,
    /// How long publishers keep retrying a publish with the same Nats-Msg-Id
    /// (default: the old stream's duplicate window, which the new stream takes).
    #[arg(long, value_parser = humantime::parse_duration, help_heading = "Publishers")]
    pub retry_horizon: Option<Duration>,
    /// Give this stream new settings under its own name, live (`run`), or show
    /// how (`plan`): two mirror hops
    /// through a temporary stream, sequences and durables kept (2.12+). The
    /// settings come from --set and/or --to-config; --consumer names the
    /// durables (or --all-consumers). Its hops are drain mode (--mode is
    /// refused with it).
    #[arg(long, value_name = "STREAM", conflicts_with_all = ["from", "to", "strategy", "mode"], help_heading = "In place")]
    pub in_place: Option<String>,
    /// A new setting for --in-place, KEY=VALUE with the server's stream-config
    /// names (storage=memory, retention=limits, max_age=3600000000000);
    /// repeatable.
    #[arg(long, value_name = "KEY=VALUE", requires = "in_place", help_heading = "In place")]
    pub set: Vec<String>,
    /// The temporary stream of --in-place (default: <STREAM>_CUTOVER).
    #[arg(long, value_name = "STREAM", requires = "in_place", help_heading = "In place")]
    pub via: Option<String>,
}

/// The plan's options that are not about what moves: across-system
/// specifics, the monitoring endpoint, the plan file. Flattened after the
/// command's own options, so their headings come after those.
#[derive(Debug, Args, Clone, Default)]
pub struct PlanMoreArgs {
    /// The server's monitoring endpoint (its `http` setting, e.g.
    /// http://127.0.0.1:8222): plan reads its disk sync setting there (varz)
    /// and warns when acknowledged messages may be on no disk yet.
    #[arg(long, value_name = "URL", help_heading = "Connection")]
    pub monitor: Option<String>,
    /// Across systems: the prefix under which B's side reaches A's
    /// `$JS.API.CONSUMER.>` (default `$JS.<A's domain>.API`; across accounts,
    /// the `to` of B's account's service import).
    #[arg(long, value_name = "PREFIX", help_heading = "Across systems")]
    pub from_api: Option<String>,
    /// Across accounts: the deliver prefix A's account exports to B's (A's
    /// messages come back on `PREFIX.>`).
    #[arg(long, value_name = "PREFIX", requires = "from_api", help_heading = "Across systems")]
    pub from_deliver: Option<String>,
    /// Across systems, where publishes do not cross the boundary: the
    /// operator repoints the publishers to the target side. B then takes
    /// the subjects there beside A once the consumers moved, and the run
    /// waits for the go-ahead (`run --resume ID --proceed`) before it seals
    /// A (docs/cross-system.md).
    #[arg(long, help_heading = "Across systems")]
    pub repoint_publishers: bool,
    /// Also write the plan to this file (TOML, or JSON if it ends in .json) for
    /// review; `run --plan FILE` executes it.
    #[arg(long, help_heading = "Output")]
    pub out: Option<PathBuf>,
}
