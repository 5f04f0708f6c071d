//! Human rendering helpers: aligned tables, durations. Only the CLI renders.

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

#[cfg(test)]
mod tests {
    #[test]
    fn table_aligns_columns() {
        let t = super::table(&["a", "bb"], &[vec!["xxx".into(), "y".into()]]);
        assert_eq!(t, "a    bb\nxxx  y");
    }
}
