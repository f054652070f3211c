//! The producer's SEND frames: encoded once into an [`EncodedFrame`], written from it and
//! re-sent from it after a reconnect.

use std::sync::Arc;

use bytes::Bytes;

use super::{plan, seal, write_frame, CodecError, Command, Payload};
use crate::proto;

/// An encoded frame kept while its message is pending: one allocation holding the reference
/// counts and the bytes (a `Bytes` would be twice the size in the entry and, once shared with
/// the connection's writer, add a 24-byte counter block of its own per frame for as long as
/// the frame is kept). The writer gets it as [`Bytes`] through
/// [`to_bytes`](Self::to_bytes), whose small block lives only until the frame is written.
#[derive(Debug, Clone)]
pub(crate) struct EncodedFrame(Arc<[u8]>);

impl EncodedFrame {
    /// The frame's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The frame as `Bytes` for the connection's writer, sharing (not copying) its bytes.
    pub(crate) fn to_bytes(&self) -> Bytes {
        Bytes::from_owner(self.0.clone())
    }
}

impl std::ops::Deref for EncodedFrame {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
impl From<&[u8]> for EncodedFrame {
    fn from(bytes: &[u8]) -> Self {
        EncodedFrame(bytes.into())
    }
}

/// Encodes a SEND frame into a new [`EncodedFrame`] of exactly its size. The `BaseCommand`
/// envelope (its `type` and `send` fields) is written by hand, so no 6 KB `BaseCommand` is
/// built, measured and dropped per entry; the bytes are the same as
/// [`encode_frame`](super::encode_frame)'s.
pub(crate) fn encode_send(
    send: &proto::CommandSend,
    payload: &Payload,
    max_frame_size: usize,
) -> Result<EncodedFrame, CodecError> {
    let command = Command::Send(send);
    let layout = plan(command, Some(payload), max_frame_size)?;
    // Zeroed, then written: one allocation of exactly the frame's size (a `TrustedLen`
    // iterator collects into an `Arc<[T]>` in place), and no `unsafe` for uninitialized bytes.
    let mut frame: Arc<[u8]> = std::iter::repeat_n(0u8, layout.frame_len).collect();
    let Some(buf) = Arc::get_mut(&mut frame) else {
        unreachable!("a new Arc has no other owner");
    };
    let mut rest: &mut [u8] = buf;
    write_frame(command, Some(payload), &mut rest, &layout)?;
    debug_assert!(rest.is_empty(), "the layout measured the frame exactly");
    seal(buf, &layout);
    Ok(EncodedFrame(frame))
}
