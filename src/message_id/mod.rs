//! [`MessageId`]: where a message is stored, and its string form.

pub(crate) mod id;
mod parse;

pub use id::{ChunkStart, MessageId};
