//! Permission violations the server reported, so that a request it dropped
//! fails naming the permission instead of as a timeout.
//!
//! A user without permission to publish to a subject gets no answer: the
//! server drops the message and sends `-ERR 'Permissions Violation for
//! Publish to "SUBJECT"'` on the connection (server/client.go,
//! `pubPermissionViolation`), which async-nats hands to the event callback
//! only. The callback [`ConnectOptions::connect`](crate::connect) installs
//! records it here; [`Js::api`](crate::Js::api) ends a request whose subject
//! was denied at once with [`Error::PermissionDenied`], and [`explain`]
//! turns the timeouts of other paths (the journal's KV operations, ordered
//! consumers) into it.
//!
//! The record is process-wide: a CLI process has one connection. In a process
//! with several, a denial on one connection could name the cause of another
//! connection's timeout on the same subject; nothing else is decided by it.

use crate::error::Error;
use std::sync::Mutex;

/// What the server refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// `publish` or `subscribe`.
    pub op: &'static str,
    pub subject: String,
}

struct Record {
    /// Denials in the order they came, each with its number.
    seen: Vec<(u64, Denial)>,
    next: u64,
}

static DENIED: Mutex<Record> = Mutex::new(Record { seen: Vec::new(), next: 0 });

/// Keeps at most this many (a misconfigured user repeats the same few).
const KEEP: usize = 64;

/// The denial a server error message reports, if it is one.
pub fn parse(msg: &str) -> Option<Denial> {
    let rest = msg.trim().trim_matches('\'').strip_prefix("Permissions Violation for ")?;
    let (op, rest) = if let Some(r) = rest.strip_prefix("Publish to ") {
        ("publish", r)
    } else if let Some(r) = rest.strip_prefix("Subscription to ") {
        ("subscribe", r)
    } else {
        return None;
    };
    let subject = rest.strip_prefix('"')?.split('"').next()?.to_string();
    Some(Denial { op, subject })
}

/// Records a server error message if it reports a denial.
pub fn record(msg: &str) {
    let Some(d) = parse(msg) else { return };
    let mut r = DENIED.lock().unwrap_or_else(|p| p.into_inner());
    r.next += 1;
    let n = r.next;
    r.seen.retain(|(_, x)| *x != d);
    r.seen.push((n, d));
    if r.seen.len() > KEEP {
        r.seen.remove(0);
    }
}

/// A mark: denials recorded after it are newer.
pub fn mark() -> u64 {
    DENIED.lock().unwrap_or_else(|p| p.into_inner()).next
}

/// A denial that explains why a request to `subject` sent at `since` (a
/// [`mark`]) got no answer: publishing to that subject was denied after it,
/// or subscribing to the client's reply inbox at any time (then no request
/// gets an answer).
pub fn for_request(subject: &str, since: u64) -> Option<Denial> {
    let r = DENIED.lock().unwrap_or_else(|p| p.into_inner());
    r.seen
        .iter()
        .rev()
        .find(|(n, d)| {
            (d.op == "publish" && d.subject == subject && *n > since)
                || (d.op == "subscribe" && d.subject.starts_with("_INBOX."))
        })
        .map(|(_, d)| d.clone())
}

/// The most recent denial, if any.
pub fn latest() -> Option<Denial> {
    DENIED.lock().unwrap_or_else(|p| p.into_inner()).seen.last().map(|(_, d)| d.clone())
}

/// `e` as [`Error::PermissionDenied`] when it is a request that got no answer
/// (timeout, no responders, a journal or request failure) and the server
/// denied this process something: its most recent denial is named. Other
/// errors are returned as they are.
pub fn explain(e: Error) -> Error {
    match e {
        Error::RunStopped { cause, state, next } => {
            Error::RunStopped { cause: Box::new(explain(*cause)), state, next }
        }
        Error::Timeout { ref what }
        | Error::NoResponders { ref what }
        | Error::Request { ref what, .. } => match latest() {
            Some(d) => Error::PermissionDenied { what: what.clone(), op: d.op, subject: d.subject },
            None => e,
        },
        // The journal's KV operations report a dropped request as a timeout.
        Error::Journal(ref what) if what.contains("timed out") => match latest() {
            Some(d) => Error::PermissionDenied { what: what.clone(), op: d.op, subject: d.subject },
            None => e,
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_messages_are_parsed() {
        assert_eq!(
            parse("Permissions Violation for Publish to \"$JS.API.STREAM.INFO.A\""),
            Some(Denial { op: "publish", subject: "$JS.API.STREAM.INFO.A".into() })
        );
        assert_eq!(
            parse("'Permissions Violation for Subscription to \"_INBOX.x.*\" (sid \"1\")'"),
            Some(Denial { op: "subscribe", subject: "_INBOX.x.*".into() })
        );
        assert_eq!(
            parse("Permissions Violation for Subscription to \"a.b\" using queue \"q\""),
            Some(Denial { op: "subscribe", subject: "a.b".into() })
        );
        assert_eq!(parse("Authorization Violation"), None);
        assert_eq!(parse("Permissions Violation for Publish with Reply of \"x\""), None);
    }

    /// (The record is process-wide: this test's subjects are its own.)
    #[test]
    fn a_request_is_explained_only_by_a_denial_of_its_subject_after_it_was_sent() {
        let before = mark();
        record("Permissions Violation for Publish to \"t.denied.early\"");
        let sent = mark();
        assert!(sent > before);
        assert_eq!(for_request("t.denied.early", sent), None, "denied before it was sent");
        assert_eq!(for_request("t.other", before), None, "another subject");
        record("Permissions Violation for Publish to \"t.denied.late\"");
        let d = for_request("t.denied.late", sent).unwrap();
        assert_eq!((d.op, d.subject.as_str()), ("publish", "t.denied.late"));
        let e = explain(Error::Timeout { what: "read x".into() });
        assert!(matches!(e, Error::PermissionDenied { .. }), "{e}");
        let e = explain(Error::Journal("journal A.B is unreadable".into()));
        assert!(matches!(e, Error::Journal(_)), "only a timed-out journal request: {e}");
    }
}
