//! [`SchemaError`]: why a value could not be encoded or a payload decoded.
//!
//! A leaf: it imports nothing above `schema::info`, so `crate::error` can wrap it
//! ([`Error::Schema`](crate::Error::Schema)) without an import cycle.

use std::sync::Arc;

use super::info::{SchemaType, SchemaVersion};

/// The encoder's or decoder's own error (the same type as
/// [`error::SourceError`](crate::error::SourceError), spelled out so this leaf does not import
/// `crate::error`).
type Source = Arc<dyn std::error::Error + Send + Sync>;

/// Why a value could not be encoded or a payload decoded.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The value could not be encoded with the schema.
    #[error("cannot encode a {schema_type} value: {reason}")]
    Encode {
        /// The schema's type.
        schema_type: SchemaType,
        /// What went wrong.
        reason: String,
        /// The encoder's error, if any.
        #[source]
        source: Option<Source>,
    },
    /// The payload could not be decoded with the schema.
    #[error("cannot decode a {schema_type} payload: {reason}")]
    Decode {
        /// The schema's type.
        schema_type: SchemaType,
        /// What went wrong.
        reason: String,
        /// The decoder's error, if any.
        #[source]
        source: Option<Source>,
    },
    /// The message has no value (a tombstone: upstream `null_value`, Java's `value(null)`,
    /// whose `getValue()` is null); its payload is not decoded.
    #[error("the message has no value (null_value)")]
    NullValue,
    /// A schema definition is not valid (for example not an Avro schema).
    #[error("invalid schema definition: {0}")]
    InvalidDefinition(String),
    /// The message names a writer schema version the consumer could not get from the broker
    /// (GetSchema failed or timed out, or the consumer gave up asking this topic after
    /// repeated timeouts), so it was not decoded: it can be nacked (redelivered and decoded
    /// once the broker answers again) or dead-lettered like any message that fails to decode.
    /// Upstream's `AutoConsumeSchema` and multi-version readers fail the message's `getValue`
    /// the same way when the schema lookup fails.
    #[error("the writer schema {version:?} of the message is unavailable: {reason}")]
    WriterSchemaUnavailable {
        /// The version the message names.
        version: SchemaVersion,
        /// Why it is unavailable.
        reason: String,
        /// The lookup's error.
        #[source]
        source: Option<Source>,
    },
}

impl SchemaError {
    pub(crate) fn encode(schema_type: SchemaType, reason: impl Into<String>) -> Self {
        SchemaError::Encode {
            schema_type,
            reason: reason.into(),
            source: None,
        }
    }

    pub(crate) fn decode(schema_type: SchemaType, reason: impl Into<String>) -> Self {
        SchemaError::Decode {
            schema_type,
            reason: reason.into(),
            source: None,
        }
    }

    #[cfg(feature = "json")]
    pub(crate) fn decode_from(
        schema_type: SchemaType,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        SchemaError::Decode {
            schema_type,
            reason: e.to_string(),
            source: Some(Arc::new(e)),
        }
    }

    #[cfg(feature = "json")]
    pub(crate) fn encode_from(
        schema_type: SchemaType,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        SchemaError::Encode {
            schema_type,
            reason: e.to_string(),
            source: Some(Arc::new(e)),
        }
    }
}
