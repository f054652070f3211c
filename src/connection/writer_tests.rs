//! The writer's queue and loop against mock sockets: partial, vectored and non-vectored
//! writes, order, oversized frames, stalls.

use std::io;
use std::sync::Mutex;

use bytes::BytesMut;
use tokio_util::codec::Decoder;

use super::*;
use crate::proto::{base_command::Type, BaseCommand};

/// What a mock socket saw.
#[derive(Default)]
struct Log {
    out: Vec<u8>,
    writes: usize,
    vectored_calls: usize,
    most_slices: usize,
    shut_down: bool,
}

/// A socket taking at most `per_call` bytes per write (0: none, an error for the writer);
/// `stuck`: never ready, like a broker that stopped reading.
struct Mock {
    log: Arc<Mutex<Log>>,
    per_call: usize,
    vectored: bool,
    stuck: bool,
}

impl Mock {
    fn new(per_call: usize, vectored: bool) -> (Self, Arc<Mutex<Log>>) {
        let log = Arc::new(Mutex::new(Log::default()));
        let mock = Mock {
            log: log.clone(),
            per_call,
            vectored,
            stuck: false,
        };
        (mock, log)
    }
}

impl AsyncWrite for Mock {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.stuck {
            return Poll::Pending;
        }
        let mut log = self.log.lock().unwrap();
        log.writes += 1;
        let n = self.per_call.min(buf.len());
        log.out.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.stuck {
            return Poll::Pending;
        }
        let mut log = self.log.lock().unwrap();
        log.vectored_calls += 1;
        log.most_slices = log.most_slices.max(bufs.len());
        let mut left = self.per_call;
        let mut n = 0;
        for b in bufs {
            let take = left.min(b.len());
            log.out.extend_from_slice(&b[..take]);
            left -= take;
            n += take;
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.vectored
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.log.lock().unwrap().shut_down = true;
        Poll::Ready(Ok(()))
    }
}

/// `n` bytes, all `b` (so a misordered or repeated slice shows).
fn block(n: usize, b: u8) -> Bytes {
    Bytes::from(vec![b; n])
}

#[tokio::test]
async fn the_queue_writes_every_byte_once_in_order_whatever_each_write_accepts() {
    // Sizes around the coalescing threshold, and more large chunks than one vectored write
    // takes.
    let mut sizes = vec![10, 5000, 1, 4096, 4095, 20_000, 7, 4097, 3];
    sizes.extend(std::iter::repeat_n([5000, 2], 80).flatten());
    let items: Vec<Bytes> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| block(n, i as u8))
        .collect();
    let expected: Vec<u8> = items.iter().flat_map(|b| b.iter().copied()).collect();
    for vectored in [true, false] {
        for per_call in [1, 3, 100, 4095, 4096, 4097, 10_000, 1 << 20, usize::MAX] {
            let (mut mock, log) = Mock::new(per_call, vectored);
            let mut queue = WriteQueue::default();
            for item in &items {
                queue.push(item.clone());
            }
            queue.write_all(&mut mock).await.unwrap();
            assert!(queue.is_empty());
            let log = log.lock().unwrap();
            assert!(
                log.out == expected,
                "vectored {vectored}, {per_call} per write"
            );
            if vectored {
                assert!(log.vectored_calls > 0);
                assert!(log.most_slices <= MAX_SLICES);
            } else {
                assert_eq!(log.vectored_calls, 0);
            }
        }
    }
}

#[tokio::test]
async fn a_socket_that_accepts_nothing_is_write_zero_not_a_spin() {
    for vectored in [true, false] {
        let (mut mock, log) = Mock::new(0, vectored);
        let mut queue = WriteQueue::default();
        queue.push(block(10, 1));
        queue.push(block(5000, 2));
        let err = queue.write_all(&mut mock).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WriteZero);
        let log = log.lock().unwrap();
        assert_eq!(log.writes + log.vectored_calls, 1);
    }
}

fn cmd(ty: Type) -> BaseCommand {
    BaseCommand {
        r#type: ty as i32,
        ..Default::default()
    }
}

fn encoded(frame: &Frame) -> Bytes {
    let mut buf = BytesMut::new();
    crate::codec::encode_frame(frame, &mut buf, 1 << 20).unwrap();
    buf.freeze()
}

fn big_frame(ty: Type, n: usize) -> Frame {
    Frame::with_payload(cmd(ty), Default::default(), block(n, 9))
}

/// Runs the writer over `mock` on what is already queued, until the channel closes.
async fn run(mock: Mock, items: Vec<Outgoing>, max_message_size: usize) -> Error {
    let mut codec = PulsarCodec::new();
    codec.set_max_message_size(max_message_size);
    let (tx, rx) = mpsc::channel(items.len().max(1));
    for item in items {
        assert!(tx.try_send(item).is_ok());
    }
    drop(tx);
    write_loop(FramedWrite::new(mock, codec), rx, Duration::from_secs(10)).await
}

#[tokio::test]
async fn the_loop_keeps_the_order_of_frames_raw_and_replies_and_skips_an_oversized_frame() {
    for (per_call, vectored) in [(7, false), (7, true), (usize::MAX, true), (4096, false)] {
        let (mock, log) = Mock::new(per_call, vectored);
        let pending = Arc::new(AtomicBool::new(true));
        let items = vec![
            Outgoing::Frame(Box::new(Frame::simple(cmd(Type::Ping)))),
            Outgoing::Raw(encoded(&big_frame(Type::Send, 6000))),
            Outgoing::Reply(pending.clone(), encoded(&Frame::simple(cmd(Type::Pong)))),
            // Over the limit (10,000 bytes + FRAME_HEADROOM): dropped, the connection goes on.
            Outgoing::Frame(Box::new(big_frame(Type::Message, 30_000))),
            Outgoing::Raw(encoded(&Frame::simple(cmd(Type::Flow)))),
            Outgoing::Frame(Box::new(big_frame(Type::Ack, 5000))),
            Outgoing::Raw(encoded(&big_frame(Type::SendReceipt, 4500))),
        ];
        assert!(matches!(run(mock, items, 10_000).await, Error::Closed));
        assert!(!pending.load(Ordering::Acquire));
        let log = log.lock().unwrap();
        assert!(log.shut_down);
        let mut buf = BytesMut::from(&log.out[..]);
        let mut codec = PulsarCodec::new();
        let mut types = Vec::new();
        while let Some(frame) = codec.decode(&mut buf).unwrap() {
            types.push(Type::try_from(frame.command.r#type).unwrap());
        }
        assert!(buf.is_empty());
        assert_eq!(
            types,
            [
                Type::Ping,
                Type::Send,
                Type::Pong,
                Type::Flow,
                Type::Ack,
                Type::SendReceipt
            ]
        );
    }
}

/// The socket wrapper that watches for progress must not hide the socket's vectored writes
/// (TCP and TLS streams have them): without them every large frame costs its own write.
#[tokio::test]
async fn the_loop_writes_large_frames_with_one_vectored_write() {
    let (mock, log) = Mock::new(usize::MAX, true);
    let items = (0..3u8).map(|i| Outgoing::Raw(block(5000, i))).collect();
    assert!(matches!(run(mock, items, 1 << 20).await, Error::Closed));
    let log = log.lock().unwrap();
    assert_eq!(log.out.len(), 15_000);
    assert_eq!((log.writes, log.vectored_calls, log.most_slices), (0, 1, 3));
}

#[tokio::test(start_paused = true)]
async fn a_vectored_write_counts_as_progress() {
    let (mock, _log) = Mock::new(usize::MAX, true);
    let progress = Arc::new(Progress {
        base: Instant::now(),
        last_ms: AtomicU64::new(0),
    });
    let mut socket = Watched {
        inner: mock,
        progress: progress.clone(),
    };
    assert!(socket.is_write_vectored());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let n = socket
        .write_vectored(&[IoSlice::new(b"ab"), IoSlice::new(b"c")])
        .await
        .unwrap();
    assert_eq!(n, 3);
    assert!(progress.last_ms.load(Ordering::Relaxed) >= 50);
}

#[tokio::test(start_paused = true)]
async fn a_socket_that_stops_taking_bytes_ends_the_loop_after_the_stall_limit() {
    for vectored in [true, false] {
        let (mut mock, _log) = Mock::new(usize::MAX, vectored);
        mock.stuck = true;
        let items = vec![
            Outgoing::Raw(block(5000, 1)),
            Outgoing::Raw(encoded(&Frame::simple(cmd(Type::Ping)))),
        ];
        let started = Instant::now();
        let err = run(mock, items, 1 << 20).await;
        assert!(matches!(err, Error::ConnectionLost(_)), "{err:?}");
        assert!(started.elapsed() >= Duration::from_secs(10));
    }
}
