//! The plan document (`Plan`, versioned by [`PLAN_FORMAT`]; fields are only
//! ever added): what `plan` prints and `run` executes, and the in-place
//! outline of its two hops.

use super::request::{External, InPlaceHop, Mode, Strategy};
use crate::compat::{Finding, Verdict};
use crate::quiescence::QuiescentBound;
use crate::version::{Features, ServerVersion};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::time::Duration;

pub const PLAN_FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerPlan {
    pub name: String,
    pub push: bool,
    /// The old durable's filters on A; empty: all. `None` in plans written
    /// before this field existed (verify then reads them from the findings).
    #[serde(default)]
    pub a_filters: Option<Vec<String>>,
    /// Filters on B (A's filters mapped through B's source transforms); empty: all.
    pub b_filters: Vec<String>,
    /// The new durable's configuration on B without the start sequence, which is
    /// only known at the checkpoint.
    pub b_config: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub n: u32,
    pub title: String,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub format: u32,
    pub from: String,
    pub to: String,
    pub strategy: Strategy,
    pub mode: Mode,
    pub server_version: ServerVersion,
    pub features: Features,
    pub relies_on: Vec<String>,
    pub b_exists: bool,
    /// B's configuration while it sources A (no subjects).
    pub b_config: Value,
    /// The subjects B takes at the commit point.
    pub b_final_subjects: Vec<String>,
    pub consumers: Vec<ConsumerPlan>,
    pub findings: Vec<Finding>,
    pub checkpoint_rule: String,
    /// Why no timer is needed (or, with `quiescence`, where one is).
    #[serde(default)]
    pub timer_note: String,
    pub steps: Vec<Step>,
    /// Only where a timer is unavoidable (no pause: publishers stopped).
    pub quiescence: Vec<(String, QuiescentBound)>,
    pub publishers_stopped: bool,
    pub retry_horizon_ms: u64,
    /// Settings the promotion of a mirror sets with the same update (those a
    /// mirror may not have, and an in-place migration's final touches).
    #[serde(default)]
    pub promote_with: Map<String, Value>,
    /// Which hop of an in-place migration this plan is, if it is one.
    #[serde(default)]
    pub in_place: Option<InPlaceHop>,
    /// Mode rolling: the application version that reads the new durable.
    #[serde(default)]
    pub new_version: Option<String>,
    /// A move across systems: how B reaches A (B's source carries it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<External>,
    /// Strategy mirror where the server drops a mirror's duplicate window
    /// (a clustered JetStream): once B caught up and the consumers moved, B
    /// is handed over from mirroring A to sourcing A with the window, in a
    /// short freeze (A releases its subjects until B holds exactly A's last
    /// message and its source is set up), and the commit waits one retry
    /// horizon after it (docs/in-place.md, "On a cluster"). Also strategy
    /// mirror with the publishers split across systems, on any server
    /// ([`Plan::split_publishers`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handover: bool,
    /// In place, hop 1: the settings hop 2 gives the stream itself rather
    /// than the temporary stream copying them (memory storage: the
    /// temporary stream is the only copy between the hops).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub in_place_then: Map<String, Value>,
    /// A move across systems without `external` (strategy dual-write): A is
    /// on the source side, B on the target side, and B never reads A.
    /// `run`, `verify` and `rollback` need both sides' connections.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub across: bool,
    /// Hop 2 of a move across systems that keeps the stream's name (A on
    /// the source side, the temporary stream and then B, named as A, on the
    /// target side): the routes end on B under that name instead of being
    /// deleted as an in-place hop 2 does on one system (there a follower
    /// without a route is home again; across, home is the old system).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keeps_name_across: bool,
    /// A's ingest rate when planned (B must receive at least as fast).
    #[serde(default)]
    pub a_ingest: Option<crate::catchup::IngestRate>,
    /// A's values, when planned, of the settings B took as A had them
    /// (`plan::CARRIED`): one A changes later is carried to B before the
    /// commit.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub carried: Map<String, Value>,
    /// No unsafe finding.
    pub safe: bool,
}

impl Plan {
    pub fn unsafe_findings(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.verdict == Verdict::Unsafe)
    }

    /// Across systems, publishers repointed by the operator where publishes
    /// cross in neither direction (the adapter's probes said so): B takes
    /// A's subjects on the target side after the consumers moved, while it
    /// still sources A, and A keeps its own (no conflict: they are on two
    /// systems), so a publisher on either side is served and nothing it
    /// publishes is lost; the run waits for the operator's go-ahead (or A
    /// idle for `--seal-when-idle`) before it seals A. A mirror takes no
    /// subjects while it mirrors (a same-name move's hop 1 is one), and
    /// records no msg-ids (stream.go `processJetStreamMsg`: no check for a
    /// mirror): it is handed over first ([`Plan::handover`]: B becomes a
    /// stream sourcing A from A's next sequence, with the window), and B
    /// takes the subjects one retry horizon after that, so a retry of a
    /// publish A stored before the hand-over cannot reach B (it is retried
    /// into A, the only stream that has the subjects until then). B then
    /// numbers what is published into it itself: its sequences are A's up
    /// to the split. Refused (unsafe) where that cannot be exact:
    /// without an explicit duplicate window B would not match a retry sent
    /// once into A and once into B (a sourced and a direct copy share msg-id
    /// dedup only then: server stream.go `processJetStreamMsg` checks the
    /// msg-id of sourced messages too, and records ids only while a window
    /// is set); on 2.10-2.12.5 such a sourced duplicate stalls sourcing.
    pub fn split_publishers(&mut self) {
        let Some(ext) = self.external.as_mut() else { return };
        ext.split_publishers = true;
        let mut refuse = |setting: &str, from: String, reason: &str| {
            self.findings.push(Finding {
                scope: "plan".into(),
                setting: setting.into(),
                from,
                to: "publishers split".into(),
                verdict: Verdict::Unsafe,
                reason: reason.into(),
            })
        };
        let mirror = self.strategy == Strategy::Mirror;
        // A mirror gets the window with its hand-over (steps/handover.rs).
        if !mirror && self.b_config["duplicate_window"].as_i64().unwrap_or(0) <= 0 {
            refuse("duplicate_window", "0".into(), "publishers repointed across systems need B's duplicate window set explicitly: a retry sent once into A and once into B lands once only then; drop duplicate_window 0 from --to-config");
        }
        if self.features.duplicate_sourced_msg_id_stalls_source {
            refuse("server", self.server_version.to_string(), "publishers repointed across systems can send a msg-id into B that also reaches it from A, and on 2.10-2.12.5 such a duplicate stalls sourcing: upgrade the target side to 2.12.8+, or let publishes cross (export/import B's subjects)");
        }
        self.safe = self.safe && self.unsafe_findings().next().is_none();
        let keep = self.steps.iter().take_while(|s| !s.title.starts_with("commit point")).count();
        self.steps.truncate(keep);
        let hand_over = mirror && !self.handover;
        self.handover |= mirror;
        let (a, b, subjects) = (&self.from, &self.to, &self.b_final_subjects);
        let mut add = |title: &str, detail: String| {
            let n = self.steps.len() as u32 + 1;
            self.steps.push(Step { n, title: title.into(), detail });
        };
        let horizon = std::time::Duration::from_millis(self.retry_horizon_ms);
        if hand_over {
            add("hand over", format!("{b}, a mirror, takes no subjects and records no msg-ids, so before the split it becomes a stream sourcing {a}: update {a}: subjects released (a freeze of about 0.2 s: publishes get no responders and are retried); wait until {b} holds exactly {a}'s last message X-1; one update of {b}: mirror removed, source {a} from X with a duplicate window of at least the retry horizon ({horizon:?}); wait until its source is set up; {a} takes its subjects back. {b} takes the subjects one retry horizon after that, so a retry of a publish {a} stored before X is retried into {a}, which has its id"));
        }
        let numbered = match mirror {
            true => format!(" {b}'s sequences are {a}'s up to here; from here {b} numbers the messages itself (a direct publish takes the next one), so `verify` matches the later ones by their origin in {a}."),
            false => String::new(),
        };
        let after = match mirror {
            true => format!(", once a retry horizon ({horizon:?}) passed since the hand-over"),
            false => String::new(),
        };
        add("B takes the subjects (publishers split)", format!("update {b}: subjects {subjects:?} on the target side while it still sources {a}{after}; {a} keeps its subjects on its side.{numbered} From here repoint the publishers to the target side, any time: those repointed publish into {b}, those not yet publish into {a} and reach {b} through the source, and a retry sent once into each lands once ({b}'s duplicate window). No rollback from here (publishers may be on either side): only going on"));
        add("wait for the publishers", format!("the run waits, reporting every few seconds how many messages {a} stored meanwhile, until the operator confirms that every publisher was repointed: `nats-cutover run --resume {a}.{b} --proceed` (from any terminal; the waiting runner sees it), or with --seal-when-idle D until {a} stored nothing for D"));
        add("seal A and finish sourcing", format!("update {a}: subjects [] (a publisher still on its side gets no responders from here), wait until {b} holds every message {a} stored ({a}'s last sequence the same in two reads), seal {a}, remove {b}'s source"));
        add(
            "retire",
            format!("delete the old consumers on {a}; keep sealed {a} unless --delete-old"),
        );
    }

    /// Why the plan is unsafe, in one line: `scope setting: reason; ...`.
    pub fn unsafe_reasons(&self) -> String {
        let reasons: Vec<String> = self
            .unsafe_findings()
            .map(|f| format!("{} {}: {}", f.scope, f.setting, f.reason))
            .collect();
        reasons.join("; ")
    }
}

/// An in-place migration as `plan` shows it: hop 1 in full (judged before
/// anything is written), hop 2 in outline (planned when hop 1 is done), and
/// what the rebuild copies.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InPlaceOutline {
    pub stream: String,
    pub via: String,
    pub hop1: Plan,
    /// Messages and bytes each hop copies (A's now; more arrive meanwhile).
    pub copies_messages: u64,
    pub copies_bytes: u64,
    /// Both copies, from the mirror rate measured on this project's machine
    /// kind ([`copy_estimate`]).
    pub estimate_ms: u64,
    /// The copies read A through a paced durable (2.14+, a limits stream,
    /// the default copy window): publishes wait less behind them.
    #[serde(default)]
    pub paced_copy: bool,
    /// The copy is replicated (A's or the new setting's replicas above 1).
    #[serde(default)]
    pub replicated_copy: bool,
}

/// How long one mirror copy of `messages` messages and `bytes` bytes takes,
/// from the rates measured on this project's machine kind (2 cores,
/// loopback; docs/benchmarks.md): a per-message cost (1M messages of 128
/// bytes: 2.1-2.2 s a hop, R1) plus a per-byte cost (100k messages of 4 KiB:
/// 1.2-1.9 s a hop), times what was measured for the copy's kind: read
/// through the paced durable (`paced`, 2.14+ with the default copy window:
/// 8.5 s against 6.9 s for 1M messages in place, so 5/4), and replicated
/// (`replicas` above 1: R3 copies took 4 to 5 times the R1 estimate, 9/2).
/// Busier servers take longer; the run shows the real progress.
pub fn copy_estimate(messages: u64, bytes: u64, replicas: i64, paced: bool) -> Duration {
    const MSGS_PER_S: u64 = 450_000;
    const BYTES_PER_S: u64 = 220_000_000;
    let ms = messages.saturating_mul(1000) / MSGS_PER_S + bytes.saturating_mul(1000) / BYTES_PER_S;
    let ms = if paced { ms.saturating_mul(5) / 4 } else { ms };
    let ms = if replicas > 1 { ms.saturating_mul(9) / 2 } else { ms };
    Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::copy_estimate;

    /// The estimate of one hop's copy of 1M messages of 128 bytes against
    /// what was measured (docs/benchmarks.md): R1 unpaced about 3 s, the
    /// paced copy a quarter longer, R3 (both hops 28-42 s) four and a half
    /// times the R1 figure.
    #[test]
    fn the_copy_estimate_follows_the_measured_kinds() {
        let ms =
            |replicas, paced| copy_estimate(1_000_000, 128_000_000, replicas, paced).as_millis();
        assert_eq!(ms(1, false), 2222 + 581);
        assert_eq!(ms(1, true), (2222 + 581) * 5 / 4);
        assert_eq!(ms(3, true), (2222 + 581) * 5 / 4 * 9 / 2);
        let both_r3 = 2 * ms(3, true);
        assert!((28_000..=42_000).contains(&both_r3), "{both_r3} ms");
    }
}
