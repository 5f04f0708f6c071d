//! The real rules have no counterexample at a small bound (both strategies,
//! with and without a guard); each mutant has one; each finding the model
//! made (docs/model.md, *Found*) is closed, and found again by its mutant.

use crate::config::Config;
use crate::mutants::Mutant;
use crate::properties::{REACHED, RECOVERED, TWICE};
use cutover_core::plan::Strategy;
use cutover_core::version::ServerVersion;

fn clean(cfg: Config) -> crate::Outcome {
    let out = crate::check(cfg.clone(), None);
    let found: Vec<String> = out.violations.iter().map(|(n, t)| format!("{n}\n{t}")).collect();
    assert!(found.is_empty(), "{cfg:?}:\n{}", found.join("\n"));
    out
}

#[test]
fn the_real_rules_have_no_counterexample() {
    let out = clean(Config::small());
    assert!(out.unique > 100_000, "{} states", out.unique);
    // Not vacuous: every moment worth reaching was reached, the guard's
    // two actions among them.
    let mut want = REACHED.to_vec();
    want.extend(&RECOVERED[2..]);
    want.sort();
    assert_eq!(out.reached, want);
}

#[test]
fn nor_with_a_mirror_or_without_a_guard() {
    clean(Config { strategy: Strategy::Mirror, ..Config::small() });
    // Without a guard, and with the journal's bucket stopping at the
    // checkpoint's or the intent's write (bits 1 and 2).
    let out = clean(Config { guard: false, journal_faults: 1 | 2, ..Config::small() });
    // A resume weighed a journaled checkpoint both ways.
    for r in &RECOVERED[..2] {
        assert!(out.reached.contains(r), "not reached: {r}");
    }
}

/// The journal's bucket stopping at the `created` write (bit 4): the run
/// failed with the old durable paused for good and no route to the new one
/// until `run --resume` (docs/model.md, *Found*, finding 4). The route is
/// written before that write now, so the run fails with the applications
/// routed to the new durable, which exists: no property is broken.
#[test]
fn a_lost_created_write_leaves_the_route_to_the_new_durable() {
    clean(Config { journal_faults: 4, ..Config::small() });
}

fn fence_small() -> Config {
    Config::small_fence()
}

/// Finding 2 (docs/model.md): closed by holding an old delivery to the
/// fence known when it was fetched; `every_mutant_has_a_counterexample`
/// keeps it found without that rule (`fence-at-handling`).
#[test]
fn a_rollback_in_fence_mode_does_not_process_a_delivery_fetched_under_the_fence() {
    let cfg = Config {
        strategy: Strategy::Mirror,
        server: ServerVersion::new(2, 15, 1),
        ..fence_small()
    };
    clean(cfg);
}

/// Finding 3 (docs/model.md): a fence-mode rollback holds the old durable
/// from its settle until the instance followed the route's deletion, so a
/// message above F is not nak'd there until `max_deliver` gives it up;
/// `every_mutant_has_a_counterexample` keeps it found without that
/// (`rollback-unheld`).
#[test]
fn a_fence_rollback_gives_no_message_up_to_max_deliver() {
    clean(Config { lost_answers: 0, max_deliver: 1, ..fence_small() });
}

#[test]
fn nor_in_fence_mode() {
    // Without a lost answer here (a third of the states in a debug build);
    // `--ci` checks fence mode with one.
    clean(Config { lost_answers: 0, ..fence_small() });
}

#[test]
fn every_mutant_has_a_counterexample() {
    for m in Mutant::ALL {
        // A window raised over B's copies is a sourcing B's on 2.14+.
        let server = match m {
            Mutant::NoHorizonWait => ServerVersion::new(2, 15, 1),
            _ => Config::small().server,
        };
        let strategies: &[Strategy] = match m {
            _ if m.fence_only() => &[],
            Mutant::NoHorizonWait => &[Strategy::Source],
            _ => &[Strategy::Source, Strategy::Mirror],
        };
        for &strategy in strategies {
            let cfg = Config { strategy, server, ..Config::small() };
            let out = crate::check_until(cfg, Some(m), true);
            assert!(!out.violations.is_empty(), "mutant {} not caught ({strategy:?})", m.name());
        }
        // Finding 2's shape: a rollback that resets the old durable (2.14+),
        // after a mirror (so that finding 1 does not come first).
        let fence = match m {
            Mutant::FenceAtHandling => Config {
                strategy: Strategy::Mirror,
                server: ServerVersion::new(2, 15, 1),
                ..fence_small()
            },
            _ => Config { server, ..fence_small() },
        };
        let out = crate::check_until(fence, Some(m), true);
        assert!(!out.violations.is_empty(), "mutant {} not caught in fence mode", m.name());
    }
}

/// Finding 1 (docs/model.md): from 2.14 a sourcing B is created without a
/// window and given A's once catch-up begins; what it sourced before
/// records no msg-id, so a retry of such a message that arrives after the
/// commit would be stored again. The commit waits a retry horizon after
/// that raise (`recheck::window_holds`, the model's `HorizonPasses`): no
/// counterexample; without the wait (`no-horizon-wait`), that one. A mirror
/// keeps its window from the create: not affected.
#[test]
fn a_sourcing_b_on_2_14_commits_a_retry_horizon_after_its_window() {
    let v215 = ServerVersion::new(2, 15, 1);
    clean(Config { server: v215, ..Config::small() });
    let cfg = Config { server: v215, ..Config::small() };
    let out = crate::check_until(cfg, Some(Mutant::NoHorizonWait), true);
    let names: Vec<&str> = out.violations.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, [TWICE]);
    clean(Config { server: v215, strategy: Strategy::Mirror, ..Config::small() });
}
