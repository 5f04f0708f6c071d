//! The plan: what `plan` prints and `run` executes.
//!
//! Built from what the adapter read (stream and consumer infos as the server's raw
//! JSON) and the operator's options. Pure: the same inputs always give the same
//! plan, and a plan with an unsafe finding is refused before the first write.
//!
//! The plan document (JSON via `--json`, TOML via `--out`) is versioned by
//! [`PLAN_FORMAT`]; fields are only ever added.
//!
//! # Layout
//! - `request`: what a plan is built from ([`PlanRequest`], [`ServerFacts`])
//!   and how building one fails ([`PlanError`]).
//! - `document`: the plan itself ([`Plan`], [`ConsumerPlan`], [`Step`]) and
//!   the in-place outline.
//! - `b_config`: B's configuration from A's raw JSON ([`b_config_from`]) and
//!   each new durable's ([`b_consumer_config`]).
//! - `build`: strategies `source` and `mirror`: the rules and the consumers.
//! - `checks`: rules on the request and on the server beyond A and B.
//! - `dual`: strategy `dual-write`'s plan.
//! - `steps`: the steps a plan lists.
//! - `settings`: settings asked for by name, and which need a migration.

mod b_config;
mod build;
mod checks;
mod document;
mod dual;
mod request;
mod settings;
mod steps;
#[cfg(test)]
mod tests;

pub use b_config::{
    b_config_from, b_consumer_config, carried_changes, carried_settings, handover_freeze_reason,
    CARRIED, FROM_KEY, HANDOVER_KEY,
};
pub use build::appeared_consumer;
pub use document::{copy_estimate, ConsumerPlan, InPlaceOutline, Plan, Step, PLAN_FORMAT};
pub use request::{
    ConfigCheck, External, InPlaceHop, Mode, PlanError, PlanRequest, ServerChecks, ServerFacts,
    Strategy, DEFAULT_RETRY_HORIZON,
};
pub use settings::{check_setting_names, check_setting_values, is_stream_setting, needs_migration};

/// The plan for `req` on the server `facts` describe: strategy
/// `dual-write`'s own, else the `source`/`mirror` plan.
pub fn build(req: &PlanRequest, facts: &ServerFacts) -> Result<Plan, PlanError> {
    match req.strategy {
        Strategy::DualWrite => dual::build(req, facts),
        _ => build::build(req, facts),
    }
}
