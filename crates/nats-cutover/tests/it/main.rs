//! The one integration-test binary (one link, a module per area). Every test
//! here runs against a real nats-server started for it by the test kit.

mod apply;
mod auth;
mod bad_input;
mod bridge;
mod buckets;
mod changing;
mod chaos;
mod clients;
mod cluster;
mod common;
mod crash_sweep;
mod cross;
mod demo;
mod demo_server;
mod dual;
mod fence;
mod inspect;
mod journal_records;
mod metrics;
mod output;
mod plan;
mod pyapps;
mod refusals;
mod report;
mod run;
mod safety;
mod same_name;
mod security;
mod server_faults;
mod tls;
mod verify;
#[path = "../../../cutover-nats/tests/it/verify_fixture.rs"]
mod verify_fixture;
mod versions;
mod watch;
