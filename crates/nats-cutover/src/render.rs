//! Human rendering helpers: aligned tables, rounded durations and rates. Only
//! the CLI renders; `--json` output keeps the exact numbers.

use cutover_core::compat::Finding;
use cutover_core::journal::ConsumerProgress;
use cutover_core::verify::{ConsumerReport, Offender};

/// Renders rows as left-aligned columns; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let mut w: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{:<width$}  ", c, width = w[i]));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = vec![line(headers.to_vec())];
    for r in rows {
        out.push(line(r.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

pub fn nanos(ns: i64) -> String {
    if ns <= 0 {
        "-".into()
    } else {
        humantime::format_duration(std::time::Duration::from_nanos(ns as u64)).to_string()
    }
}

/// A measured time in milliseconds, rounded for people: three significant
/// digits (`12.3 ms`, `1.23 ms`, `456 µs`), whole milliseconds up to 10 s
/// (`1235 ms`), then seconds (`12.3 s`) and minutes (`2m 3s`).
pub fn ms(v: f64) -> String {
    if !v.is_finite() || v < 0.0 {
        return "-".into();
    }
    if v == 0.0 {
        "0 ms".into()
    } else if v < 0.9995 {
        format!("{:.0} µs", v * 1000.0)
    } else if v < 9.995 {
        format!("{v:.2} ms")
    } else if v < 99.95 {
        format!("{v:.1} ms")
    } else if v < 9_999.5 {
        format!("{v:.0} ms")
    } else if v < 59_950.0 {
        format!("{:.1} s", v / 1000.0)
    } else {
        let secs = std::time::Duration::from_secs((v / 1000.0).round() as u64);
        humantime::format_duration(secs).to_string()
    }
}

/// A measured [`Duration`](std::time::Duration), rounded as [`ms`] rounds.
pub fn duration(d: std::time::Duration) -> String {
    ms(d.as_secs_f64() * 1000.0)
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    // The first group holds 1 to 3 digits, every later one 3.
    let (head, mut rest) = digits.split_at(match digits.len() % 3 {
        0 => 3.min(digits.len()),
        r => r,
    });
    let mut out = head.to_string();
    while !rest.is_empty() {
        let (group, tail) = rest.split_at(3);
        out.push(',');
        out.push_str(group);
        rest = tail;
    }
    out
}

/// Messages per second: whole and grouped (`1,234 msg/s`), one decimal below 10.
/// Bytes in binary units: 512 B, 1.5 KiB, 20.0 MiB, 3.2 GiB.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let (mut v, mut u) = (n as f64 / 1024.0, 0);
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

pub fn rate(per_sec: f64) -> String {
    if !per_sec.is_finite() || per_sec < 0.0 {
        "-".into()
    } else if per_sec < 10.0 {
        format!("{per_sec:.1} msg/s")
    } else {
        format!("{} msg/s", thousands(per_sec.round() as u64))
    }
}

/// A JSON number for people: integers as they are, fractions rounded to three
/// significant decimals at most (`0.123`, `12.346`, trailing zeros dropped).
pub fn number(v: &serde_json::Value) -> String {
    match v.as_f64() {
        Some(f) if v.is_f64() && f.is_finite() => {
            let s = format!("{f:.3}");
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        }
        _ => v.to_string(),
    }
}

/// A value, or `-` when there is none.
pub fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

// The rows both the terminal and the HTML report show: the same cells in the
// same order, each caller adding its own last columns.

/// The headers of [`finding_rows`].
pub const FINDING_HEADERS: [&str; 6] = ["scope", "setting", "from", "to", "verdict", "reason"];

/// The plan's compatibility findings, one row each.
pub fn finding_rows(findings: &[Finding]) -> Vec<Vec<String>> {
    findings
        .iter()
        .map(|f| {
            vec![
                f.scope.clone(),
                f.setting.clone(),
                f.from.clone(),
                f.to.clone(),
                f.verdict.as_str().to_string(),
                f.reason.clone(),
            ]
        })
        .collect()
}

/// A journal's consumer: name, phase, checkpoint F, start on the new stream,
/// translation gets, drain time and nudges.
pub fn progress_cells(c: &ConsumerProgress) -> Vec<String> {
    vec![
        c.name.clone(),
        format!("{:?}", c.phase).to_lowercase(),
        opt(c.checkpoint),
        opt(c.b_start),
        opt(c.translate_gets),
        c.drain_ms.map(|x| format!("{x} ms")).unwrap_or_else(|| "-".into()),
        c.nudges.to_string(),
    ]
}

/// The headers of the first eight of [`counts_cells`].
pub const COUNTS_HEADERS: [&str; 8] =
    ["consumer", "checked", "lost", "duplicated", "extra", "out of order", "gaps", "overlaps"];

/// A verified consumer: name, its counts, whether it was settled, and F.
pub fn counts_cells(c: &ConsumerReport) -> Vec<String> {
    let k = &c.counts;
    vec![
        c.name.clone(),
        k.checked.to_string(),
        k.lost.to_string(),
        k.duplicated.to_string(),
        k.extra.to_string(),
        k.out_of_order.to_string(),
        k.gaps.to_string(),
        k.overlaps.to_string(),
        if k.unsettled == 0 { "yes".into() } else { "NO".into() },
        c.checkpoint.to_string(),
    ]
}

/// An offending message: kind, consumer, its sequences and its msg id.
pub fn offender_cells(o: &Offender) -> Vec<String> {
    vec![
        o.kind.as_str().into(),
        opt(o.consumer.as_deref()),
        opt(o.a_seq),
        opt(o.b_seq),
        opt(o.msg_id.as_deref()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn table_aligns_columns() {
        let t = table(&["a", "bb"], &[vec!["xxx".into(), "y".into()]]);
        assert_eq!(t, "a    bb\nxxx  y");
    }

    #[test]
    fn milliseconds_are_rounded_to_what_a_person_reads() {
        assert_eq!(ms(12.345678901), "12.3 ms");
        assert_eq!(ms(1.23456), "1.23 ms");
        assert_eq!(ms(0.456789), "457 µs");
        assert_eq!(ms(0.0), "0 ms");
        assert_eq!(ms(99.96), "100 ms");
        assert_eq!(ms(9.999), "10.0 ms");
        assert_eq!(ms(0.9999), "1.00 ms");
        assert_eq!(ms(59_990.0), "1m");
        assert_eq!(ms(1234.5678), "1235 ms");
        assert_eq!(ms(12_345.678), "12.3 s");
        assert_eq!(ms(123_456.7), "2m 3s");
        assert_eq!(ms(f64::NAN), "-");
        assert_eq!(ms(-1.0), "-");
    }

    #[test]
    fn durations_are_rounded_like_milliseconds() {
        assert_eq!(duration(Duration::from_nanos(12_345_678_901)), "12.3 s");
        assert_eq!(duration(Duration::from_nanos(12_345_678)), "12.3 ms");
        assert_eq!(duration(Duration::from_secs(0)), "0 ms");
    }

    #[test]
    fn rates_are_whole_and_grouped() {
        assert_eq!(rate(1234.5678), "1,235 msg/s");
        assert_eq!(rate(1_234_567.0), "1,234,567 msg/s");
        assert_eq!(rate(999.4), "999 msg/s");
        assert_eq!(rate(2.345), "2.3 msg/s");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(100), "100");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(123_456), "123,456");
        assert_eq!(thousands(12_345_678), "12,345,678");
    }

    #[test]
    fn json_numbers_keep_integers_and_round_fractions() {
        assert_eq!(number(&serde_json::json!(42)), "42");
        assert_eq!(number(&serde_json::json!(12.345678901)), "12.346");
        assert_eq!(number(&serde_json::json!(2.5)), "2.5");
        assert_eq!(number(&serde_json::json!(3.0)), "3");
        assert_eq!(number(&serde_json::json!("x")), "\"x\"");
    }
}
