//! cutover-nats' integration-test binary (one link, a module per area): the
//! engine and verify called as a library, each test against a real
//! nats-server started for it by the test kit. The CLI's tests are in
//! crates/nats-cutover/tests/it/.

mod common;
mod pause;
mod translate;
mod verify;
mod verify_fixture;
