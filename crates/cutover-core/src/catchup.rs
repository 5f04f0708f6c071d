//! Whether B is catching up with A while it sources (or mirrors) it, judged
//! from reads of A's last sequence and the newest origin sequence B holds.
//!
//! B falls behind when A stores messages faster than B receives them: the
//! lag (A's last sequence minus B's origin sequence) then grows for as long
//! as A's ingest lasts, and the commit window (which waits for B to hold A's
//! tail, bounded by the commit timeout) could never close. `run` stops before
//! any commit instead, saying so.
//!
//! The rule: over a full `window` of reads, the lag grew in both halves of it
//! and B received less than [`KEEPS_UP`] of what A stored. One read cannot
//! tell a burst from a trend, and sourcing delivers in batches (flow control),
//! so the lag wobbles: both halves must show growth, and a window must be
//! full before anything is judged. Counters and the reads' own times only:
//! no timer decides.

use std::collections::VecDeque;

/// B keeps up when it receives at least this share of what A stores.
pub const KEEPS_UP: f64 = 0.95;

/// Above this ingest rate of A, `plan` warns that B may not catch up:
/// nats-server issue 8612 reports sourcing into one stream topping out at
/// 18–21k msg/s (one goroutine per destination stream). docs/benchmarks.md
/// has what this project measured on its machine.
pub const INGEST_WARN_PER_S: f64 = 18_000.0;

/// A's ingest rate as `plan` sampled it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IngestRate {
    /// Messages per second A stored while sampled (0: A stored nothing lately).
    pub per_s: f64,
    /// How long it was sampled (0: not sampled, A was idle).
    pub over_ms: u64,
}

/// One read: when (ms, any monotonic origin), A's last sequence, B's newest
/// origin sequence (0: none yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at_ms: u64,
    pub a_last: u64,
    pub b_origin: u64,
}

impl Sample {
    fn lag(&self) -> u64 {
        self.a_last.saturating_sub(self.b_origin)
    }
}

/// B is falling behind A: what the window showed.
#[derive(Debug, Clone, PartialEq)]
pub struct FallingBehind {
    pub window_ms: u64,
    /// Messages per second A stored and B received over the window.
    pub a_per_s: f64,
    pub b_per_s: f64,
    pub lag_from: u64,
    pub lag_to: u64,
}

/// The reads of the last `window` (plus the one just before it).
#[derive(Debug, Clone)]
pub struct Watch {
    window_ms: u64,
    samples: VecDeque<Sample>,
}

impl Watch {
    pub fn new(window_ms: u64) -> Self {
        Self { window_ms: window_ms.max(1), samples: VecDeque::new() }
    }

    /// Adds a read; `Some` once a full window shows B falling behind.
    pub fn push(&mut self, s: Sample) -> Option<FallingBehind> {
        self.samples.push_back(s);
        // Keep the newest read at least a window older than `s`, drop older ones.
        while self.samples.len() > 2 && s.at_ms - self.samples[1].at_ms >= self.window_ms {
            self.samples.pop_front();
        }
        let first = *self.samples.front()?;
        let span = s.at_ms.saturating_sub(first.at_ms);
        if span < self.window_ms {
            return None;
        }
        let mid_at = first.at_ms + span / 2;
        let mid = *self.samples.iter().find(|x| x.at_ms >= mid_at)?;
        let grew = first.lag() < mid.lag() && mid.lag() < s.lag();
        let secs = span as f64 / 1000.0;
        let a_per_s = s.a_last.saturating_sub(first.a_last) as f64 / secs;
        let b_per_s = s.b_origin.saturating_sub(first.b_origin) as f64 / secs;
        (grew && a_per_s > 0.0 && b_per_s < KEEPS_UP * a_per_s).then_some(FallingBehind {
            window_ms: span,
            a_per_s,
            b_per_s,
            lag_from: first.lag(),
            lag_to: s.lag(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads every 100 ms for `secs`: A stores `a` and B receives `b` per second.
    fn run(w: &mut Watch, secs: u64, a: u64, b: u64, backlog: u64) -> Option<FallingBehind> {
        let mut out = None;
        for i in 0..=secs * 10 {
            let t = i * 100;
            let s = Sample { at_ms: t, a_last: backlog + a * t / 1000, b_origin: b * t / 1000 };
            out = out.or(w.push(s));
        }
        out
    }

    #[test]
    fn b_slower_than_a_is_falling_behind_once_a_window_is_full() {
        let mut w = Watch::new(5_000);
        let f = run(&mut w, 10, 30_000, 20_000, 0).expect("falling behind");
        assert_eq!(f.window_ms, 5_000);
        assert!((f.a_per_s - 30_000.0).abs() < 1.0 && (f.b_per_s - 20_000.0).abs() < 1.0, "{f:?}");
        assert!(f.lag_to > f.lag_from);
        // Not before the window is full.
        assert_eq!(run(&mut Watch::new(5_000), 4, 30_000, 20_000, 0), None);
    }

    #[test]
    fn b_working_off_a_backlog_or_keeping_pace_is_not_falling_behind() {
        // B faster than A: the backlog shrinks.
        assert_eq!(run(&mut Watch::new(2_000), 10, 10_000, 50_000, 1_000_000), None);
        // Equal rates: the lag holds.
        assert_eq!(run(&mut Watch::new(2_000), 10, 10_000, 10_000, 5_000), None);
        // A idle, B caught up: nothing to judge.
        assert_eq!(run(&mut Watch::new(2_000), 10, 0, 0, 0), None);
        // Slightly slower, within the tolerance.
        assert_eq!(run(&mut Watch::new(2_000), 10, 10_000, 9_700, 0), None);
    }

    #[test]
    fn a_lag_that_wobbles_is_not_a_trend() {
        // B receives in bursts: behind, then level again, every other second.
        let mut w = Watch::new(2_000);
        for i in 0..=100u64 {
            let t = i * 100;
            let a = 10 * t;
            let b = if (t / 1000) % 2 == 0 { a.saturating_sub(4_000) } else { a };
            assert_eq!(w.push(Sample { at_ms: t, a_last: a, b_origin: b }), None, "at {t} ms");
        }
    }
}
