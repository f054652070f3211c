//! The writer half of a connection task: writes queued frames in batches and notices a broker
//! that stops reading.
//!
//! A broker that never reads what we write blocks the writer for good. Upstream's Java client
//! queues every outbound frame in Netty's (unbounded) outbound buffer meanwhile; here the
//! writer gives up once the socket has accepted no byte for the stall limit (twice the
//! keep-alive interval, like the read side's keep-alive), which ends the connection.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedWrite;

use crate::codec::{CodecError, Frame, PulsarCodec};
use crate::error::Error;

/// How many queued frames are taken before they are written and the socket is flushed.
const WRITE_BATCH: usize = 128;

/// What the writer task writes.
pub(super) enum Outgoing {
    /// Boxed: a command is several KiB, encoded bytes are small.
    Frame(Box<Frame>),
    /// An already encoded frame.
    Raw(Bytes),
    /// An encoded answer to the broker (PONG, AUTH_RESPONSE) of which at most one waits at a
    /// time: its flag is lowered when the writer takes it.
    Reply(Arc<AtomicBool>, Bytes),
}

/// When the socket last accepted bytes (milliseconds since `base`), shared by the socket
/// wrapper and the writer loop.
struct Progress {
    base: Instant,
    last_ms: AtomicU64,
}

impl Progress {
    fn mark(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.base + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// The socket's write half, recording every write that made progress.
pub(super) struct Watched<W> {
    inner: W,
    progress: Arc<Progress>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Watched<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.progress.mark();
        }
        r
    }

    // Forwarded: without these the wrapper reports "not vectored" and the queue writes one
    // chunk per call (the default `poll_write_vectored` writes only the first slice).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.progress.mark();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Runs `fut` (a write), failing if the socket accepts no byte for `limit` meanwhile.
async fn unstalled<F: std::future::Future>(
    fut: F,
    progress: &Progress,
    limit: Duration,
) -> Result<F::Output, Error> {
    tokio::pin!(fut);
    let started = Instant::now();
    loop {
        let deadline = crate::util::later(progress.last().max(started), limit);
        tokio::select! {
            out = &mut fut => return Ok(out),
            _ = tokio::time::sleep_until(deadline) => {
                let last = progress.last().max(started);
                if crate::util::later(last, limit) <= Instant::now() {
                    return Err(Error::ConnectionLost(format!(
                        "the broker has not read from the connection for {limit:?} \
                         (twice the keep-alive interval)"
                    )));
                }
            }
        }
    }
}

/// Frames below this size are copied into one buffer (written with one slice); larger ones
/// (producer batches, chunks) are written from their own bytes, without a copy.
const COALESCE_BELOW: usize = 4096;

/// At most this many slices per vectored write (Linux accepts 1024; a few dozen already fill
/// the socket buffer).
const MAX_SLICES: usize = 64;

/// Encoded frames waiting to be written, in order: large ones as their own `Bytes`, runs of
/// small ones copied into one buffer. Written with vectored writes, so a producer's encoded
/// batch goes from its buffer to the socket without another copy (a `FramedWrite` would copy
/// it into its own buffer first).
#[derive(Default)]
struct WriteQueue {
    chunks: VecDeque<Bytes>,
    /// Small frames after the last chunk, not yet sealed into one.
    staged: BytesMut,
}

impl WriteQueue {
    fn push(&mut self, bytes: Bytes) {
        if bytes.len() < COALESCE_BELOW {
            self.staged.extend_from_slice(&bytes);
        } else {
            self.seal();
            self.chunks.push_back(bytes);
        }
    }

    /// Encodes `frame` at the end of the queue. On error nothing is queued.
    fn encode(&mut self, frame: &Frame, max_frame_size: usize) -> Result<(), CodecError> {
        crate::codec::encode_frame(frame, &mut self.staged, max_frame_size)
    }

    fn seal(&mut self) {
        if !self.staged.is_empty() {
            self.chunks.push_back(self.staged.split().freeze());
        }
    }

    fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.staged.is_empty()
    }

    /// Writes everything queued.
    async fn write_all<W: AsyncWrite + Unpin>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.seal();
        while !self.chunks.is_empty() {
            let written = if w.is_write_vectored() && self.chunks.len() > 1 {
                // One chunk (the usual case: a run of small frames) takes a plain write,
                // without building a list of slices.
                let slices: Vec<IoSlice<'_>> = self
                    .chunks
                    .iter()
                    .take(MAX_SLICES)
                    .map(|c| IoSlice::new(c))
                    .collect();
                w.write_vectored(&slices).await?
            } else {
                w.write(&self.chunks[0]).await?
            };
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.advance(written);
        }
        Ok(())
    }

    /// Drops `n` written bytes from the front.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                return;
            };
            if n < front.len() {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.chunks.pop_front();
        }
    }
}

/// Owns the write half: writes frames in batches (up to [`WRITE_BATCH`] queued frames per
/// vectored write loop, then a flush); ends with an error when the socket fails or stays
/// blocked for `stall_limit`.
pub(super) async fn write_loop<W>(
    writer: FramedWrite<W, PulsarCodec>,
    mut rx: mpsc::Receiver<Outgoing>,
    stall_limit: Duration,
) -> Error
where
    W: AsyncWrite + Unpin,
{
    // The handshake flushed everything it wrote, so the buffer is empty: take the socket.
    let max_frame_size = writer.encoder().max_frame_size();
    let progress = Arc::new(Progress {
        base: Instant::now(),
        last_ms: AtomicU64::new(0),
    });
    let mut socket = Watched {
        inner: writer.into_inner(),
        progress: progress.clone(),
    };
    let mut queue = WriteQueue::default();
    loop {
        let Some(first) = rx.recv().await else {
            let _ = socket.shutdown().await;
            return Error::Closed;
        };
        let mut next = Some(first);
        let mut n = 0;
        while let Some(item) = next.take() {
            match item {
                Outgoing::Frame(frame) => match queue.encode(&frame, max_frame_size) {
                    Ok(()) => {}
                    Err(CodecError::FrameTooLarge { size, max }) => {
                        // Nothing was queued; the connection is fine.
                        tracing::warn!(size, max, "outbound frame over the size limit; not sent");
                    }
                    Err(e) => return Error::from(e),
                },
                // Already encoded (and size-checked) by its producer.
                Outgoing::Raw(bytes) => queue.push(bytes),
                Outgoing::Reply(pending, bytes) => {
                    // Taken: a PING arriving from now on needs an answer of its own.
                    pending.store(false, Ordering::Release);
                    queue.push(bytes);
                }
            }
            n += 1;
            if n < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if queue.is_empty() {
            continue;
        }
        match unstalled(queue.write_all(&mut socket), &progress, stall_limit).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Error::from(crate::codec::CodecError::from(e)),
            Err(stalled) => return stalled,
        }
        match unstalled(socket.flush(), &progress, stall_limit).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Error::from(crate::codec::CodecError::from(e)),
            Err(stalled) => return stalled,
        }
    }
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
