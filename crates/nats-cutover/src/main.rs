//! `nats-cutover`: the thin binary. Parsing, dispatch and the one place where
//! errors become exit codes live in [`app`]; the work lives in the library crates.

#[macro_use]
mod out;

mod app;
mod cli;
mod cmd;
mod error;
mod exit;
mod guard;
mod metrics;
mod render;
mod report;
mod term;

fn main() {
    std::process::exit(app::main());
}
