//! The real rules have no counterexample at a small bound; each mutant has one.

use crate::config::Config;
use crate::mutants::Mutant;

#[test]
fn the_real_rules_have_no_counterexample() {
    let out = crate::check(Config::small(), None);
    let found: Vec<String> = out.violations.iter().map(|(n, t)| format!("{n}\n{t}")).collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
    assert!(out.unique > 1000, "{} states", out.unique);
    // Not vacuous: every moment worth reaching was reached.
    assert_eq!(out.reached, sorted(crate::properties::REACHED.to_vec()));
}

fn sorted(mut v: Vec<&'static str>) -> Vec<&'static str> {
    v.sort();
    v
}

#[test]
fn every_mutant_has_a_counterexample() {
    for m in Mutant::ALL {
        let out = crate::check(Config::small(), Some(m));
        assert!(!out.violations.is_empty(), "mutant {} not caught", m.name());
    }
}
