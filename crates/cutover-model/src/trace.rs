//! A counterexample as one line per action: who acted, what it did, and
//! what changed in the world.

use crate::env::Action;
use crate::world::{Cons, Held, Msg, Pause, State, Stream};
use crate::CutoverModel;
use stateright::Path;
use std::fmt::Write;

pub fn render(m: &CutoverModel, path: &Path<State, Action>) -> String {
    let steps = path.clone().into_vec();
    let mut out = String::new();
    for (i, w) in steps.windows(2).enumerate() {
        let (before, action) = (&w[0].0, w[0].1.expect("an action between two states"));
        let after = &w[1].0;
        let what = what(before, action);
        let changes = changes(before, after).join("; ");
        let _ = writeln!(out, "{:>3}. {:<10} {:<34} {}", i + 1, action.actor(), what, changes);
    }
    if let Some((last, _)) = steps.last() {
        let _ = writeln!(out, "     end: {}", summary(m, last));
    }
    out
}

fn what(s: &State, a: Action) -> String {
    match a {
        Action::Publish { lose } => {
            let to = if s.a.owns { "A" } else { "B" };
            let lost = if lose { ", answer lost" } else { "" };
            format!("publishes m{} to {to}{lost}", s.next_pub + 1)
        }
        Action::Source => "copies A's next message".into(),
        Action::Fetch { new } => {
            format!("fetches from the {} durable", if new { "new" } else { "old" })
        }
        Action::Nak => held(s.held, "naks (above F)"),
        Action::Follow => "reads the route".into(),
        Action::AckFence => "acknowledges the fence".into(),
        Action::PauseLapses => "the old durable's pause lapses".into(),
        Action::HorizonPasses => "a retry horizon passes since B's window was raised".into(),
        Action::FenceAckTimeout => "fence acknowledgement timeout".into(),
        Action::Process => held(s.held, "processes"),
        Action::Ack => held(s.held, "acks"),
        Action::Die => held(s.held, "dies holding"),
        Action::Step => format!("step {:?}", s.pc),
        Action::CutPause => "cuts the pause: old durable resumed".into(),
        Action::SettleTimeout => "drain settle timeout".into(),
        Action::RollbackTimeout => "rollback settle timeout".into(),
        Action::CommitFails => "the commit fails in its window".into(),
        Action::JournalFails { applied } => format!(
            "journal stops answering at {:?} ({})",
            s.pc,
            if applied { "write applied, answer lost" } else { "write refused" }
        ),
        Action::Crash => format!("runner killed (before {:?})", s.pc),
        Action::Guard => "compensates the dead runner".into(),
        Action::Resume => "run --resume".into(),
        Action::Rollback => "rollback".into(),
    }
}

fn held(h: Option<Held>, verb: &str) -> String {
    match h {
        Some(h) => format!(
            "{verb} m{} ({} durable, seq {})",
            h.id + 1,
            if h.new { "new" } else { "old" },
            h.seq
        ),
        None => verb.into(),
    }
}

fn msgs(v: &[Msg]) -> String {
    let m: Vec<String> = v
        .iter()
        .map(|m| match m.origin {
            0 => format!("m{}", m.id + 1),
            o => format!("m{}<{o}", m.id + 1),
        })
        .collect();
    format!("[{}]", m.join(" "))
}

fn stream(name: &str, a: &Stream, b: &Stream, out: &mut Vec<String>) {
    if a.msgs != b.msgs {
        out.push(format!("{name} {}", msgs(&b.msgs)));
    }
    if a.owns != b.owns {
        out.push(format!("{name} {} the subjects", if b.owns { "holds" } else { "released" }));
    }
    if a.sealed != b.sealed {
        out.push(format!("{name} sealed"));
    }
    if a.dedup != b.dedup {
        out.push(format!("{name} window {}", if b.dedup { "set" } else { "off" }));
    }
}

fn seqs(mask: u16) -> String {
    let v: Vec<String> = (1..16).filter(|s| mask & (1 << s) != 0).map(|s| s.to_string()).collect();
    format!("{{{}}}", v.join(","))
}

fn cons(name: &str, a: &Cons, b: &Cons, out: &mut Vec<String>) {
    if a.exists != b.exists {
        out.push(match b.exists {
            true => format!("{name} durable created at {}", b.start),
            false => format!("{name} durable deleted"),
        });
        return;
    }
    if !b.exists {
        return;
    }
    if a.paused != b.paused {
        let p = match b.paused {
            Pause::No => "running",
            Pause::Drain => "paused (drain)",
            Pause::Forever => "paused for good",
        };
        out.push(format!("{name} {p}"));
    }
    if a.next != b.next {
        out.push(format!("{name} delivered={}", b.delivered()));
    }
    if a.pending != b.pending {
        out.push(format!("{name} ack-pending {}", seqs(b.pending)));
    }
    if a.ack_floor() != b.ack_floor() {
        out.push(format!("{name} ack floor {}", b.ack_floor()));
    }
    if a.due != b.due {
        out.push(format!("{name} due for redelivery {}", seqs(b.due)));
    }
    if a.exhausted != b.exhausted {
        out.push(format!("{name} exhausted {}", seqs(b.exhausted)));
    }
}

fn changes(a: &State, b: &State) -> Vec<String> {
    let mut out = vec![];
    if a.next_pub != b.next_pub {
        out.push(format!("m{} acknowledged to the publisher", a.next_pub + 1));
    }
    stream("A", &a.a, &b.a, &mut out);
    match (&a.b, &b.b) {
        (None, Some(_)) => out.push(format!(
            "B created, sourcing A, window {}",
            if b.b.as_ref().unwrap().s.dedup { "set" } else { "off" }
        )),
        (Some(_), None) => out.push("B deleted".into()),
        (Some(x), Some(y)) => {
            stream("B", &x.s, &y.s, &mut out);
            if x.sourced != y.sourced && x.s.msgs == y.s.msgs {
                out.push(format!("B dropped origin {} as a duplicate", y.sourced));
            }
            if x.sourcing != y.sourcing {
                out.push("B's source removed".into());
            }
        }
        (None, None) => {}
    }
    cons("old", &a.old, &b.old, &mut out);
    cons("new", &a.new, &b.new, &mut out);
    if (a.route, a.rstate, a.route_f) != (b.route, b.rstate, b.route_f) {
        out.push(match b.route {
            true => format!("route {:?} (F={})", b.rstate, b.route_f),
            false => "route deleted".into(),
        });
    }
    if (a.knows, a.fence_acked) != (b.knows, b.fence_acked) {
        out.push(format!("worker sees {:?}, fence acked {}", b.knows, b.fence_acked));
    }
    for id in 0..crate::world::MAX_MSGS {
        if (a.proc_old[id], a.proc_new[id]) != (b.proc_old[id], b.proc_new[id]) {
            out.push(format!("m{} processed {}x", id + 1, b.processings(id as u8)));
        }
    }
    let (ja, jb) = (&a.journal, &b.journal);
    if ja.phase != jb.phase {
        out.push(format!("journal phase {}", jb.phase.0.as_str()));
    }
    if ja.created_b != jb.created_b {
        out.push("journal created_b".into());
    }
    if ja.c != jb.c || ja.checkpoint != jb.checkpoint || ja.b_start != jb.b_start {
        out.push(format!(
            "journal consumer {:?} F={:?} start={:?}",
            jb.c.0, jb.checkpoint, jb.b_start
        ));
    }
    if a.run != b.run {
        out.push(format!("run {:?}", b.run));
    }
    out
}

fn summary(m: &CutoverModel, s: &State) -> String {
    let mut v = vec![format!("run {:?}, journal {}", s.run, s.journal.phase.0.as_str())];
    if let Some(id) = crate::properties::lost(s) {
        if m.terminal(s) {
            v.push(format!("m{} acknowledged and never processed", id + 1));
        }
    }
    if let Some(id) = crate::properties::twice(s) {
        v.push(format!("m{} processed {} times", id + 1, s.processings(id)));
    }
    for p in [
        crate::properties::paused(s),
        crate::properties::rollback(s),
        crate::properties::journal(m, s),
    ]
    .into_iter()
    .flatten()
    {
        v.push(p.to_string());
    }
    if m.terminal(s) && (s.next_pub as usize) < m.cfg.msgs as usize {
        v.push(format!("m{} never accepted", s.next_pub + 1));
    }
    v.join("; ")
}
