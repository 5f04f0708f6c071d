//! Stream and consumer names are checked before the first request: a bad name is
//! refused with the rule it breaks, and nothing reaches the server.
//!
//! Rules from nats-server `server/stream.go` / `consumer.go` (`isValidName`): no
//! whitespace, `.`, `*`, `>`, and (since they become file names) no path separators;
//! at most 255 characters.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum NameError {
    #[error("{kind} name is empty: give a name such as ORDERS")]
    Empty { kind: &'static str },
    #[error("{kind} name {name:?} contains {ch:?}, which NATS does not allow in names (no whitespace, '.', '*', '>', '/', '\\'); pick a name without it")]
    BadChar { kind: &'static str, name: String, ch: char },
    #[error("{kind} name {name:?} is {len} characters long; NATS allows at most 255")]
    TooLong { kind: &'static str, name: String, len: usize },
}

pub fn validate(kind: &'static str, name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty { kind });
    }
    if let Some(ch) = name
        .chars()
        .find(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\') || c.is_control())
    {
        return Err(NameError::BadChar { kind, name: name.to_string(), ch });
    }
    if name.len() > 255 {
        return Err(NameError::TooLong { kind, name: name.to_string(), len: name.len() });
    }
    Ok(())
}

pub fn stream(name: &str) -> Result<(), NameError> {
    validate("stream", name)
}

pub fn consumer(name: &str) -> Result<(), NameError> {
    validate("consumer", name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        assert!(stream("ORDERS_v2").is_ok());
        assert!(consumer("worker-1").is_ok());
    }

    #[test]
    fn refuses_bad_names_with_the_character() {
        assert_eq!(
            stream("A.B"),
            Err(NameError::BadChar { kind: "stream", name: "A.B".into(), ch: '.' })
        );
        assert!(matches!(consumer("a b"), Err(NameError::BadChar { ch: ' ', .. })));
        assert!(matches!(stream(""), Err(NameError::Empty { .. })));
        assert!(matches!(stream(&"x".repeat(256)), Err(NameError::TooLong { .. })));
    }
}
