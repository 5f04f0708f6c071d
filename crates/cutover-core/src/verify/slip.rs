//! Slipped duplicates: a publisher's retry, published directly into B after
//! the commit point, carrying the `Nats-Msg-Id` of a message that reached B by
//! source but outside B's duplicate window. Only hashes of the direct side's
//! ids are held.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// A stable 64-bit hash of a `Nats-Msg-Id` (ids are only held as hashes; a
/// hash match is confirmed against the real ids before it is reported).
pub fn id_hash(id: &str) -> u64 {
    // `DefaultHasher::new()` is keyed the same every time: stable within a run.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// The ids of the direct publishes a retry could have produced, as hashes, and
/// from when on sourced messages are compared with them.
#[derive(Debug, Clone, Default)]
pub struct SlipWindow {
    direct: HashMap<u64, u64>,
    /// Sourced messages stored before this (ms since the epoch) cannot be the
    /// original of a retry that landed in the window.
    pub sourced_from_ms: i64,
    pub window_ms: u64,
    pub first_direct_seq: u64,
    pub last_direct_seq: u64,
    /// Publishers split across systems: direct publishes interleave with
    /// sourced messages (B took the subjects beside A), so sourced messages
    /// stored after the first direct publish, within the window, are
    /// compared too.
    pub interleaved: bool,
}

impl SlipWindow {
    pub fn new(first_direct_seq: u64, first_direct_ms: i64, window_ms: u64) -> Self {
        Self {
            direct: HashMap::new(),
            sourced_from_ms: first_direct_ms - window_ms as i64,
            window_ms,
            first_direct_seq,
            last_direct_seq: first_direct_seq,
            interleaved: false,
        }
    }

    pub fn add_direct(&mut self, b_seq: u64, msg_id: &str) {
        self.direct.entry(id_hash(msg_id)).or_insert(b_seq);
        self.last_direct_seq = self.last_direct_seq.max(b_seq);
    }

    pub fn len(&self) -> usize {
        self.direct.len()
    }

    pub fn is_empty(&self) -> bool {
        self.direct.is_empty()
    }

    /// Is a sourced message stored at B sequence `seq`, at `ts_ms`, one a retry
    /// in the window can have repeated (stored inside the window, before the
    /// first direct publish; [`SlipWindow::interleaved`]: or after it, within
    /// the window)?
    pub(super) fn compares(&self, seq: u64, ts_ms: i64) -> bool {
        let until = self.sourced_from_ms + 2 * self.window_ms as i64;
        let among = self.interleaved && ts_ms <= until;
        ts_ms >= self.sourced_from_ms && (seq < self.first_direct_seq || among)
    }

    /// The B sequence of the direct publish whose id hashes like `id`, if any.
    pub(super) fn direct_with(&self, id: &str) -> Option<u64> {
        self.direct.get(&id_hash(id)).copied()
    }

    /// About the heap the id hashes take.
    pub(super) fn heap_bytes(&self) -> u64 {
        (self.direct.capacity() * 17) as u64
    }
}

/// A sourced message whose id hash equals a direct publish's: confirmed (or
/// not) by comparing the real ids before it is reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlipCandidate {
    pub sourced_b_seq: u64,
    pub origin: u64,
    pub msg_id: String,
    pub direct_b_seq: u64,
}

/// Hash-equal candidates kept for confirmation (real retries are few; more
/// than this means something else is wrong and the first ones are enough).
pub(super) const MAX_SLIP_CANDIDATES: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::*;

    #[test]
    fn a_direct_publish_with_a_sourced_id_is_a_slipped_duplicate() {
        let a = a_msgs(50);
        let specs = [spec("all", &[], 20, 21)];
        let mut b = b_copy(&a);
        for (i, id) in [(51, "new-1"), (52, "m-48"), (53, "new-2")] {
            b.push(B {
                seq: i,
                subject: "s.1".into(),
                origin: None,
                id: Some(id.into()),
                ts: 100 + i as i64,
            });
        }
        let mut w = SlipWindow::new(51, 151, 60);
        for m in &b[50..] {
            w.add_direct(m.seq, m.id.as_deref().unwrap());
        }
        let (r, cands) = run(&specs, &a, &b, Some(w.clone()));
        only(&r, Kind::SlippedDuplicate, 1);
        assert_eq!(
            cands,
            vec![SlipCandidate {
                sourced_b_seq: 48,
                origin: 48,
                msg_id: "m-48".into(),
                direct_b_seq: 52
            }]
        );
        assert_eq!(r.streams.slip.as_ref().unwrap().sourced_compared, 50);
        // Outside the window (sourced long before the first direct publish): a
        // reused id, not a retry.
        let mut w2 = SlipWindow::new(51, 151, 2);
        for m in &b[50..] {
            w2.add_direct(m.seq, m.id.as_deref().unwrap());
        }
        assert!(run(&specs, &a, &b, Some(w2)).0.holds);
    }

    #[test]
    fn with_publishers_split_a_sourced_copy_after_a_direct_one_is_compared() {
        let a = a_msgs(50);
        let specs = [spec("all", &[], 20, 21)];
        let mut b = b_copy(&a[..45]);
        // A direct publish with the id A's message 48 has, then A's 46-50
        // by source: its sourced copy comes after the direct one.
        b.push(B {
            seq: 46,
            subject: "s.1".into(),
            origin: None,
            id: Some("m-48".into()),
            ts: 146,
        });
        for (i, (s, subj)) in a[45..].iter().enumerate() {
            let seq = 47 + i as u64;
            let id = Some(format!("m-{s}"));
            b.push(B { seq, subject: subj.clone(), origin: Some(*s), id, ts: 100 + seq as i64 });
        }
        let window = |interleaved| {
            let mut w = SlipWindow::new(46, 146, 60);
            w.add_direct(46, "m-48");
            w.interleaved = interleaved;
            w
        };
        assert!(run(&specs, &a, &b, Some(window(false))).0.holds, "not compared");
        let (r, cands) = run(&specs, &a, &b, Some(window(true)));
        only(&r, Kind::SlippedDuplicate, 1);
        assert_eq!(cands[0].direct_b_seq, 46);
    }
}
