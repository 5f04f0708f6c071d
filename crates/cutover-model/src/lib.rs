//! A model of nats-cutover's protocol (strategies source and mirror, modes
//! drain and fence),
//! checked exhaustively to a bounded depth with stateright. The runner's
//! decisions are cutover-core's own functions (`decide`); the streams,
//! durables, publisher and worker are modelled after the server's rules.
//! docs/model.md says what is modelled, what is not, and the properties.
//!
//! - `config`: the bounds of a check; `world`: the state;
//! - `env`: the publisher, B's source, the worker; `runner`: the run's steps;
//! - `ops`: crashes, the guard, resume and rollback;
//! - `decide`: the calls into cutover-core; `properties`; `mutants`;
//! - `trace`: a counterexample as one line per action.

pub mod config;
pub mod decide;
pub mod env;
pub mod mutants;
mod ops;
pub mod properties;
mod runner;
#[cfg(test)]
mod tests;
pub mod trace;
pub mod world;

use config::Config;
use cutover_core::journal::{ConsumerPhase, Phase};
use decide::Rules;
use env::Action;
use mutants::Mutant;
use stateright::{Checker, HasDiscoveries, Model, Property};
use std::time::{Duration, Instant};
use world::{Cons, Cph, Jrnl, Local, Pc, Ph, Run, State, Stream, MAX_MSGS};

pub struct CutoverModel {
    pub cfg: Config,
    pub mutant: Option<Mutant>,
    pub rules: Rules,
}

impl CutoverModel {
    pub fn fence(&self) -> bool {
        self.cfg.mode == cutover_core::plan::Mode::Fence
    }

    pub fn new(cfg: Config, mutant: Option<Mutant>) -> Self {
        assert!((1..=MAX_MSGS as u8).contains(&cfg.msgs), "1 to {MAX_MSGS} messages");
        assert!(cfg.max_deliver <= 2, "max_deliver 0 (unlimited), 1 or 2");
        let rules = Rules::new(&cfg);
        CutoverModel { cfg, mutant, rules }
    }

    /// A's subjects held by A, its durable running, a journal just saved
    /// (phase planned) and the runner about to take its first step.
    pub fn init(&self) -> State {
        let mut s = State {
            next_pub: 0,
            a: Stream::new(true, true),
            b: None,
            old: Cons::new(1),
            new: Cons::gone(),
            route: false,
            rstate: world::Rs::None,
            route_f: 0,
            knows: world::Rs::None,
            known_f: 0,
            fence_acked: false,
            held: None,
            proc_old: [0; MAX_MSGS],
            proc_new: [0; MAX_MSGS],
            journal: Jrnl {
                phase: Ph(Phase::Planned),
                created_b: false,
                c: Cph(ConsumerPhase::Waiting),
                checkpoint: None,
                b_start: None,
                evidence: None,
            },
            run: Run::Running,
            pc: Pc::Idle,
            local: Local::default(),
            caught_up_at: None,
            b_ours: false,
            gave_up: 0,
            dup_in_b: false,
            window_since: false,
            pub_old: false,
            unguarded: false,
            seen: 0,
            commit_failures_left: self.cfg.commit_failures,
            journal_faults_left: (self.cfg.journal_faults != 0) as u8,
            lost_left: self.cfg.lost_answers,
            crashes_left: self.cfg.crashes,
            deaths_left: self.cfg.worker_deaths,
            cuts_left: self.cfg.pause_cuts,
            ops_left: self.cfg.operator_acts,
        };
        self.drive(&mut s);
        s
    }
}

impl Model for CutoverModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.init()]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        self.env_actions(s, out);
        self.runner_actions(s, out);
        self.ops_actions(s, out);
    }

    fn next_state(&self, s: &State, a: Action) -> Option<State> {
        let mut n = s.clone();
        match a {
            Action::Publish { .. }
            | Action::Source
            | Action::Fetch { .. }
            | Action::Process
            | Action::Ack
            | Action::Nak
            | Action::Die
            | Action::Follow
            | Action::AckFence
            | Action::PauseLapses
            | Action::HorizonPasses => self.env_apply(&mut n, a),
            Action::Step
            | Action::CutPause
            | Action::SettleTimeout
            | Action::RollbackTimeout
            | Action::FenceAckTimeout
            | Action::JournalFails { .. }
            | Action::CommitFails => self.runner_apply(&mut n, a),
            Action::Crash | Action::Guard | Action::Resume | Action::Rollback => {
                self.ops_apply(&mut n, a)
            }
        }
        Some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}

/// What one check found.
pub struct Outcome {
    pub states: usize,
    pub unique: usize,
    pub depth: usize,
    pub elapsed: Duration,
    /// Each violated property with its counterexample, rendered.
    pub violations: Vec<(&'static str, String)>,
    /// The `sometimes` properties (moments the check must reach, so that
    /// it is not vacuous) that were reached.
    pub reached: Vec<&'static str>,
}

/// Checks the model (BFS to the configured depth, every property).
pub fn check(cfg: Config, mutant: Option<Mutant>) -> Outcome {
    check_until(cfg, mutant, false)
}

/// [`check`], stopping at the first counterexample with `first`.
pub fn check_until(cfg: Config, mutant: Option<Mutant>, first: bool) -> Outcome {
    check_with(cfg, mutant, first, 1)
}

/// [`check_until`] on `threads` threads.
pub fn check_with(cfg: Config, mutant: Option<Mutant>, first: bool, threads: usize) -> Outcome {
    let depth = cfg.depth;
    let model = CutoverModel::new(cfg, mutant);
    let started = Instant::now();
    let mut checker = model.checker().target_max_depth(depth).threads(threads.max(1));
    if first {
        checker = checker.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = checker.spawn_bfs().join();
    let elapsed = started.elapsed();
    let mut violations = vec![];
    let mut reached = vec![];
    for (name, path) in checker.discoveries() {
        match properties::REACHED.contains(&name) || properties::RECOVERED.contains(&name) {
            true => reached.push(name),
            false => violations.push((name, trace::render(checker.model(), &path))),
        }
    }
    violations.sort_by_key(|(n, _)| *n);
    reached.sort();
    Outcome {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        elapsed,
        violations,
        reached,
    }
}
