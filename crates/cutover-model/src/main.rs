//! `cutover-model`: checks the protocol's model (see docs/model.md).
//!
//! ```text
//! cutover-model [--mutant NAME|list] [--brief] [--first] [--threads N] [--small] [--no-guard] [--track-recovery] [--journal-fault settled|creating|created]... [--depth N] [--strategy source|mirror] [--mode drain|fence] [--max-deliver 0|1|2]
//!               [--server X.Y.Z] [--msgs N] [--lost N] [--crashes N] [--deaths N]
//!               [--ops N] [--commit-failures N]
//! ```
//! Exit 0 when the expected outcome happens: no counterexample for the
//! real rules, at least one for a mutant; 1 otherwise; 2 on bad input.

use cutover_core::plan::{Mode, Strategy};
use cutover_core::version::ServerVersion;
use cutover_model::config::Config;
use cutover_model::mutants::Mutant;
use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!("usage: cutover-model [--mutant NAME|list] [--brief] [--first] [--threads N] [--small] [--no-guard] [--track-recovery] [--journal-fault settled|creating|created]... [--depth N] [--strategy source|mirror] [--mode drain|fence] [--max-deliver 0|1|2] [--server X.Y.Z] [--msgs N] [--lost N] [--crashes N] [--deaths N] [--ops N] [--commit-failures N]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    // The base configuration first (--small, --mode fence), whatever the
    // order: every other option changes it.
    let given: Vec<String> = std::env::args().skip(1).collect();
    let fence = given.windows(2).any(|w| w[0] == "--mode" && w[1] == "fence");
    let mut cfg = match (given.iter().any(|a| a == "--small"), fence) {
        (false, false) => Config::ci(),
        (false, true) => Config::fence(),
        (true, false) => Config::small(),
        (true, true) => Config::small_fence(),
    };
    let mut mutant = None;
    let mut brief = false;
    // Stop at the first counterexample (a mutant's check needs only one).
    let mut first = false;
    let mut list = false;
    let mut threads = 1;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next();
        match a.as_str() {
            "--mutant" => match value().as_deref() {
                Some("list") => list = true,
                Some(name) => match Mutant::parse(name) {
                    Some(m) => mutant = Some(m),
                    None => {
                        eprintln!("no mutant {name:?}; `--mutant list` lists them");
                        return ExitCode::from(2);
                    }
                },
                None => return usage(),
            },
            "--depth" => match value().and_then(|v| v.parse().ok()) {
                Some(d) => cfg.depth = d,
                None => return usage(),
            },
            "--msgs" | "--lost" | "--crashes" | "--deaths" | "--ops" | "--commit-failures" => {
                let Some(n) = value().and_then(|v| v.parse::<u8>().ok()) else { return usage() };
                *match a.as_str() {
                    "--msgs" => &mut cfg.msgs,
                    "--lost" => &mut cfg.lost_answers,
                    "--crashes" => &mut cfg.crashes,
                    "--deaths" => &mut cfg.worker_deaths,
                    "--ops" => &mut cfg.operator_acts,
                    _ => &mut cfg.commit_failures,
                } = n;
            }
            "--mode" => match value().as_deref() {
                Some("drain") => cfg.mode = Mode::Drain,
                Some("fence") => cfg.mode = Mode::Fence,
                _ => return usage(),
            },
            "--max-deliver" => match value().and_then(|v| v.parse().ok()) {
                Some(n) => cfg.max_deliver = n,
                None => return usage(),
            },
            "--strategy" => match value().as_deref() {
                Some("source") => cfg.strategy = Strategy::Source,
                Some("mirror") => cfg.strategy = Strategy::Mirror,
                _ => return usage(),
            },
            "--brief" => brief = true,
            "--first" => first = true,
            "--threads" => match value().and_then(|v| v.parse().ok()) {
                Some(n) => threads = n,
                None => return usage(),
            },
            "--no-guard" => cfg.guard = false,
            "--track-recovery" => cfg.track_recovery = true,
            "--journal-fault" => match value().as_deref() {
                Some("settled") => cfg.journal_faults |= 1,
                Some("creating") => cfg.journal_faults |= 2,
                Some("created") => cfg.journal_faults |= 4,
                _ => return usage(),
            },
            "--small" => {}
            "--server" => match value().and_then(|v| ServerVersion::parse(&v)) {
                Some(v) => cfg.server = v,
                None => return usage(),
            },
            _ => return usage(),
        }
    }
    if list {
        // Every mutant; with `--mode drain` given, only those that apply to it.
        let drain = given.windows(2).any(|w| w[0] == "--mode" && w[1] == "drain");
        for m in Mutant::ALL.into_iter().filter(|m| !(drain && m.fence_only())) {
            println!("{:<24} {}", m.name(), m.describe());
        }
        return ExitCode::SUCCESS;
    }
    if mutant.is_some_and(|m| m.fence_only()) && cfg.mode != Mode::Fence {
        eprintln!("that mutant breaks a rule of fence mode: add --mode fence");
        return ExitCode::from(2);
    }
    let what = mutant.map(|m| format!("mutant {}", m.name())).unwrap_or("the real rules".into());
    println!("checking {what}: {cfg:?}");
    let out = cutover_model::check_with(cfg, mutant, first, threads);
    println!(
        "states explored: {}, unique states: {}, depth reached: {}, time: {:.2} s",
        out.states,
        out.unique,
        out.depth,
        out.elapsed.as_secs_f64()
    );
    println!("reached: {}", out.reached.join(", "));
    for (name, trace) in &out.violations {
        match brief {
            true => println!("counterexample: {name} ({} actions)", trace.lines().count() - 1),
            false => println!("\nCOUNTEREXAMPLE: {name}\n{trace}"),
        }
    }
    let expected = match mutant {
        None => out.violations.is_empty(),
        Some(_) => !out.violations.is_empty(),
    };
    match (mutant, expected) {
        (None, true) => println!("OK: no counterexample"),
        (None, false) => println!("FAILED: the real rules have a counterexample"),
        (Some(m), true) => println!(
            "OK: mutant {} caught ({} propert(ies) violated)",
            m.name(),
            out.violations.len()
        ),
        (Some(m), false) => println!("FAILED: mutant {} was not caught", m.name()),
    }
    if expected {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
