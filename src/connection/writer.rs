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

use bytes::Bytes;
use futures::SinkExt;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedWrite;

use crate::codec::{Frame, PulsarCodec};
use crate::error::Error;

/// How many queued frames are written before the socket is flushed.
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

/// Owns the write half: writes frames in batches, one flush per batch; ends with an error
/// when the socket fails or stays blocked for `stall_limit`.
pub(super) async fn write_loop<W>(
    writer: FramedWrite<W, PulsarCodec>,
    mut rx: mpsc::Receiver<Outgoing>,
    stall_limit: Duration,
) -> Error
where
    W: AsyncWrite + Unpin,
{
    // The handshake flushed everything it wrote, so the buffer is empty: rewrap the socket.
    let codec = writer.encoder().clone();
    let progress = Arc::new(Progress {
        base: Instant::now(),
        last_ms: AtomicU64::new(0),
    });
    let mut writer = FramedWrite::new(
        Watched {
            inner: writer.into_inner(),
            progress: progress.clone(),
        },
        codec,
    );
    loop {
        let Some(frame) = rx.recv().await else {
            let _ = SinkExt::<Frame>::close(&mut writer).await;
            return Error::Closed;
        };
        let mut next = Some(frame);
        let mut n = 0;
        while let Some(item) = next.take() {
            let frame = match item {
                Outgoing::Frame(frame) => *frame,
                Outgoing::Raw(bytes) => {
                    // Already encoded (and size-checked) by its producer.
                    writer.write_buffer_mut().extend_from_slice(&bytes);
                    n += 1;
                    if n < WRITE_BATCH {
                        next = rx.try_recv().ok();
                    }
                    continue;
                }
                Outgoing::Reply(pending, bytes) => {
                    // Taken: a PING arriving from now on needs an answer of its own.
                    pending.store(false, Ordering::Release);
                    writer.write_buffer_mut().extend_from_slice(&bytes);
                    n += 1;
                    if n < WRITE_BATCH {
                        next = rx.try_recv().ok();
                    }
                    continue;
                }
            };
            match unstalled(writer.feed(frame), &progress, stall_limit).await {
                Ok(Ok(())) => {}
                Ok(Err(crate::codec::CodecError::FrameTooLarge { size, max })) => {
                    // Nothing was written; the connection is fine.
                    tracing::warn!(size, max, "outbound frame over the size limit; not sent");
                }
                Ok(Err(e)) => return Error::from(e),
                Err(stalled) => return stalled,
            }
            n += 1;
            if n < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        match unstalled(SinkExt::<Frame>::flush(&mut writer), &progress, stall_limit).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Error::from(e),
            Err(stalled) => return stalled,
        }
    }
}
