//! The audit: the applications' own records of what they processed, compared
//! with what was published (the comparison itself is in [`super::finish`]).

use super::report::{AuditReport, Counts, Kind, Offender, Offenders};
use super::ConsumerSpec;
use crate::audit::AuditRecord;
use roaring::RoaringTreemap;

/// The audit: what the applications say they processed.
#[derive(Debug, Clone)]
pub struct AuditSide {
    names: Vec<String>,
    from: String,
    to: String,
    b_last_seq: u64,
    pub(super) seen_a: Vec<RoaringTreemap>,
    pub(super) seen_b: Vec<RoaringTreemap>,
    pub(super) counts: Vec<Counts>,
    pub(super) offenders: Offenders,
    pub records: u64,
    pub other_consumers: u64,
    pub unreadable: u64,
    pub after_snapshot: u64,
}

impl AuditSide {
    /// `b_last_seq`: B's last sequence when verification began; records of later
    /// messages are not judged.
    pub fn new(
        specs: &[ConsumerSpec],
        from: &str,
        to: &str,
        b_last_seq: u64,
        first_n: usize,
    ) -> Self {
        Self {
            names: specs.iter().map(|s| s.name.clone()).collect(),
            from: from.into(),
            to: to.into(),
            b_last_seq,
            seen_a: vec![RoaringTreemap::new(); specs.len()],
            seen_b: vec![RoaringTreemap::new(); specs.len()],
            counts: vec![Counts::default(); specs.len()],
            offenders: Offenders::new(first_n),
            records: 0,
            other_consumers: 0,
            unreadable: 0,
            after_snapshot: 0,
        }
    }

    /// An audit message that is not a record this version can read.
    pub fn unreadable(&mut self) {
        self.records += 1;
        self.unreadable += 1;
    }

    pub fn record(&mut self, r: &AuditRecord) {
        self.records += 1;
        let Some(i) = self.names.iter().position(|n| *n == r.consumer) else {
            self.other_consumers += 1;
            return;
        };
        let (set, a_seq, b_seq) = if r.stream == self.from {
            (&mut self.seen_a[i], Some(r.seq), None)
        } else if r.stream == self.to {
            if r.seq > self.b_last_seq {
                self.after_snapshot += 1;
                return;
            }
            (&mut self.seen_b[i], None, Some(r.seq))
        } else {
            self.unknown_stream(i, r);
            return;
        };
        if !set.insert(r.seq) {
            self.duplicated(i, r, a_seq, b_seq);
        }
    }

    /// A record of a message of neither stream.
    fn unknown_stream(&mut self, i: usize, r: &AuditRecord) {
        self.counts[i].bump(Kind::AuditUnknown, 1);
        self.offenders.push(Offender {
            kind: Kind::AuditUnknown,
            consumer: Some(r.consumer.clone()),
            a_seq: None,
            b_seq: None,
            msg_id: r.msg_id.clone(),
            subject: None,
            detail: format!(
                "processed by {} a message of stream {:?} {}, which is neither {} nor {}",
                r.instance, r.stream, r.seq, self.from, self.to
            ),
        });
    }

    /// A second record of the same message.
    fn duplicated(&mut self, i: usize, r: &AuditRecord, a_seq: Option<u64>, b_seq: Option<u64>) {
        self.counts[i].bump(Kind::AuditDuplicated, 1);
        self.offenders.push(Offender {
            kind: Kind::AuditDuplicated,
            consumer: Some(r.consumer.clone()),
            a_seq,
            b_seq,
            msg_id: r.msg_id.clone(),
            subject: None,
            detail: format!(
                "processed more than once (again by {} version {}{})",
                r.instance,
                r.version,
                r.via
                    .as_ref()
                    .map(|v| format!(", read from {} {}", v.stream, v.seq))
                    .unwrap_or_default()
            ),
        });
    }

    /// The report's audit section; `source`: the stream (or subject) read.
    pub(super) fn report(self, source: String) -> AuditReport {
        AuditReport {
            source,
            records: self.records,
            other_consumers: self.other_consumers,
            unreadable: self.unreadable,
            after_snapshot: self.after_snapshot,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::*;
    use crate::audit::{AuditRecord, Via, Worker};

    fn rec(consumer: &str, stream: &str, seq: u64, via: (&str, u64)) -> AuditRecord {
        let w = Worker { consumer: consumer.into(), instance: "i".into(), version: "v".into() };
        let h = (stream == "A" && via.0 == "B").then(|| format!("A {seq}"));
        AuditRecord::new(
            Via { stream: via.0.into(), seq: via.1, delivered: 1 },
            h.as_deref(),
            None,
            &w,
        )
    }

    #[test]
    fn the_audit_names_lost_doubled_and_unknown_messages() {
        let a = a_msgs(10);
        let mut b = b_copy(&a);
        b.push(B { seq: 11, subject: "s.3".into(), origin: None, id: None, ts: 0 });
        b.push(B { seq: 12, subject: "s.0".into(), origin: None, id: None, ts: 0 });
        let mut s = spec("all", &[], 5, 6);
        s.b_ack_floor = Some(11);
        let specs = [s];
        let feed = |records: &[AuditRecord]| {
            let mut asd = ASide::new(&specs);
            a.iter().for_each(|(s, subj)| asd.message(*s, subj));
            let mut bsd = BSide::new(&specs, 5, None);
            for m in &b {
                let origin = m.origin.map(Origin::A).unwrap_or(Origin::Direct);
                bsd.message(&BMsg {
                    seq: m.seq,
                    subject: &m.subject,
                    origin,
                    msg_id: None,
                    ts_ms: 0,
                });
            }
            let mut au = AuditSide::new(&specs, "A", "B", 12, 5);
            records.iter().for_each(|r| au.record(r));
            au.record(&rec("someone-else", "A", 1, ("A", 1)));
            finish(
                asd,
                bsd,
                Some(au),
                &Facts {
                    migration: "A.B".into(),
                    from: "A".into(),
                    to: "B".into(),
                    a_first_seq: 1,
                    a_last_seq: 10,
                    b_last_seq: 12,
                    audit_source: Some("AUDIT".into()),
                    evicted_by_b: vec![],
                },
                5,
            )
        };
        let mut good: Vec<AuditRecord> = (1..=5).map(|i| rec("all", "A", i, ("A", i))).collect();
        good.extend((6..=10).map(|i| rec("all", "A", i, ("B", i))));
        good.push(rec("all", "B", 11, ("B", 11)));
        // B's 12 is after the new durable's ack floor: not expected yet.
        let r = feed(&good);
        assert!(r.holds, "{:#?}", r.offenders);
        assert_eq!(r.consumers[0].audit_pending, Some(1));
        assert_eq!(r.audit.as_ref().unwrap().other_consumers, 1);
        let mut bad = good.clone();
        bad.remove(6); // A's 7, processed via B: missing
        bad.push(rec("all", "A", 5, ("B", 5))); // A's 5 processed again, from B
        bad.push(rec("all", "B", 3, ("B", 3))); // a B sequence that is no direct publish
        let r = feed(&bad);
        assert_eq!(
            (r.summary.audit_lost, r.summary.audit_duplicated, r.summary.audit_unknown),
            (1, 1, 1),
            "{:#?}",
            r.offenders
        );
        let lost = r.offenders.iter().find(|o| o.kind == Kind::AuditLost).unwrap();
        assert_eq!(lost.a_seq, Some(7));
        let dup = r.offenders.iter().find(|o| o.kind == Kind::AuditDuplicated).unwrap();
        assert_eq!(dup.a_seq, Some(5));
    }
}
