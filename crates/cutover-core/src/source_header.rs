//! The `Nats-Stream-Source` header a sourcing stream adds to every sourced message.
//!
//! Seen on 2.15.1: `<stream> <origin-seq> <filter> <dest> <subject>`; older servers
//! write fewer fields, and a stream sourced from another domain carries a
//! `<stream>:<hash>` first field. We rely only on the first two fields and refuse
//! anything we cannot read rather than guessing.

use thiserror::Error;

pub const HEADER: &str = "Nats-Stream-Source";

/// The most bytes the header adds to a message of `subject` sourced from
/// `stream` (filter and transform destination as B's source names them,
/// `>` for none): `Nats-Stream-Source: <value>\r\n` plus the header
/// block's own `NATS/1.0\r\n` and closing `\r\n` when the original had
/// no headers (34 + the value's length; 22 + it with headers), the origin
/// sequence counted at its widest (20 digits) and the 2.15 identity field
/// (8 characters) always. nats-server checks `max_msg_size` against the
/// message with the header (stream.go `processInboundSourceMsg`,
/// `genSourceHeader`, then `processJetStreamMsg`): one the origin took at
/// its limit stalls the source for good if B's limit is no larger.
pub fn growth(stream: &str, filter: &str, dest: &str, subject: &str) -> u64 {
    let value =
        stream.len() + 1 + 20 + 1 + filter.len() + 1 + dest.len() + 1 + subject.len() + 1 + 8;
    (34 + value) as u64
}

/// The longest subject a stream with these subjects may store, for
/// [`growth`]: a literal's own length; under wildcards a bound (64 bytes a
/// `*` token, 128 a `>`), which is an estimate: subjects have no limit of
/// their own below the server's maximum control line.
pub fn longest_subject(subjects: &[String]) -> usize {
    subjects
        .iter()
        .map(|s| {
            s.split('.')
                .map(|t| match t {
                    "*" => 64,
                    ">" => 128,
                    t => t.len(),
                })
                .sum::<usize>()
                + s.split('.').count().saturating_sub(1)
        })
        .max()
        .unwrap_or(0)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRef {
    /// The origin stream's name (any `:<hash>` suffix removed).
    pub stream: String,
    /// The message's sequence in the origin stream.
    pub seq: u64,
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("cannot read {HEADER} header {value:?}: {why}")]
pub struct SourceHeaderError {
    pub value: String,
    pub why: &'static str,
}

pub fn parse(value: &str) -> Result<SourceRef, SourceHeaderError> {
    let (stream, seq) = fields(value)?;
    Ok(SourceRef { stream: stream.to_string(), seq })
}

/// The origin sequence when the header names `stream` (`None` when it names
/// another), by the same rules as [`parse`] but without allocating: `verify`
/// runs this for every message it reads.
pub fn seq_from(value: &str, stream: &str) -> Result<Option<u64>, SourceHeaderError> {
    let (name, seq) = fields(value)?;
    Ok((name == stream).then_some(seq))
}

/// The one reading of the header: the first field's stream name (any `:<hash>`
/// suffix removed) and the origin sequence, borrowed from `value`.
fn fields(value: &str) -> Result<(&str, u64), SourceHeaderError> {
    let err = |why| SourceHeaderError { value: value.to_string(), why };
    let mut fields = value.split_ascii_whitespace();
    let first = fields.next().ok_or_else(|| err("the header is empty"))?;
    let stream = first.split(':').next().unwrap_or(first);
    if stream.is_empty() {
        return Err(err("the stream name is empty"));
    }
    let seq = fields
        .next()
        .ok_or_else(|| err("there is no origin sequence"))?
        .parse::<u64>()
        .map_err(|_| err("the origin sequence is not a number"))?;
    if seq == 0 {
        return Err(err("the origin sequence is 0"));
    }
    Ok((stream, seq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_the_header_of_each_server_generation() {
        let r = parse("ORDERS 42 > > orders.eu").unwrap();
        assert_eq!(r, SourceRef { stream: "ORDERS".into(), seq: 42 });
        assert_eq!(parse("ORDERS 7").unwrap().seq, 7);
        assert_eq!(parse("ORDERS:ab12cd 9 orders.* x.> orders.eu").unwrap().stream, "ORDERS");
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(parse("").is_err());
        assert!(parse("ORDERS").is_err());
        assert!(parse("ORDERS x").is_err());
        assert!(parse("ORDERS 0").is_err());
        assert!(parse(":abc 3").is_err());
    }

    proptest! {
        #[test]
        fn round_trips_any_name_and_sequence(name in "[A-Za-z0-9_-]{1,20}", seq in 1u64.., extra in "( [a-z.>*]{1,8}){0,4}") {
            let r = parse(&format!("{name} {seq}{extra}")).unwrap();
            prop_assert_eq!(r.stream, name);
            prop_assert_eq!(r.seq, seq);
        }

        #[test]
        fn seq_from_agrees_with_parse(s in "[A-Z:]{0,4}( [0-9a-z]{0,3}){0,3}", stream in "[A-Z]{1,2}") {
            let want = parse(&s).map(|r| (r.stream == stream).then_some(r.seq));
            prop_assert_eq!(seq_from(&s, &stream), want);
        }

        #[test]
        fn never_panics(s in ".*") {
            let _ = parse(&s);
        }
    }

    #[test]
    fn growth_counts_the_header_as_the_server_writes_it() {
        // Measured on 2.15.1: `A 1 > > a.x.1 F9VBClPa` added 56 bytes to a
        // message without headers; the bound counts the sequence at 20 digits.
        assert_eq!(growth("A", ">", ">", "a.x.1"), 56 + 19);
        assert_eq!(longest_subject(&["orders.eu".into()]), 9);
        assert_eq!(longest_subject(&["orders.*".into(), "a".into()]), 7 + 64);
    }
}
