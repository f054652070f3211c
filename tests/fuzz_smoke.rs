//! The fuzz targets' smoke run on stable, in CI: every file of the regression corpus
//! (`fuzz/corpus/<target>/`) and a few thousand deterministic mutations of them go through the
//! same entry points as the cargo-fuzz targets in `fuzz/`, asserting that none panics and that
//! none makes the process allocate beyond what the limits allow.
//!
//! The corpus is written by `write_corpus` (ignored): `cargo test --test fuzz_smoke --
//! --ignored write_corpus`.

#[path = "hostile/broker.rs"]
mod hostile;

use std::path::{Path, PathBuf};

use hostile::MemWatch;
use prost::Message as _;
use pulsar_sdk::fuzzing::{self, Outcome};
use pulsar_sdk::mock::wire;

const MB: usize = 1024 * 1024;

type Target = fn(&[u8]) -> Outcome;

/// The targets, with the most any one input may make the process allocate at its peak and
/// the number of mutations to run (fewer where an input may decompress megabytes).
const TARGETS: [(&str, Target, usize, usize); 6] = [
    (
        "frame_decoder",
        fuzzing::target_frame_decoder,
        4 * MB,
        5_000,
    ),
    ("batch", fuzzing::target_batch, 16 * MB, 5_000),
    // The declared size (at most twice the maximum message size) once, and the codec's state.
    (
        "decompress",
        fuzzing::target_decompress,
        2 * fuzzing::FUZZ_MAX_DECOMPRESSED + 4 * MB,
        1_500,
    ),
    (
        "consumer_decode",
        fuzzing::target_consumer_decode,
        2 * fuzzing::FUZZ_MAX_DECOMPRESSED + 16 * MB,
        1_500,
    ),
    // The Avro decoders (issue #31): each decode within its budget (1 MiB + 256 B per payload
    // byte, twice: generic and AUTO_CONSUME) plus the schema's parse.
    ("avro_payload", fuzzing::target_avro_payload, 8 * MB, 3_000),
    ("avro_schema", fuzzing::target_avro_schema, 8 * MB, 3_000),
];

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir(target))
        .unwrap_or_else(|e| panic!("{target}: no corpus: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// xorshift64*: deterministic, so a failure names a reproducible input.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A few random edits like a mutating fuzzer's: bit flips, interesting bytes and sizes,
/// truncation, insertion, duplication.
fn mutate(rng: &mut Rng, data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len());
        match rng.below(6) {
            0 if !v.is_empty() => v[at] ^= 1 << rng.below(8),
            1 if !v.is_empty() => v[at] = [0, 1, 0x7f, 0x80, 0xff][rng.below(5)],
            2 if v.len() >= 4 => {
                let at = rng.below(v.len() - 3);
                let n: u32 = [0, 1, 0x7fff_ffff, u32::MAX, v.len() as u32, 1 << 20][rng.below(6)];
                v[at..at + 4].copy_from_slice(&n.to_be_bytes());
            }
            3 => v.truncate(at),
            4 => {
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                v.splice(at..at, bytes);
            }
            _ => {
                let end = (at + 1 + rng.below(64)).min(v.len());
                let piece = v[at..end].to_vec();
                v.splice(at..at, piece);
            }
        }
    }
    v
}

fn run(target: &str, f: Target, limit: usize, name: &str, input: &[u8]) -> Outcome {
    let mem = MemWatch::start();
    let out = f(input);
    mem.assert_peak_below(&format!("{target}: {name} ({} bytes)", input.len()), limit);
    out
}

#[tokio::test]
async fn corpus_and_mutations_neither_panic_nor_allocate_without_bound() {
    hostile::serial();
    for (target, f, limit, mutations) in TARGETS {
        let started = std::time::Instant::now();
        let files = corpus(target);
        assert!(!files.is_empty(), "{target}: empty corpus");
        let mut accepted = 0;
        for (name, input) in &files {
            accepted += usize::from(!run(target, f, limit, name, input).refused);
        }
        assert!(accepted > 0, "{target}: the corpus has no valid input");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
        for i in 0..mutations {
            let (name, base) = &files[rng.below(files.len())];
            let input = mutate(&mut rng, base);
            run(target, f, limit, &format!("mutation {i} of {name}"), &input);
        }
        eprintln!(
            "{target}: {} files and {mutations} mutations in {:?}",
            files.len(),
            started.elapsed()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The regression corpus.

fn batch_payload(records: &[(wire::SingleMessageMetadata, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (meta, body) in records {
        let mut meta = meta.clone();
        meta.payload_size = body.len() as i32;
        let m = meta.encode_to_vec();
        out.extend_from_slice(&(m.len() as u32).to_be_bytes());
        out.extend_from_slice(&m);
        out.extend_from_slice(body);
    }
    out
}

fn entry(ack_set: &[i64], meta: &wire::MessageMetadata, payload: &[u8]) -> Vec<u8> {
    let cmd = wire::CommandMessage {
        consumer_id: 1,
        message_id: wire::MessageIdData {
            ledger_id: 1,
            entry_id: 2,
            ..Default::default()
        },
        ack_set: ack_set.to_vec(),
        ..Default::default()
    };
    fuzzing::consumer_input(&cmd.encode_to_vec(), &meta.encode_to_vec(), payload)
}

/// Writes `fuzz/corpus/<target>/*.bin`; run after changing an input layout.
#[test]
#[ignore = "writes the corpus files"]
fn write_corpus() {
    let mut files: Vec<(&str, String, Vec<u8>)> = Vec::new();
    let meta = hostile::metadata("corpus", 0);
    let message = hostile::message(1, 1, 2);
    let three = batch_payload(&[
        (
            wire::SingleMessageMetadata {
                partition_key: Some("k".into()),
                properties: vec![wire::KeyValue {
                    key: "a".into(),
                    value: "1".into(),
                }],
                sequence_id: Some(5),
                ..Default::default()
            },
            b"one",
        ),
        (Default::default(), b""),
        (
            wire::SingleMessageMetadata {
                compacted_out: Some(true),
                ..Default::default()
            },
            b"three",
        ),
    ]);
    let mut batch_meta = meta.clone();
    batch_meta.num_messages_in_batch = Some(3);

    // Frames.
    let ping = wire::BaseCommand {
        r#type: wire::base_command::Type::Ping as i32,
        ping: Some(Default::default()),
        ..Default::default()
    };
    let mut stream = hostile::encode(&ping, None);
    stream.extend(hostile::encode(&message, Some((&meta, b"hello"))));
    stream.extend(hostile::encode(&message, Some((&batch_meta, &three))));
    files.push((
        "frame_decoder",
        "frames".into(),
        [&[3u8][..], &stream].concat(),
    ));
    files.push((
        "frame_decoder",
        "frames-bytewise".into(),
        [&[0u8][..], &stream].concat(),
    ));
    let mut lying = hostile::encode(&message, Some((&meta, b"hello")));
    lying[..4].copy_from_slice(&u32::MAX.to_be_bytes());
    files.push((
        "frame_decoder",
        "lying-total-size".into(),
        [&[1u8][..], &lying].concat(),
    ));

    // Batches.
    files.push((
        "batch",
        "three".into(),
        [&3u32.to_be_bytes()[..], &three].concat(),
    ));
    files.push((
        "batch",
        "empty-records".into(),
        [&256u32.to_be_bytes()[..], &[0u8; 1024][..]].concat(),
    ));
    files.push((
        "batch",
        "count-too-large".into(),
        [&u32::MAX.to_be_bytes()[..], &three].concat(),
    ));

    // Decompression: each codec's bomb (zeros) and a small payload.
    let zeros = vec![0u8; 10 * MB];
    for (kind, name) in [(1, "lz4"), (2, "zlib"), (3, "zstd"), (4, "snappy")] {
        // Snappy compresses at most ~21:1: its bomb is 1 MiB, to keep the corpus small.
        let size = if kind == 4 { MB } else { 10 * MB };
        let bomb = fuzzing::compress(kind, &zeros[..size]).unwrap();
        let mut input = vec![kind as u8];
        input.extend_from_slice(&(size as u32).to_be_bytes());
        input.extend_from_slice(&bomb);
        files.push(("decompress", format!("bomb-{name}"), input));
        let small = fuzzing::compress(kind, b"hello hello hello hello").unwrap();
        let mut input = vec![kind as u8];
        input.extend_from_slice(&23u32.to_be_bytes());
        input.extend_from_slice(&small);
        files.push(("decompress", format!("small-{name}"), input));

        // Case 4: the bomb as 2.6 M four-byte records, one delivered by the ack set; and
        // claiming one record more than the bytes hold.
        let mut m = meta.clone();
        m.compression = Some(kind);
        m.uncompressed_size = Some(size as u32);
        m.num_messages_in_batch = Some((size / 4) as i32);
        files.push((
            "consumer_decode",
            format!("case4-bomb-{name}"),
            entry(&[1], &m, &bomb),
        ));
        m.num_messages_in_batch = Some((size / 4) as i32 + 1);
        files.push((
            "consumer_decode",
            format!("case4-lying-count-{name}"),
            entry(&[1], &m, &bomb),
        ));
    }

    // The consumer's decode.
    files.push((
        "consumer_decode",
        "single".into(),
        entry(&[], &meta, b"hello"),
    ));
    files.push((
        "consumer_decode",
        "batch".into(),
        entry(&[], &batch_meta, &three),
    ));
    files.push((
        "consumer_decode",
        "batch-ack-set".into(),
        entry(&[0b101], &batch_meta, &three),
    ));
    // Case 3: a huge producer name over tiny records; many outer properties.
    let tiny = batch_payload(&vec![(Default::default(), &b""[..]); 2_000]);
    let mut m = hostile::metadata(&"p".repeat(20 * 1024), 0);
    m.num_messages_in_batch = Some(2_000);
    files.push((
        "consumer_decode",
        "case3-producer-name".into(),
        entry(&[], &m, &tiny),
    ));
    let mut m = meta.clone();
    m.num_messages_in_batch = Some(2_000);
    m.properties = (0..2_000)
        .map(|i| wire::KeyValue {
            key: format!("key-{i}"),
            value: "v".into(),
        })
        .collect();
    files.push((
        "consumer_decode",
        "case3-outer-properties".into(),
        entry(&[], &m, &tiny),
    ));

    avro_corpus(&mut files);

    for (target, name, bytes) in files {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
    }
}

/// A zig-zag varint, as Avro writes longs (counts, lengths, union indices).
fn zigzag(v: i64) -> Vec<u8> {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
    out
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// The Avro targets' corpus: a valid datum per schema of `fuzzing::AVRO_SCHEMAS`, and the
/// inputs of issue #31 that crashed or bloated the decoder.
fn avro_corpus(files: &mut Vec<(&'static str, String, Vec<u8>)>) {
    let mut payload = |name: &str, schema: u8, bytes: Vec<u8>| {
        files.push(("avro_payload", name.into(), cat(&[&[schema], &bytes])))
    };
    // Valid: tags [null, "ab"]; a 3-element list; a small tree; a map; empty records; the
    // record of enum/fixed/double/boolean; logical types; an array of maps.
    payload(
        "tags",
        0,
        cat(&[&zigzag(2), &[0, 2], &zigzag(2), b"ab", &[0]]),
    );
    payload("list", 1, vec![2, 2, 4, 2, 6, 0]);
    payload("tree", 2, vec![2, 0, 2, 0, 0, 0]);
    payload(
        "map",
        3,
        cat(&[&zigzag(1), &zigzag(1), b"k", &zigzag(2), &[0, 0]]),
    );
    payload("empty-records", 4, vec![6, 0]);
    payload(
        "record",
        5,
        cat(&[&[2], b"abcd", &1.5f64.to_le_bytes(), &[1]]),
    );
    let uuid = b"123e4567-e89b-12d3-a456-426614174000";
    payload(
        "logical",
        6,
        cat(&[
            &zigzag(uuid.len() as i64),
            uuid,
            &zigzag(1_700_000_000_000),
            &[4, 1, 0],
        ]),
    );
    payload("maps", 7, cat(&[&[2, 2, 2], b"a", &[2, 4, 0, 0]]));
    // Crashes and bloat before the limits: 100 M items in 5 bytes; a 10,000-deep list; 1 M
    // zero-sized items; a 4 GiB string; a negative block count of i64::MIN.
    payload("count-100m", 0, zigzag(100_000_000));
    payload("deep-list", 1, {
        let mut v = [2u8, 2].repeat(10_000);
        v.extend([0, 0]);
        v
    });
    payload("zero-sized-1m", 4, cat(&[&zigzag(1_000_000), &[0]]));
    payload(
        "null-items-1m",
        3,
        cat(&[&[2, 2], b"k", &zigzag(1_000_000), &[0, 0]]),
    );
    payload("string-4g", 0, cat(&[&[2, 2], &zigzag(1 << 32)]));
    payload("block-min", 7, cat(&[&zigzag(i64::MIN), &[0]]));

    let mut schema = |name: &str, def: &str, bytes: &[u8]| {
        let len = (def.len() as u16).to_be_bytes();
        files.push((
            "avro_schema",
            name.into(),
            cat(&[&len, def.as_bytes(), bytes]),
        ))
    };
    schema("string", r#""string""#, &cat(&[&zigzag(2), b"hi"]));
    schema(
        "tags",
        fuzzing::AVRO_SCHEMAS[0],
        &cat(&[&[2, 2], &zigzag(1), b"x", &[0]]),
    );
    schema(
        "recursive",
        r#"{"type":"record","name":"A","fields":[{"name":"a","type":"A"}]}"#,
        &[0; 8],
    );
    schema(
        "recursive-pair",
        r#"{"type":"record","name":"A","fields":[{"name":"b","type":{"type":"record","name":"B","fields":[{"name":"a","type":"A"}]}}]}"#,
        &[0; 8],
    );
    // apache-avro panics on an invalid record name (found by this smoke run).
    schema(
        "invalid-name",
        "{\"type\":\"record\",\"name\":\"T\u{e9}gs\",\"fields\":[]}",
        &[],
    );
    let deep = format!(
        "{}\"int\"{}",
        r#"{"type":"array","items":"#.repeat(100),
        "}".repeat(100)
    );
    schema("deep-definition", &deep, &cat(&[&[2u8; 100], &[0u8; 101]]));
}
