//! A broker written to misbehave, for the hostile-broker tests (`mod hostile;`).
//!
//! Unlike the mock broker (which behaves like Apache Pulsar), this one is a bare TCP server whose
//! per-connection script is the test: it reads the client's frames, answers the ordinary requests
//! with [`Peer::reply`] when the test wants it to, and otherwise sends whatever the test needs
//! (floods, lies, huge counts, bombs). It encodes frames itself, independently of the crate's codec.
//!
//! The binary that includes this module also gets a counting global allocator, so a test can
//! assert that a hostile broker did not make the client allocate without bound ([`MemWatch`]).
//! Tests that measure memory take [`serial`] so that they do not count each other's allocations.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message as _;
use pulsar_sdk::mock::wire::{self, base_command::Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

// ---------------------------------------------------------------------------------------------
// Memory accounting.

/// Counts the bytes currently allocated by the whole test process and their peak.
pub struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    /// How many allocations this thread made (see [`thread_allocations`]).
    static THREAD_ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many allocations (and reallocations) the calling thread has made so far: a test on a
/// current-thread runtime counts what a synchronous stretch of its own code allocates, whatever
/// the other tests do meanwhile.
pub fn thread_allocations() -> u64 {
    THREAD_ALLOCATIONS.try_with(|c| c.get()).unwrap_or(0)
}

fn grew(size: usize) {
    // `try_with`: nothing to count while the thread's locals are torn down.
    let _ = THREAD_ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
    let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are updated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Watches the process's heap from a starting point.
pub struct MemWatch {
    start: usize,
}

impl MemWatch {
    /// Starts watching: the peak is reset to what is allocated now.
    pub fn start() -> MemWatch {
        let now = CURRENT.load(Ordering::Relaxed);
        PEAK.store(now, Ordering::Relaxed);
        MemWatch { start: now }
    }

    /// How far the heap has grown above the start at its highest, in bytes.
    pub fn peak_growth(&self) -> usize {
        PEAK.load(Ordering::Relaxed).saturating_sub(self.start)
    }

    /// How far the heap is above the start now, in bytes.
    pub fn growth(&self) -> usize {
        CURRENT.load(Ordering::Relaxed).saturating_sub(self.start)
    }

    /// Fails the test if the heap's peak grew by more than `limit` bytes.
    pub fn assert_peak_below(&self, what: &str, limit: usize) {
        let peak = self.peak_growth();
        assert!(
            peak <= limit,
            "{what}: the heap grew by {} KiB at its peak, more than the bound of {} KiB",
            peak / 1024,
            limit / 1024
        );
    }
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs memory-measuring tests one at a time within a test binary.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

// ---------------------------------------------------------------------------------------------
// The broker.

/// A running hostile broker: every accepted connection is handed to the test's script.
pub struct Hostile {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Hostile {
    /// Listens on a free local port; `script` runs once per accepted connection.
    pub async fn start<F, Fut>(script: F) -> Hostile
    where
        F: Fn(Peer) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_nodelay(true);
                let peer = Peer::new(stream, addr, n);
                tokio::spawn(script(peer));
            }
        });
        Hostile {
            addr,
            accepted,
            task,
        }
    }

    /// `pulsar://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("pulsar://{}", self.addr)
    }

    /// The address the broker listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections have been accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One frame received from the client.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The command.
    pub cmd: wire::BaseCommand,
    /// For SEND frames: the message metadata and the payload.
    pub payload: Option<(wire::MessageMetadata, Bytes)>,
}

impl Incoming {
    /// The command's type.
    pub fn ty(&self) -> Type {
        self.cmd.r#type()
    }
}

/// One client connection, seen from the broker's side.
pub struct Peer {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    buf: BytesMut,
    /// The address the broker listens on (what lookups answer).
    pub addr: SocketAddr,
    /// This connection's number, from 0, in accept order.
    pub index: usize,
}

impl Peer {
    fn new(stream: TcpStream, addr: SocketAddr, index: usize) -> Peer {
        let (reader, writer) = stream.into_split();
        Peer {
            reader,
            writer,
            buf: BytesMut::new(),
            addr,
            index,
        }
    }

    /// `pulsar://<addr>`.
    pub fn url(&self) -> String {
        format!("pulsar://{}", self.addr)
    }

    /// The next frame from the client; `None` when the client closed the connection or sent
    /// something this harness cannot parse.
    pub async fn recv(&mut self) -> Option<Incoming> {
        loop {
            if let Some(frame) = self.parse() {
                return Some(frame);
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.reader.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn parse(&mut self) -> Option<Incoming> {
        if self.buf.len() < 4 {
            return None;
        }
        let total = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
        if self.buf.len() < 4 + total {
            return None;
        }
        let mut frame = self.buf.split_to(4 + total).freeze();
        frame.advance(4);
        let cmd_len = frame.get_u32() as usize;
        let cmd = wire::BaseCommand::decode(frame.split_to(cmd_len)).ok()?;
        let payload = if frame.remaining() >= 10 {
            let _magic = frame.get_u16();
            let _crc = frame.get_u32();
            let meta_len = frame.get_u32() as usize;
            let meta = wire::MessageMetadata::decode(frame.split_to(meta_len)).ok()?;
            Some((meta, frame))
        } else {
            None
        };
        Some(Incoming { cmd, payload })
    }

    /// Sends raw bytes.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes).await
    }

    /// Sends a command frame.
    pub async fn send(&mut self, cmd: wire::BaseCommand) -> io::Result<()> {
        self.send_raw(&encode(&cmd, None)).await
    }

    /// Sends a payload frame (MESSAGE): `cmd`, then `metadata` and `data` behind a CRC32C.
    pub async fn send_message(
        &mut self,
        cmd: wire::BaseCommand,
        metadata: &wire::MessageMetadata,
        data: &[u8],
    ) -> io::Result<()> {
        self.send_raw(&encode(&cmd, Some((metadata, data)))).await
    }

    /// Reads CONNECT and answers CONNECTED, advertising `max_message_size` if given.
    pub async fn handshake(&mut self, max_message_size: Option<i32>) -> Option<()> {
        let first = self.recv().await?;
        assert_eq!(first.ty(), Type::Connect, "the client's first frame");
        let connected = wire::BaseCommand {
            r#type: Type::Connected as i32,
            connected: Some(wire::CommandConnected {
                server_version: "hostile".to_owned(),
                protocol_version: Some(21),
                max_message_size,
                feature_flags: None,
            }),
            ..Default::default()
        };
        self.send(connected).await.ok()
    }

    /// What a well-behaved broker answers to `cmd`, for the requests a test usually does not
    /// care about: lookups (to this broker), partitioned metadata (not partitioned), PING,
    /// PRODUCER (success, `last_sequence_id` -1), SUBSCRIBE, CLOSE_*, UNSUBSCRIBE, SEEK.
    /// `None` for commands that get no answer (FLOW, ACK, SEND...).
    pub fn reply(&self, cmd: &wire::BaseCommand) -> Option<wire::BaseCommand> {
        let base = |ty: Type| wire::BaseCommand {
            r#type: ty as i32,
            ..Default::default()
        };
        Some(match cmd.r#type() {
            Type::Lookup => {
                let req = cmd.lookup_topic.as_ref()?;
                let mut c = base(Type::LookupResponse);
                c.lookup_topic_response = Some(wire::CommandLookupTopicResponse {
                    request_id: req.request_id,
                    response: Some(wire::command_lookup_topic_response::LookupType::Connect as i32),
                    broker_service_url: Some(self.url()),
                    authoritative: Some(true),
                    proxy_through_service_url: Some(false),
                    ..Default::default()
                });
                c
            }
            Type::PartitionedMetadata => {
                let req = cmd.partition_metadata.as_ref()?;
                partitions_response(req.request_id, 0)
            }
            Type::Ping => base(Type::Pong),
            Type::Producer => {
                let req = cmd.producer.as_ref()?;
                let mut c = base(Type::ProducerSuccess);
                c.producer_success = Some(wire::CommandProducerSuccess {
                    request_id: req.request_id,
                    producer_name: req
                        .producer_name
                        .clone()
                        .unwrap_or_else(|| format!("hostile-{}", req.producer_id)),
                    last_sequence_id: Some(-1),
                    schema_version: None,
                    topic_epoch: Some(0),
                    producer_ready: Some(true),
                });
                c
            }
            Type::Subscribe => success(cmd.subscribe.as_ref()?.request_id),
            Type::CloseProducer => success(cmd.close_producer.as_ref()?.request_id),
            Type::CloseConsumer => success(cmd.close_consumer.as_ref()?.request_id),
            Type::Unsubscribe => success(cmd.unsubscribe.as_ref()?.request_id),
            Type::Seek => success(cmd.seek.as_ref()?.request_id),
            _ => return None,
        })
    }

    /// Answers every request with [`Peer::reply`] until `stop` says so for a frame (which is
    /// returned unanswered) or the client goes away (`None`).
    pub async fn serve_until(
        &mut self,
        mut stop: impl FnMut(&Incoming) -> bool,
    ) -> Option<Incoming> {
        loop {
            let frame = self.recv().await?;
            if stop(&frame) {
                return Some(frame);
            }
            if let Some(answer) = self.reply(&frame.cmd) {
                self.send(answer).await.ok()?;
            }
        }
    }

    /// Answers every request with [`Peer::reply`] until the client goes away.
    pub async fn serve(&mut self) {
        self.serve_until(|_| false).await;
    }
}

/// A SUCCESS response.
pub fn success(request_id: u64) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::Success as i32,
        success: Some(wire::CommandSuccess {
            request_id,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A PARTITIONED_METADATA_RESPONSE with `partitions`.
pub fn partitions_response(request_id: u64, partitions: u32) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::PartitionedMetadataResponse as i32,
        partition_metadata_response: Some(wire::CommandPartitionedTopicMetadataResponse {
            partitions: Some(partitions),
            request_id,
            response: Some(
                wire::command_partitioned_topic_metadata_response::LookupType::Success as i32,
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A MESSAGE command for `consumer_id` with message id `ledger:entry`.
pub fn message(consumer_id: u64, ledger: u64, entry: u64) -> wire::BaseCommand {
    wire::BaseCommand {
        r#type: Type::Message as i32,
        message: Some(wire::CommandMessage {
            consumer_id,
            message_id: wire::MessageIdData {
                ledger_id: ledger,
                entry_id: entry,
                ..Default::default()
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Message metadata for one plain message.
pub fn metadata(producer: &str, sequence_id: u64) -> wire::MessageMetadata {
    wire::MessageMetadata {
        producer_name: producer.to_owned(),
        sequence_id,
        publish_time: 1,
        ..Default::default()
    }
}

/// Encodes a frame: `[total][cmd size][cmd]` and, with a payload,
/// `[0x0e01][crc32c][metadata size][metadata][data]`.
pub fn encode(
    cmd: &wire::BaseCommand,
    payload: Option<(&wire::MessageMetadata, &[u8])>,
) -> Vec<u8> {
    let cmd_bytes = cmd.encode_to_vec();
    let mut out = BytesMut::new();
    let mut body = BytesMut::new();
    body.put_u32(cmd_bytes.len() as u32);
    body.put_slice(&cmd_bytes);
    if let Some((meta, data)) = payload {
        let meta_bytes = meta.encode_to_vec();
        let mut checked = BytesMut::new();
        checked.put_u32(meta_bytes.len() as u32);
        checked.put_slice(&meta_bytes);
        checked.put_slice(data);
        body.put_u16(0x0e01);
        body.put_u32(crc32c::crc32c(&checked));
        body.put_slice(&checked);
    }
    out.put_u32(body.len() as u32);
    out.put_slice(&body);
    out.to_vec()
}

/// Serves the ordinary requests until the client subscribes; answers the SUBSCRIBE and returns
/// the consumer id.
pub async fn until_subscribed(peer: &mut Peer) -> Option<u64> {
    let sub = peer.serve_until(|f| f.ty() == Type::Subscribe).await?;
    let id = sub.cmd.subscribe.as_ref()?.consumer_id;
    let answer = peer.reply(&sub.cmd)?;
    peer.send(answer).await.ok()?;
    Some(id)
}

/// A batch payload of `n` records, each `[u32 size][SingleMessageMetadata][payload]`.
pub fn batch(records: impl IntoIterator<Item = (wire::SingleMessageMetadata, Vec<u8>)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (mut meta, body) in records {
        meta.payload_size = body.len() as i32;
        let m = meta.encode_to_vec();
        out.extend_from_slice(&(m.len() as u32).to_be_bytes());
        out.extend_from_slice(&m);
        out.extend_from_slice(&body);
    }
    out
}
