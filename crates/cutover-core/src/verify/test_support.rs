//! What the verification tests share: consumer specs, streams A and B as
//! lists, and the whole check run over them.

use super::*;

pub(super) fn settled(f: u64) -> Option<Settled> {
    Some(Settled {
        delivered_stream_seq: f,
        ack_floor_stream_seq: f,
        num_ack_pending: 0,
        num_pending: 0,
        paused: true,
    })
}

pub(super) fn spec(name: &str, a_filters: &[&str], f: u64, start: u64) -> ConsumerSpec {
    ConsumerSpec {
        name: name.into(),
        a_filters: a_filters.iter().map(|s| s.to_string()).collect(),
        b_filters: a_filters.iter().map(|s| s.to_string()).collect(),
        checkpoint: f,
        b_start: start,
        journal_b_start: start,
        evidence: settled(f),
        fence: false,
        fence_settled: None,
        retired_state: None,
        publishers_stopped: false,
        b_ack_floor: None,
    }
}

/// A: seq i on subject `s.{i % 4}`; B: a one-to-one copy.
pub(super) fn a_msgs(n: u64) -> Vec<(u64, String)> {
    (1..=n).map(|i| (i, format!("s.{}", i % 4))).collect()
}

#[derive(Clone, Debug)]
pub(super) struct B {
    pub(super) seq: u64,
    pub(super) subject: String,
    pub(super) origin: Option<u64>,
    pub(super) id: Option<String>,
    pub(super) ts: i64,
}

pub(super) fn b_copy(a: &[(u64, String)]) -> Vec<B> {
    a.iter()
        .map(|(s, subj)| B {
            seq: *s,
            subject: subj.clone(),
            origin: Some(*s),
            id: Some(format!("m-{s}")),
            ts: 100 + *s as i64,
        })
        .collect()
}

pub(super) fn run(
    specs: &[ConsumerSpec],
    a: &[(u64, String)],
    b: &[B],
    slip: Option<SlipWindow>,
) -> (Report, Vec<SlipCandidate>) {
    let mut asd = ASide::new(specs);
    for (s, subj) in a {
        asd.message(*s, subj);
    }
    let mut bsd = BSide::new(specs, 5, slip);
    for m in b {
        let origin = match m.origin {
            Some(o) => Origin::A(o),
            None => Origin::Direct,
        };
        bsd.message(&BMsg {
            seq: m.seq,
            subject: &m.subject,
            origin,
            msg_id: m.id.as_deref(),
            ts_ms: m.ts,
        });
    }
    let cands = bsd.slip_candidates().to_vec();
    for c in &cands {
        bsd.confirm_slip(c);
    }
    let facts = Facts {
        migration: "A.B".into(),
        from: "A".into(),
        to: "B".into(),
        a_first_seq: a.first().map(|x| x.0).unwrap_or(1),
        a_last_seq: a.last().map(|x| x.0).unwrap_or(0),
        b_last_seq: b.last().map(|x| x.seq).unwrap_or(0),
        audit_source: None,
        evicted_by_b: vec![],
    };
    (finish(asd, bsd, None, &facts, 5), cands)
}

pub(super) fn only(r: &Report, k: Kind, n: u64) {
    let mut want = Counts { checked: r.summary.checked, ..Default::default() };
    want.bump(k, n);
    assert_eq!(r.summary, want, "{:#?}", r.offenders);
    assert_eq!(r.offenders.iter().filter(|o| o.kind == k).count() as u64, n.min(5));
    assert!(!r.holds);
}

/// The counted path: A's selected set taken from B's origins when their
/// number equals A's count, as `run` does it but without reading A.
pub(super) fn run_counted(
    specs: &[ConsumerSpec],
    a: &[(u64, String)],
    a_range: (u64, u64),
    b: &[B],
) -> (Report, Vec<AKnown>) {
    let mut asd = ASide::new(specs);
    let deleted: Vec<u64> =
        (a_range.0..=a_range.1).filter(|s| !a.iter().any(|x| x.0 == *s)).collect();
    asd.holds(a_range.0, a_range.1, &deleted);
    let idx: Vec<usize> = (0..specs.len()).filter(|i| countable(&specs[*i])).collect();
    idx.iter().for_each(|i| asd.defer(*i));
    let mut bsd = BSide::new(specs, 5, None);
    for m in b {
        let origin = m.origin.map(Origin::A).unwrap_or(Origin::Direct);
        bsd.message(&BMsg {
            seq: m.seq,
            subject: &m.subject,
            origin,
            msg_id: m.id.as_deref(),
            ts_ms: m.ts,
        });
    }
    let unequal: Vec<usize> = idx
        .iter()
        .copied()
        .filter(|i| {
            !asd.counted(
                *i,
                &bsd,
                a_range.0,
                a_range.1,
                &deleted,
                a.iter().filter(|x| selects(&specs[*i].a_filters, &x.1)).count() as u64,
            )
        })
        .collect();
    if !unequal.is_empty() {
        asd.feed_only(&unequal);
        a.iter().for_each(|(s, subj)| asd.message(*s, subj));
    }
    let known = asd.known.clone();
    let facts = Facts {
        migration: "A.B".into(),
        from: "A".into(),
        to: "B".into(),
        a_first_seq: a_range.0,
        a_last_seq: a_range.1,
        b_last_seq: b.last().map(|x| x.seq).unwrap_or(0),
        audit_source: None,
        evicted_by_b: vec![],
    };
    (finish(asd, bsd, None, &facts, 5), known)
}
