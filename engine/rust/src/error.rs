//! Status codes and the error type shared by the engine and the C surface.

use std::fmt;

/// The status every `extern "C"` function returns. The Go side maps these
/// onto its sentinel errors in one table (engine/cgo.go); keep both in step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A batch, a config or an argument is malformed.
    InvalidInput = 1,
    /// A saved state cannot be loaded, or the engine is in a state that
    /// forbids the call.
    InvalidState = 2,
    /// The Rust side panicked; the panic was caught at the boundary.
    Panic = 3,
    /// Any other failure.
    Internal = 4,
    /// The engine handle is null or was freed.
    Closed = 5,
    /// A push of Avro-marked rows the fast path leaves to the Go decoder
    /// (see `avro`): nothing changed; push the batch's Go rows instead.
    Fallback = 6,
}

/// An engine error: a status and a message without row data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        Error {
            status,
            message: message.into(),
        }
    }

    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(Status::InvalidInput, message)
    }

    pub fn invalid_state(message: impl Into<String>) -> Self {
        Self::new(Status::InvalidState, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Status::Internal, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<arrow_schema::ArrowError> for Error {
    fn from(e: arrow_schema::ArrowError) -> Self {
        Error::internal(format!("arrow: {e}"))
    }
}
