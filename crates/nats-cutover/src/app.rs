//! Parse, dispatch, and turn errors into exit codes: the only place that does.

use crate::cli::{Cli, Command};
use crate::cmd;
use crate::error::CliError;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use cutover_core::bucket::Kind;

pub fn main() -> i32 {
    let args = match crate::cli::spell_rolling(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => return fail(std::env::args_os().any(|a| a == "--json"), &CliError::Flag(e)),
    };
    let matches = match Cli::command().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => return bad_arguments(e),
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The demo uses a server only when told so on the command line, never
    // because NATS_URL or NATS_CONTEXT happen to be set.
    let server_given = ["server", "context"].iter().any(|id| given_on_command_line(&matches, id));
    let json = cli.json;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("NATS_CUTOVER_LOG"))
        .with_writer(std::io::stderr)
        .with_ansi(crate::term::detect(json).log_colour)
        .init();
    if let Err(e) = cli.command.check_available() {
        return fail(json, &CliError::Flag(e));
    }
    if let Some(runner) = crate::guard::requested() {
        return crate::guard::main(runner, cli);
    }
    crate::guard::spawn(&cli.command);
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(json, &CliError::Runtime(e)),
    };
    let command = cmd::inplace::same_name_across(&cli.conn, cli.command);
    let result = rt.block_on(async move {
        match command {
            Command::Inspect(a) => cmd::inspect::run(&cli.conn, json, a).await,
            Command::Plan(a) if a.plan.in_place.is_some() => {
                cmd::inplace::plan(&cli.conn, json, &a).await
            }
            Command::Plan(a) => cmd::plan::run(&cli.conn, json, a).await,
            Command::Run(a) if a.plan.in_place.is_some() => {
                cmd::inplace::run(&cli.conn, json, a).await
            }
            Command::Run(a) => cmd::run::run(&cli.conn, json, a).await,
            Command::Kv(a) => cmd::inplace::bucket(&cli.conn, json, Kind::Kv, a).await,
            Command::Obj(a) => cmd::inplace::bucket(&cli.conn, json, Kind::Obj, a).await,
            Command::Apply(a) => cmd::apply::run(&cli.conn, json, a).await,
            Command::Status(a) => cmd::run::status(&cli.conn, json, a).await,
            Command::Rollback(a) => cmd::run::rollback(&cli.conn, json, a).await,
            Command::Forget(a) => cmd::run::forget(&cli.conn, json, a).await,
            Command::Verify(a) => cmd::verify::run(&cli.conn, json, a).await,
            Command::Demo(a) => cmd::demo::run(&cli.conn, server_given, json, a).await,
            Command::Watch(a) => cmd::watch::run(&cli.conn, json, a).await,
        }
    });
    crate::guard::ended();
    match result {
        Ok(code) => code.code(),
        // A request the server dropped for a permissions violation is named
        // as such, whichever path made it (cutover_nats::denied).
        Err(CliError::Nats(e)) => fail(json, &CliError::Nats(cutover_nats::denied::explain(e))),
        Err(e) => fail(json, &e),
    }
}

/// clap's usage errors (exit 2, as every bad input) also as JSON on stdout
/// when `--json` is among the arguments, as docs/json.md promises; help and
/// version are printed as clap prints them.
fn bad_arguments(e: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || !std::env::args().any(|a| a == "--json")
    {
        e.exit();
    }
    let msg = e.render().to_string();
    let msg =
        msg.trim().trim_start_matches("error: ").lines().next().unwrap_or_default().to_string();
    let code = crate::exit::ExitCode::BadInput.code();
    outln!("{}", serde_json::json!({ "error": msg, "exit_code": code }));
    let _ = e.print();
    code
}

/// Reports a failure (also as JSON on stdout with --json); returns its exit
/// code, the one [`CliError::exit_code`] gives it.
fn fail(json: bool, e: &CliError) -> i32 {
    let (code, msg) = (e.exit_code().code(), e.message());
    if json {
        outln!("{}", serde_json::json!({ "error": msg, "exit_code": code }));
    }
    errln!("error: {msg}");
    code
}

/// A global option's value came from the command line (before or after the
/// subcommand), not from its environment variable.
fn given_on_command_line(m: &ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(ValueSource::CommandLine)
        || m.subcommand().is_some_and(|(_, sub)| given_on_command_line(sub, id))
}
