//! The producer's SEND frames: encoded once into an [`EncodedFrame`], written from it and
//! re-sent from it after a reconnect.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{plan, seal, write_frame, CodecError, Command, Payload};
use crate::proto;

/// Frames up to this size are written into a zeroed allocation of their own (zeroing costs
/// next to nothing at this size); larger ones (batches) into a buffer that needs no zeroing.
const SMALL_FRAME: usize = 1024;

/// An encoded frame kept while its message is pending, in 16 bytes.
///
/// A small frame (a message sent on its own) is one allocation holding the reference counts
/// and the bytes: a `Bytes` would be twice the size in the pending entry and, once shared with
/// the connection's writer, add a 24-byte counter block of its own per frame for as long as the
/// frame is kept. The writer gets it as [`Bytes`] through [`to_bytes`](Self::to_bytes), whose
/// small block lives only until the frame is written. A large frame (a batch) is a `Bytes`
/// behind an `Arc`: its per-frame blocks are nothing next to its size, and its buffer is filled
/// without being zeroed first (which would cost as much as the copy of the batch into it, and
/// `unsafe` is not used to skip it).
#[derive(Debug, Clone)]
pub(crate) struct EncodedFrame(Repr);

#[derive(Debug, Clone)]
enum Repr {
    Small(Arc<[u8]>),
    Large(Arc<Bytes>),
}

impl EncodedFrame {
    /// The frame's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Small(b) => b,
            Repr::Large(b) => b,
        }
    }

    /// The frame as `Bytes` for the connection's writer, sharing (not copying) its bytes.
    pub(crate) fn to_bytes(&self) -> Bytes {
        match &self.0 {
            Repr::Small(b) => Bytes::from_owner(b.clone()),
            Repr::Large(b) => Bytes::clone(b),
        }
    }
}

impl std::ops::Deref for EncodedFrame {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

#[cfg(test)]
impl From<&[u8]> for EncodedFrame {
    fn from(bytes: &[u8]) -> Self {
        EncodedFrame(Repr::Small(bytes.into()))
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
    if layout.frame_len > SMALL_FRAME {
        let mut buf = BytesMut::with_capacity(layout.frame_len);
        write_frame(command, Some(payload), &mut buf, &layout)?;
        debug_assert_eq!(buf.len(), layout.frame_len);
        seal(&mut buf, &layout);
        return Ok(EncodedFrame(Repr::Large(Arc::new(buf.freeze()))));
    }
    // A `TrustedLen` iterator collects into an `Arc<[T]>` in place: one allocation.
    let mut frame: Arc<[u8]> = std::iter::repeat_n(0u8, layout.frame_len).collect();
    let Some(buf) = Arc::get_mut(&mut frame) else {
        unreachable!("a new Arc has no other owner");
    };
    let mut rest: &mut [u8] = buf;
    write_frame(command, Some(payload), &mut rest, &layout)?;
    debug_assert!(rest.is_empty(), "the layout measured the frame exactly");
    seal(buf, &layout);
    Ok(EncodedFrame(Repr::Small(frame)))
}
