//! Why a request failed, and how each failure is reported to the client.

use split_shared::protocol::{ErrorCode, WireError};

/// A request that could not be served. The session that sent it stays open.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The frame did not decode.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The model refused the input (wrong shape, undecodable image).
    #[error(transparent)]
    Model(#[from] split_shared::Error),
    /// Every worker is busy and the queue is full.
    #[error("the server is busy ({0} requests queued); retry shortly")]
    Busy(usize),
    /// A worker died or the backend failed.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<split_shared::model::ModelError> for ServeError {
    fn from(e: split_shared::model::ModelError) -> Self {
        Self::Model(e.into())
    }
}

impl From<split_shared::runtime::RuntimeError> for ServeError {
    fn from(e: split_shared::runtime::RuntimeError) -> Self {
        Self::Model(e.into())
    }
}

impl ServeError {
    /// The code sent in the error reply.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Wire(e) => e.code(),
            Self::Model(e) => ErrorCode::of(e),
            Self::Internal(_) => ErrorCode::Internal,
            Self::Busy(_) => ErrorCode::Busy,
        }
    }
}
