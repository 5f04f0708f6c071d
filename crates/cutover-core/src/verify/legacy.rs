//! Reading plans written by older versions.

use crate::compat::Verdict;
use crate::plan::Plan;

/// The old durable's filters on A, as the plan recorded them. Plans written
/// before [`crate::plan::ConsumerPlan::a_filters`] existed have them only in the finding that
/// compared them with B's (`from`: the filters joined by commas, or `(all)`).
pub fn a_filters_of(plan: &Plan, consumer: &str) -> Option<Vec<String>> {
    let cp = plan.consumers.iter().find(|c| c.name == consumer)?;
    if let Some(f) = &cp.a_filters {
        return Some(f.clone());
    }
    let scope = format!("consumer {consumer}");
    let f = plan.findings.iter().find(|f| {
        f.scope == scope && f.setting == "filter_subject" && f.verdict != Verdict::Unsafe
    })?;
    Some(if f.from == "(all)" { vec![] } else { f.from.split(',').map(String::from).collect() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_plans_give_their_a_filters_through_the_finding() {
        use crate::plan::{build, PlanRequest, ServerFacts};
        use crate::version::ServerVersion;
        let facts = ServerFacts {
            version: ServerVersion::new(2, 15, 1),
            a_raw: serde_json::json!({"config": {"name": "A", "subjects": ["o.>"], "duplicate_window": 120_000_000_000i64}, "state": {}}),
            b_raw: None,
            consumers_raw: vec![
                serde_json::json!({"name": "C", "config": {"durable_name": "C", "filter_subjects": ["o.a", "o.b"]}}),
                serde_json::json!({"name": "D", "config": {"durable_name": "D"}}),
            ],
            other_consumers: vec![],
            downstream: vec![],
            account: None,
            checks: Default::default(),
        };
        let req = PlanRequest {
            from: "A".into(),
            to: "B".into(),
            consumers: vec!["C".into(), "D".into()],
            all_consumers: false,
            strategy: Default::default(),
            mode: Default::default(),
            to_config: None,
            publishers_stopped: false,
            retry_horizon: None,
            in_place: None,
            new_version: None,
            external: None,
            repoint_publishers: false,
            across: false,
        };
        let mut p = build(&req, &facts).unwrap();
        assert_eq!(a_filters_of(&p, "C"), Some(vec!["o.a".to_string(), "o.b".to_string()]));
        p.consumers.iter_mut().for_each(|c| c.a_filters = None);
        assert_eq!(a_filters_of(&p, "C"), Some(vec!["o.a".to_string(), "o.b".to_string()]));
        assert_eq!(a_filters_of(&p, "D"), Some(vec![]));
        assert_eq!(a_filters_of(&p, "E"), None);
    }
}
