//! JetStream API error codes (`err_code` in API responses), as a newtype with named
//! constants so that nothing matches on error strings. Values from nats-server
//! `server/errors.json`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ApiErrorCode(pub u64);

impl ApiErrorCode {
    pub const CONSUMER_NOT_FOUND: Self = Self(10014);
    /// "JetStream system temporarily unavailable" (server JSClusterNotAvailErr):
    /// a cluster without a meta or stream leader for the moment.
    pub const CLUSTER_NOT_AVAILABLE: Self = Self(10008);
    pub const STREAM_SUBJECT_OVERLAP: Self = Self(10065);
    pub const STREAM_NOT_FOUND: Self = Self(10059);
    pub const STREAM_NAME_EXISTS: Self = Self(10058);
    pub const NO_MESSAGE_FOUND: Self = Self(10037);
    pub const CONSUMER_ALREADY_EXISTS: Self = Self(10148);
    pub const CONSUMER_NAME_EXISTS: Self = Self(10013);
    pub const BAD_REQUEST: Self = Self(10003);
    pub const STREAM_WRONG_LAST_SEQUENCE: Self = Self(10071);
    pub const KEY_WRONG_LAST_SEQUENCE: Self = Self(10071);
    pub const JETSTREAM_NOT_ENABLED: Self = Self(10076);
    pub const JETSTREAM_NOT_ENABLED_FOR_ACCOUNT: Self = Self(10039);
}

impl std::fmt::Display for ApiErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
