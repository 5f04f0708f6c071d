//! A's side of verification: which of A's sequences each consumer's filter on
//! A selects, read from A, known from A's state, or counted.

use super::bside::BSide;
use super::report::AKnown;
use super::ConsumerSpec;
use crate::subject::selects;
use roaring::RoaringTreemap;

/// A's side: which of A's sequences each consumer's filter selects.
#[derive(Debug, Clone)]
pub struct ASide {
    filters: Vec<Vec<String>>,
    pub(super) selected: Vec<RoaringTreemap>,
    pub(super) known: Vec<AKnown>,
    /// The consumers whose sets a read of A fills.
    feed: Vec<bool>,
    pub read: u64,
}

/// Can consumer `spec`'s selected messages of A be counted instead of read
/// ([`ASide::counted`])? Only when it filters on both sides and every subject
/// its filter on B selects is one its filter on A selects: then a sourced B
/// message it selects (B keeps A's subject; the adapter also requires that no
/// subject transform applies) is one A's filter selects, if A holds it.
pub fn countable(spec: &ConsumerSpec) -> bool {
    !spec.a_filters.is_empty()
        && !spec.b_filters.is_empty()
        && spec
            .b_filters
            .iter()
            .all(|b| spec.a_filters.iter().any(|a| crate::subject::covers(a, b)))
}

impl ASide {
    pub fn new(specs: &[ConsumerSpec]) -> Self {
        let n = specs.len();
        Self {
            filters: specs.iter().map(|s| s.a_filters.clone()).collect(),
            selected: vec![RoaringTreemap::new(); n],
            known: vec![AKnown::Read; n],
            feed: vec![true; n],
            read: 0,
        }
    }

    /// One message of A, in sequence order.
    pub fn message(&mut self, seq: u64, subject: &str) {
        self.read += 1;
        for ((f, set), feed) in self.filters.iter().zip(self.selected.iter_mut()).zip(&self.feed) {
            if *feed && selects(f, subject) && set.try_push(seq).is_err() {
                set.insert(seq);
            }
        }
    }

    /// Does any consumer select by subject? If none does, A's selected
    /// messages are simply the ones it holds ([`ASide::holds`]): no read needed.
    pub fn needs_subjects(&self) -> bool {
        self.filters.iter().any(|f| !f.is_empty())
    }

    /// Must A be read, for some consumer's set?
    pub fn reads(&self) -> bool {
        self.feed.iter().any(|f| *f)
    }

    /// The subjects to read A with: the filters of every consumer a read fills,
    /// or everything (`None`) when one of them selects everything.
    pub fn read_filters(&self) -> Option<Vec<String>> {
        let fed = || self.filters.iter().zip(&self.feed).filter(|(_, f)| **f).map(|(x, _)| x);
        if fed().any(|f| f.is_empty()) {
            return None;
        }
        let mut all: Vec<String> = fed().flatten().cloned().collect();
        all.sort();
        all.dedup();
        Some(all)
    }

    /// A holds every sequence from `first` to `last` but `deleted`: what each
    /// consumer that selects everything selects. Only for such consumers (a
    /// read of A no longer fills them).
    pub fn holds(&mut self, first: u64, last: u64, deleted: &[u64]) {
        for (i, (f, set)) in self.filters.iter().zip(self.selected.iter_mut()).enumerate() {
            if f.is_empty() {
                if first >= 1 && first <= last {
                    set.insert_range(first..=last);
                    for d in deleted {
                        set.remove(*d);
                    }
                }
                self.known[i] = AKnown::State;
                self.feed[i] = false;
            }
        }
    }

    /// Consumer `i` is to be counted after B is read ([`ASide::counted`]), not
    /// filled by a read of A.
    pub fn defer(&mut self, i: usize) {
        self.known[i] = AKnown::Counted;
        self.feed[i] = false;
    }

    /// Consumer `i` ([`countable`]; deferred), with A holding every sequence
    /// from `first` to `last` but `deleted`, and `count` of them selected by its
    /// filter on A (A unchanged meanwhile). B, read, gives the origins it
    /// selects; those A holds are each selected on A (countable), so they are a
    /// subset of A's selected set, and with as many elements they are all of it.
    /// Then A's set is exactly them and true is returned. Otherwise (something
    /// is lost, or B holds more than A selects) false: A must be read for this
    /// consumer (fed only with [`ASide::feed_only`]) to name the offenders.
    pub fn counted(
        &mut self,
        i: usize,
        b: &BSide,
        first: u64,
        last: u64,
        deleted: &[u64],
        count: u64,
    ) -> bool {
        let mut held = b.cons[i].origins.clone();
        if first > last || first == 0 {
            held.clear();
        } else {
            held.remove_range(..first);
            held.remove_range(last + 1..);
            for d in deleted {
                held.remove(*d);
            }
        }
        if held.len() == count {
            self.selected[i] = held;
            self.known[i] = AKnown::Counted;
            true
        } else {
            self.known[i] = AKnown::Read;
            false
        }
    }

    /// A read of A fills only these consumers' sets.
    pub fn feed_only(&mut self, which: &[usize]) {
        for (i, f) in self.feed.iter_mut().enumerate() {
            *f = which.contains(&i);
        }
    }

    /// Bytes the sets take serialized (a close measure of their heap size).
    pub fn set_bytes(&self) -> u64 {
        self.selected.iter().map(|s| s.serialized_size() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::*;
    use proptest::prelude::*;

    #[test]
    fn a_stream_read_and_a_stream_known_from_its_state_give_the_same_sets() {
        let specs = [spec("all", &[], 3, 4)];
        let a: Vec<(u64, String)> =
            a_msgs(20).into_iter().filter(|(s, _)| ![1, 7, 20].contains(s)).collect();
        let mut read = ASide::new(&specs);
        a.iter().for_each(|(s, subj)| read.message(*s, subj));
        let mut known = ASide::new(&specs);
        assert!(!known.needs_subjects());
        known.holds(2, 20, &[7, 20]);
        assert_eq!(read.selected, known.selected);
        let f = ASide::new(&[spec("a", &["s.1", "s.2"], 0, 1), spec("b", &["s.1"], 0, 1)]);
        assert_eq!(f.read_filters(), Some(vec!["s.1".to_string(), "s.2".to_string()]));
        assert!(ASide::new(&[spec("a", &["s.1"], 0, 1), spec("b", &[], 0, 1)])
            .read_filters()
            .is_none());
    }

    #[test]
    fn a_counted_filter_finds_what_a_read_one_finds() {
        let a = a_msgs(40);
        let specs = [
            spec("eu", &["s.1"], 9, 10),
            spec("two", &["s.0", "s.3"], 8, 9),
            spec("all", &[], 9, 10),
        ];
        let (r, known) = run_counted(&specs, &a, (1, 40), &b_copy(&a));
        assert!(r.holds, "{:#?}", r.offenders);
        assert_eq!(known, vec![AKnown::Counted, AKnown::Counted, AKnown::State]);
        assert_eq!(r.consumers[0].a_selected, 10);
        // A message lost from B: the count differs, A is read, the loss named.
        let mut b = b_copy(&a);
        b.retain(|m| m.seq != 13);
        let (r, known) = run_counted(&specs, &a, (1, 40), &b);
        assert_eq!(known[0], AKnown::Read);
        assert_eq!(r.consumers[0].counts.lost, 1);
        assert_eq!(r.offenders.iter().find(|o| o.kind == Kind::Lost).unwrap().a_seq, Some(13));
        // Lost 13, and 17 deleted from A after it was sourced (B holds it):
        // equal sizes, but the deleted origin is no message A holds, so the
        // count still differs and both are named.
        let a2: Vec<(u64, String)> = a.iter().filter(|x| x.0 != 17).cloned().collect();
        let (r, known) = run_counted(&specs[..1], &a2, (1, 40), &b);
        assert_eq!(known[0], AKnown::Read);
        assert_eq!(
            (r.consumers[0].counts.lost, r.consumers[0].counts.extra),
            (1, 1),
            "{:#?}",
            r.offenders
        );
        // A duplicate and an origin beyond A's last: the set of origins A
        // holds still equals A's, the duplicate is found on B's side and the
        // unknown origin is extra, as when A is read.
        let mut b = b_copy(&a);
        let mut dup = b[12].clone();
        dup.seq = 41;
        b.push(dup);
        b.push(B { seq: 42, subject: "s.1".into(), origin: Some(77), id: None, ts: 0 });
        let (r, known) = run_counted(&specs[..1], &a, (1, 40), &b);
        assert_eq!(known[0], AKnown::Counted);
        assert_eq!(
            (
                r.consumers[0].counts.duplicated,
                r.consumers[0].counts.extra,
                r.consumers[0].counts.lost
            ),
            (1, 1, 0),
            "{:#?}",
            r.offenders
        );
        // A B filter wider than A's: not countable.
        let mut s = spec("eu", &["s.1"], 9, 10);
        s.b_filters = vec!["s.*".into()];
        assert!(!countable(&s));
        s.b_filters = vec!["s.1".into()];
        s.a_filters = vec!["s.*".into()];
        assert!(countable(&s));
    }

    proptest! {
        /// With B's copies keeping A's subjects (what sourcing without a
        /// transform does), counting A's selected messages finds exactly what
        /// reading A does.
        #[test]
        fn counting_a_gives_the_report_reading_a_gives(
            n in 1u64..200,
            deleted_in_a in prop::collection::vec(0u64..200, 0..8),
            mutations in prop::collection::vec((0u8..3, 0usize..300, 0usize..300), 0..6),
            filter in prop::sample::select(vec![vec!["s.1".to_string()], vec!["s.0".to_string(), "s.3".to_string()], vec!["s.*".to_string()]]),
            fpick in 0u64..200,
            skew in -2i64..3,
            a_first in 1u64..4,
        ) {
            let a: Vec<(u64, String)> = a_msgs(n).into_iter().filter(|(s, _)| !deleted_in_a.contains(s) && *s >= a_first).collect();
            let mut b: Vec<B> = b_copy(&a_msgs(n));
            for (op, i, j) in mutations {
                if b.is_empty() { break; }
                let (i, j) = (i % b.len(), j % b.len());
                match op {
                    0 => { b.remove(i); }
                    1 => { let m = b[i].clone(); b.insert(j, m); }
                    _ => { b.insert(j, B { seq: 0, subject: format!("s.{}", i % 4), origin: None, id: None, ts: 0 }); }
                }
            }
            for (k, m) in b.iter_mut().enumerate() { m.seq = k as u64 + 1; }
            let f = fpick % (n + 1);
            let start = (f as i64 + 1 + skew).max(1) as u64;
            let mut s = spec("c", &[], f, start);
            s.a_filters = filter.clone();
            s.b_filters = filter;
            let (read, _) = {
                let mut asd = ASide::new(std::slice::from_ref(&s));
                a.iter().for_each(|(q, subj)| asd.message(*q, subj));
                let mut bsd = BSide::new(std::slice::from_ref(&s), 5, None);
                for m in &b {
                    let origin = m.origin.map(Origin::A).unwrap_or(Origin::Direct);
                    bsd.message(&BMsg { seq: m.seq, subject: &m.subject, origin, msg_id: m.id.as_deref(), ts_ms: m.ts });
                }
                let facts = Facts { migration: "A.B".into(), from: "A".into(), to: "B".into(), a_first_seq: a_first, a_last_seq: n, b_last_seq: b.last().map(|x| x.seq).unwrap_or(0), audit_source: None, evicted_by_b: vec![] };
                (finish(asd, bsd, None, &facts, 5), ())
            };
            let (counted, _) = run_counted(std::slice::from_ref(&s), &a, (a_first, n), &b);
            let strip = |r: &Report| { let mut r = r.clone(); r.consumers.iter_mut().for_each(|c| c.a_known = AKnown::Read); r.streams.a.read = 0; r };
            prop_assert_eq!(strip(&counted), strip(&read));
        }

    }
}
