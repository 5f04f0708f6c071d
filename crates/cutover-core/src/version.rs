//! Server versions and the features a plan may rely on.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServerVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl ServerVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self { major, minor, patch }
    }

    /// Parses what the server reports in INFO (`2.15.1`, `v2.10.0-beta.3`,
    /// `2.11.0-RC.1`): pre-release suffixes are ignored, missing parts are 0.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().trim_start_matches('v');
        let core = s.split(['-', '+']).next()?;
        let mut it = core.split('.').map(|p| p.parse::<u32>());
        let major = it.next()?.ok()?;
        let minor = it.next().unwrap_or(Ok(0)).ok()?;
        let patch = it.next().unwrap_or(Ok(0)).ok()?;
        Some(Self { major, minor, patch })
    }

    pub fn at_least(&self, major: u32, minor: u32, patch: u32) -> bool {
        *self >= Self::new(major, minor, patch)
    }

    pub fn features(&self) -> Features {
        Features {
            consumer_pause: self.at_least(2, 11, 0),
            mirror_promotion: self.at_least(2, 12, 0),
            consumer_reset: self.at_least(2, 14, 0),
            sourcing_streams_get_no_default_dedup_window: self.at_least(2, 14, 0),
            // Before 2.12.6 a msg-id that B already holds, arriving again by source,
            // stalls the source (observed on 2.10..2.12.5). See DEVELOPERS notes.
            duplicate_sourced_msg_id_stalls_source: !self.at_least(2, 12, 6),
            mirror_durable_consumer: self.at_least(2, 14, 0),
        }
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The oldest server the tool supports at all: 2.10 brought multiple filter
/// subjects and subject transforms, which the compatibility rules assume.
pub const MINIMUM: ServerVersion = ServerVersion::new(2, 10, 0);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Features {
    pub consumer_pause: bool,
    pub mirror_promotion: bool,
    pub consumer_reset: bool,
    pub sourcing_streams_get_no_default_dedup_window: bool,
    pub duplicate_sourced_msg_id_stalls_source: bool,
    /// A mirror may read its origin through a durable push consumer named in
    /// its config (`mirror.consumer`, ack policy `flow_control`: stream.go
    /// `setupMirrorConsumer`, 2.14's reliable sourcing), whose
    /// `max_ack_pending` bounds what the copy has in flight.
    pub mirror_durable_consumer: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_server_versions() {
        assert_eq!(ServerVersion::parse("2.15.1"), Some(ServerVersion::new(2, 15, 1)));
        assert_eq!(ServerVersion::parse("v2.10.0-beta.3"), Some(ServerVersion::new(2, 10, 0)));
        assert_eq!(ServerVersion::parse("2.11"), Some(ServerVersion::new(2, 11, 0)));
        assert_eq!(ServerVersion::parse("banana"), None);
    }

    #[test]
    fn feature_gates() {
        let f = ServerVersion::new(2, 10, 22).features();
        assert!(
            !f.consumer_pause && !f.mirror_promotion && f.duplicate_sourced_msg_id_stalls_source
        );
        let f = ServerVersion::new(2, 15, 1).features();
        assert!(f.consumer_pause && f.mirror_promotion && f.consumer_reset);
        assert!(!f.duplicate_sourced_msg_id_stalls_source);
    }
}
