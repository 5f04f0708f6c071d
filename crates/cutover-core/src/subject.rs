//! Subjects: wildcard matching, overlap, and mapping a consumer's filter through the
//! subject transform a sourcing stream applies.

use crate::model::SubjectTransform;

fn tokens(s: &str) -> Vec<&str> {
    s.split('.').collect()
}

/// Does the (possibly wildcard) `pattern` match the literal-or-wildcard `subject`
/// when `subject`'s wildcards are read as literal tokens? Used both for plain
/// matching ([`matches`]) and for "is every subject of `subject` covered by
/// `pattern`". Allocation-free: through [`matches`] it runs for every message
/// verification reads, once per consumer.
pub fn covers(pattern: &str, subject: &str) -> bool {
    let (mut p, mut s) = (pattern.split('.'), subject.split('.'));
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            // A `*` covers one token, but not a `>` tail of unknown length.
            (Some("*"), Some(t)) => {
                if t == ">" {
                    return false;
                }
            }
            (Some(lit), Some(t)) => {
                if lit != t {
                    return false;
                }
            }
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Does a literal subject (a message's) match a filter? The one subject
/// matcher: [`covers`], whose wildcard cases a literal subject never meets.
pub fn matches(filter: &str, subject: &str) -> bool {
    covers(filter, subject)
}

/// Is the literal subject selected by any of the filters (none: everything)?
pub fn selects(filters: &[String], subject: &str) -> bool {
    filters.is_empty() || filters.iter().any(|f| matches(f, subject))
}

/// Can some subject match both patterns? (Stream subjects must not overlap.)
pub fn overlaps(a: &str, b: &str) -> bool {
    let a = tokens(a);
    let b = tokens(b);
    let mut i = 0;
    loop {
        match (a.get(i), b.get(i)) {
            (Some(&">"), Some(_)) | (Some(_), Some(&">")) => return true,
            (Some(x), Some(y)) => {
                if *x != "*" && *y != "*" && x != y {
                    return false;
                }
            }
            (None, None) => return true,
            _ => return false,
        }
        i += 1;
    }
}

/// Maps `filter` (a subject in the origin stream, wildcards allowed) through a
/// transform. Returns `None` when the filter is not wholly inside `src`, or when a
/// wildcard of the filter would land in a place the destination does not keep: in
/// both cases the new consumer could not select exactly the same messages, and the
/// plan refuses rather than guess.
///
/// Supports the destination forms `*`/`>` (positional), `$N` and
/// `{{wildcard(N)}}` (case-insensitive); other mapping functions (partition,
/// split...) are refused.
pub fn map_filter(filter: &str, t: &SubjectTransform) -> Option<String> {
    if t.src.is_empty() || t.src == ">" && t.dest.is_empty() {
        return Some(filter.to_string());
    }
    if !covers(&t.src, filter) {
        return None;
    }
    let src = tokens(&t.src);
    let f = tokens(filter);
    // Capture what each src wildcard matched in the filter.
    let mut captures: Vec<String> = vec![];
    for (i, st) in src.iter().enumerate() {
        match *st {
            "*" => captures.push(f[i].to_string()),
            ">" => captures.push(f[i..].join(".")),
            _ => {}
        }
    }
    let dest = if t.dest.is_empty() { t.src.clone() } else { t.dest.clone() };
    let mut out: Vec<String> = vec![];
    let mut positional = 0usize;
    let mut used = vec![false; captures.len()];
    for dt in tokens(&dest) {
        let lower = dt.to_ascii_lowercase();
        let idx = if dt == "*" || dt == ">" {
            positional += 1;
            Some(positional)
        } else if let Some(n) = dt.strip_prefix('$') {
            Some(n.parse::<usize>().ok()?)
        } else if let Some(inner) =
            lower.strip_prefix("{{wildcard(").and_then(|r| r.strip_suffix(")}}"))
        {
            Some(inner.trim().parse::<usize>().ok()?)
        } else if dt.contains("{{") {
            return None;
        } else {
            None
        };
        match idx {
            Some(n) => {
                let c = captures.get(n.checked_sub(1)?)?;
                used[n - 1] = true;
                out.push(c.clone());
            }
            None => out.push(dt.to_string()),
        }
    }
    // A filter wildcard captured by a src wildcard that the destination drops
    // would widen the new filter: refuse.
    for (i, c) in captures.iter().enumerate() {
        if !used[i] && (c.contains('*') || c.contains('>')) {
            return None;
        }
    }
    Some(out.join("."))
}

/// Maps a filter through the first transform whose `src` covers it (a source may
/// list several); with no transforms the filter is unchanged.
pub fn map_filter_through(filter: &str, transforms: &[SubjectTransform]) -> Option<String> {
    if transforms.is_empty() {
        return Some(filter.to_string());
    }
    transforms.iter().find_map(|t| map_filter(filter, t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(src: &str, dest: &str) -> SubjectTransform {
        SubjectTransform { src: src.into(), dest: dest.into() }
    }

    #[test]
    fn covering() {
        assert!(covers("orders.>", "orders.eu.new"));
        assert!(covers("orders.>", "orders.*"));
        assert!(covers("orders.*", "orders.eu"));
        assert!(!covers("orders.*", "orders.>"));
        assert!(!covers("orders.*", "orders.eu.new"));
        assert!(!covers("orders.eu", "orders.*"));
        assert!(covers(">", "a"));
    }

    #[test]
    fn matching_is_subject_matching() {
        assert!(matches("orders.>", "orders.eu.x"));
        assert!(!matches("orders.>", "orders"));
        assert!(matches("orders.*", "orders.eu"));
        assert!(!matches("orders.*", "orders.eu.x"));
        assert!(matches(">", "a"));
        assert!(!matches("a.b", "a"));
        assert!(selects(&[], "anything"));
        assert!(selects(&["a.*".into(), "b".into()], "b"));
        assert!(!selects(&["a.*".into()], "b"));
    }

    /// [`covers`] as it was written first, over token vectors: the definition.
    fn covers_by_index(pattern: &str, subject: &str) -> bool {
        let (p, s) = (tokens(pattern), tokens(subject));
        for (i, pt) in p.iter().enumerate() {
            match *pt {
                ">" => return s.len() > i,
                "*" => match s.get(i) {
                    Some(&">") | None => return false,
                    Some(_) => {}
                },
                lit => match s.get(i) {
                    Some(t) if *t == lit => {}
                    _ => return false,
                },
            }
        }
        p.len() == s.len()
    }

    proptest! {
        #[test]
        fn matches_agrees_with_covers_on_literal_subjects(f in "[ab*]{1}(\\.[ab*]{1}){0,3}(\\.>)?", s in "[ab]{1}(\\.[ab]{1}){0,4}") {
            prop_assert_eq!(matches(&f, &s), covers(&f, &s));
            prop_assert_eq!(matches(&f, &s), covers_by_index(&f, &s));
        }

        #[test]
        fn covers_agrees_with_its_definition(f in "[ab*>]{1}(\\.[ab*>]{1}){0,3}", s in "[ab*>]{1}(\\.[ab*>]{1}){0,4}") {
            prop_assert_eq!(covers(&f, &s), covers_by_index(&f, &s));
        }
    }

    #[test]
    fn overlapping() {
        assert!(overlaps("orders.*", "orders.eu"));
        assert!(overlaps("orders.>", "*.eu"));
        assert!(!overlaps("orders.*", "orders.eu.x"));
        assert!(!overlaps("a.b", "a.c"));
    }

    #[test]
    fn mapping_filters() {
        assert_eq!(
            map_filter("orders.*", &t("orders.*", "new.orders.{{wildcard(1)}}")).as_deref(),
            Some("new.orders.*")
        );
        assert_eq!(
            map_filter("orders.eu.*", &t("orders.>", "v2.orders.>")).as_deref(),
            Some("v2.orders.eu.*")
        );
        assert_eq!(map_filter("a.x.y", &t("a.*.*", "b.$2.$1")).as_deref(), Some("b.y.x"));
        assert_eq!(map_filter("orders.eu", &t("", "")).as_deref(), Some("orders.eu"));
        // Not inside src.
        assert_eq!(map_filter("billing.x", &t("orders.>", "v2.>")), None);
        // A filter wildcard the destination drops would widen the filter.
        assert_eq!(map_filter("a.*.y", &t("a.*.*", "b.$2")), None);
        // Unsupported mapping functions are refused.
        assert_eq!(map_filter("a.x", &t("a.*", "b.{{partition(3,1)}}")), None);
    }
}
