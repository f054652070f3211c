//! Payload compression, byte-compatible with the official Java and C++ clients.
//!
//! The codecs and their wire formats (as the upstream clients produce and accept them):
//!
//! | type | format on the wire | upstream |
//! | --- | --- | --- |
//! | `LZ4` | a raw LZ4 *block*, no size prefix and no frame | C++ `LZ4_compress_default` / `LZ4_decompress_fast`; Java airlift `Lz4Compressor` |
//! | `ZLIB` | a zlib stream (RFC 1950: header, deflate data, Adler-32) | C++ zlib `compress` / `inflate`; Java `Deflater`/`Inflater` |
//! | `ZSTD` | a standard zstd frame, level 3 | C++ `ZSTD_compress(.., 3)`; Java airlift `ZstdCompressor` with level 3 |
//! | `SNAPPY` | the raw snappy block format (varint length + elements), not the framed format | C++ `snappy::Compress`; Java airlift `SnappyCompressor` |
//!
//! The uncompressed size is not part of the compressed bytes for any codec: it travels in
//! `MessageMetadata.uncompressed_size`, and `decompress` requires it.
//!
//! Note on ZLIB: the Java client's encoder ends its stream with a `SYNC_FLUSH` and never
//! finishes it (no final block, no Adler-32 trailer), and for an empty payload it writes nothing
//! at all; both official decoders accept that. `decompress` accepts it too, while
//! `compress` writes a complete stream, as the C++ client does.
//!
//! Each codec sits behind a cargo feature (`lz4`, `zlib`, `zstd`, `snappy`, all on by
//! default); without it, compressing or decompressing with that codec returns
//! [`Error::InvalidConfig`].
// Wired into the producer and consumer by other modules; until then parts are only used by tests.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::proto;

/// The compression codec applied to a message (or batch) payload.
///
/// Parses from and displays as the lower-case name (`"none"`, `"lz4"`, `"zlib"`, `"zstd"`,
/// `"snappy"`); parsing ignores case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CompressionType {
    /// No compression.
    #[default]
    None,
    /// LZ4 block format (cargo feature `lz4`).
    Lz4,
    /// zlib / deflate (cargo feature `zlib`).
    Zlib,
    /// Zstandard (cargo feature `zstd`).
    Zstd,
    /// Snappy raw format (cargo feature `snappy`).
    Snappy,
}

impl CompressionType {
    /// Every compression type, in protocol order.
    pub const ALL: [CompressionType; 5] = [
        CompressionType::None,
        CompressionType::Lz4,
        CompressionType::Zlib,
        CompressionType::Zstd,
        CompressionType::Snappy,
    ];

    /// The lower-case name, as used by [`fmt::Display`] and [`FromStr`].
    pub const fn as_str(self) -> &'static str {
        match self {
            CompressionType::None => "none",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zlib => "zlib",
            CompressionType::Zstd => "zstd",
            CompressionType::Snappy => "snappy",
        }
    }

    /// Whether this build can compress and decompress with this codec (its cargo feature is on).
    pub const fn is_available(self) -> bool {
        match self {
            CompressionType::None => true,
            CompressionType::Lz4 => cfg!(feature = "lz4"),
            CompressionType::Zlib => cfg!(feature = "zlib"),
            CompressionType::Zstd => cfg!(feature = "zstd"),
            CompressionType::Snappy => cfg!(feature = "snappy"),
        }
    }

    /// The cargo feature that enables this codec (`None` needs none).
    const fn feature(self) -> &'static str {
        match self {
            CompressionType::None => "",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zlib => "zlib",
            CompressionType::Zstd => "zstd",
            CompressionType::Snappy => "snappy",
        }
    }

    /// The protocol's `CompressionType` value, for `MessageMetadata.compression`.
    pub(crate) fn to_proto(self) -> i32 {
        let p = match self {
            CompressionType::None => proto::CompressionType::None,
            CompressionType::Lz4 => proto::CompressionType::Lz4,
            CompressionType::Zlib => proto::CompressionType::Zlib,
            CompressionType::Zstd => proto::CompressionType::Zstd,
            CompressionType::Snappy => proto::CompressionType::Snappy,
        };
        p as i32
    }

    /// Maps `MessageMetadata.compression` back; a value this client does not know is an error
    /// (the payload cannot be read).
    pub(crate) fn from_proto(value: i32) -> Result<Self> {
        match proto::CompressionType::try_from(value) {
            Ok(proto::CompressionType::None) => Ok(CompressionType::None),
            Ok(proto::CompressionType::Lz4) => Ok(CompressionType::Lz4),
            Ok(proto::CompressionType::Zlib) => Ok(CompressionType::Zlib),
            Ok(proto::CompressionType::Zstd) => Ok(CompressionType::Zstd),
            Ok(proto::CompressionType::Snappy) => Ok(CompressionType::Snappy),
            Err(_) => Err(Error::Protocol(format!(
                "unknown compression type {value} in message metadata"
            ))),
        }
    }

    fn unavailable(self) -> Error {
        Error::InvalidConfig(format!(
            "{self} compression is not available: pulsar-sdk was compiled without the `{}` feature",
            self.feature()
        ))
    }
}

impl fmt::Display for CompressionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CompressionType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        CompressionType::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "unknown compression type `{s}` (expected one of none, lz4, zlib, zstd, snappy)"
                ))
            })
    }
}

/// The zstd level the official clients use (C++ `COMPRESSION_LEVEL`, Java
/// `ZSTD_COMPRESSION_LEVEL`).
#[cfg(feature = "zstd")]
const ZSTD_LEVEL: i32 = 3;

/// Compresses `data` with `kind`, in the format the official clients read.
///
/// `None` returns a copy of `data`. Fails only when the codec's cargo feature is off (or, for
/// snappy, for an input over 4 GiB).
pub(crate) fn compress(kind: CompressionType, data: &[u8]) -> Result<Bytes> {
    match kind {
        CompressionType::None => Ok(Bytes::copy_from_slice(data)),
        CompressionType::Lz4 => lz4_compress(data),
        CompressionType::Zlib => zlib_compress(data),
        CompressionType::Zstd => zstd_compress(data),
        CompressionType::Snappy => snappy_compress(data),
    }
}

/// Decompresses `data` (compressed with `kind`) that must expand to exactly
/// `uncompressed_size` bytes (`MessageMetadata.uncompressed_size`).
///
/// Safe on hostile input: an `uncompressed_size` above `max_size` is refused before anything is
/// allocated, at most `uncompressed_size` (+1) bytes are ever allocated, corrupt data is an
/// error, and so is output longer or shorter than `uncompressed_size`. All of these are
/// [`Error::Protocol`] (the broker delivered something unreadable).
///
/// `None` returns a copy of `data` (checked against `max_size` only, since other clients may
/// leave `uncompressed_size` unset); callers holding `Bytes` should skip the call for `None`.
pub(crate) fn decompress(
    kind: CompressionType,
    data: &[u8],
    uncompressed_size: usize,
    max_size: usize,
) -> Result<Bytes> {
    if kind == CompressionType::None {
        if data.len() > max_size {
            return Err(Error::Protocol(format!(
                "payload of {} bytes exceeds the limit of {max_size} bytes",
                data.len()
            )));
        }
        return Ok(Bytes::copy_from_slice(data));
    }
    if !kind.is_available() {
        return Err(kind.unavailable());
    }
    if uncompressed_size > max_size {
        return Err(Error::Protocol(format!(
            "{kind} payload declares an uncompressed size of {uncompressed_size} bytes, above \
             the limit of {max_size} bytes"
        )));
    }
    // An empty payload may compress to nothing at all (the Java ZLIB encoder writes no bytes
    // for empty input).
    if uncompressed_size == 0 && data.is_empty() {
        return Ok(Bytes::new());
    }
    let out = match kind {
        CompressionType::None => unreachable!("handled above"),
        CompressionType::Lz4 => lz4_decompress(data, uncompressed_size)?,
        CompressionType::Zlib => zlib_decompress(data, uncompressed_size)?,
        CompressionType::Zstd => zstd_decompress(data, uncompressed_size)?,
        CompressionType::Snappy => snappy_decompress(data, uncompressed_size)?,
    };
    if out.len() != uncompressed_size {
        return Err(size_mismatch(kind, out.len(), uncompressed_size));
    }
    Ok(Bytes::from(out))
}

#[cfg_attr(
    not(any(
        feature = "lz4",
        feature = "zlib",
        feature = "zstd",
        feature = "snappy"
    )),
    allow(dead_code)
)]
fn corrupt(kind: CompressionType, detail: impl fmt::Display) -> Error {
    Error::Protocol(format!("corrupt {kind} payload: {detail}"))
}

fn size_mismatch(kind: CompressionType, got: usize, expected: usize) -> Error {
    Error::Protocol(format!(
        "{kind} payload decompressed to {got} bytes, but its metadata declares {expected}"
    ))
}

// ---- LZ4 ----------------------------------------------------------------------------------

#[cfg(feature = "lz4")]
fn lz4_compress(data: &[u8]) -> Result<Bytes> {
    Ok(Bytes::from(lz4_flex::block::compress(data)))
}

#[cfg(feature = "lz4")]
fn lz4_decompress(data: &[u8], uncompressed_size: usize) -> Result<Vec<u8>> {
    let mut out = vec![0u8; uncompressed_size];
    let n = lz4_flex::block::decompress_into(data, &mut out)
        .map_err(|e| corrupt(CompressionType::Lz4, e))?;
    out.truncate(n);
    Ok(out)
}

#[cfg(not(feature = "lz4"))]
fn lz4_compress(_data: &[u8]) -> Result<Bytes> {
    Err(CompressionType::Lz4.unavailable())
}

#[cfg(not(feature = "lz4"))]
fn lz4_decompress(_data: &[u8], _uncompressed_size: usize) -> Result<Vec<u8>> {
    Err(CompressionType::Lz4.unavailable())
}

// ---- ZLIB ---------------------------------------------------------------------------------

#[cfg(feature = "zlib")]
fn zlib_compress(data: &[u8]) -> Result<Bytes> {
    use std::io::Write;
    let mut enc = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(data.len() / 2 + 64),
        flate2::Compression::default(),
    );
    // Writing into a Vec cannot fail.
    enc.write_all(data)
        .and_then(|()| enc.finish())
        .map(Bytes::from)
        .map_err(|e| Error::InvalidConfig(format!("zlib compression failed: {e}")))
}

#[cfg(feature = "zlib")]
fn zlib_decompress(data: &[u8], uncompressed_size: usize) -> Result<Vec<u8>> {
    use flate2::{Decompress, FlushDecompress, Status};

    let kind = CompressionType::Zlib;
    // One spare byte tells "exactly the declared size" from "more than declared" without
    // ever inflating past the limit.
    let mut out = vec![0u8; uncompressed_size + 1];
    let mut inflater = Decompress::new(true);
    loop {
        let consumed = usize::try_from(inflater.total_in()).unwrap_or(usize::MAX);
        let produced = usize::try_from(inflater.total_out()).unwrap_or(usize::MAX);
        let (Some(input), Some(output)) = (data.get(consumed..), out.get_mut(produced..)) else {
            break;
        };
        let status = inflater
            .decompress(input, output, FlushDecompress::None)
            .map_err(|e| corrupt(kind, e))?;
        let progressed =
            inflater.total_in() as usize != consumed || inflater.total_out() as usize != produced;
        match status {
            Status::StreamEnd => break,
            // A Java stream ends with a sync flush and no final block: once the input is
            // used up no more progress is made, and the size check below decides.
            Status::Ok | Status::BufError if progressed => continue,
            Status::Ok | Status::BufError => break,
        }
    }
    let produced = usize::try_from(inflater.total_out()).unwrap_or(usize::MAX);
    if produced > uncompressed_size {
        return Err(Error::Protocol(format!(
            "zlib payload decompresses to more than the {uncompressed_size} bytes its metadata \
             declares"
        )));
    }
    out.truncate(produced);
    Ok(out)
}

#[cfg(not(feature = "zlib"))]
fn zlib_compress(_data: &[u8]) -> Result<Bytes> {
    Err(CompressionType::Zlib.unavailable())
}

#[cfg(not(feature = "zlib"))]
fn zlib_decompress(_data: &[u8], _uncompressed_size: usize) -> Result<Vec<u8>> {
    Err(CompressionType::Zlib.unavailable())
}

// ---- ZSTD ---------------------------------------------------------------------------------

#[cfg(feature = "zstd")]
fn zstd_compress(data: &[u8]) -> Result<Bytes> {
    zstd::bulk::compress(data, ZSTD_LEVEL)
        .map(Bytes::from)
        .map_err(|e| Error::InvalidConfig(format!("zstd compression failed: {e}")))
}

#[cfg(feature = "zstd")]
fn zstd_decompress(data: &[u8], uncompressed_size: usize) -> Result<Vec<u8>> {
    // `capacity` bounds the output: a frame expanding beyond it is an error, not a reallocation.
    zstd::bulk::decompress(data, uncompressed_size).map_err(|e| corrupt(CompressionType::Zstd, e))
}

#[cfg(not(feature = "zstd"))]
fn zstd_compress(_data: &[u8]) -> Result<Bytes> {
    Err(CompressionType::Zstd.unavailable())
}

#[cfg(not(feature = "zstd"))]
fn zstd_decompress(_data: &[u8], _uncompressed_size: usize) -> Result<Vec<u8>> {
    Err(CompressionType::Zstd.unavailable())
}

// ---- SNAPPY -------------------------------------------------------------------------------

#[cfg(feature = "snappy")]
fn snappy_compress(data: &[u8]) -> Result<Bytes> {
    snap::raw::Encoder::new()
        .compress_vec(data)
        .map(Bytes::from)
        .map_err(|e| Error::InvalidConfig(format!("snappy compression failed: {e}")))
}

#[cfg(feature = "snappy")]
fn snappy_decompress(data: &[u8], uncompressed_size: usize) -> Result<Vec<u8>> {
    let kind = CompressionType::Snappy;
    // The raw format starts with the uncompressed length; check it before allocating.
    let declared = snap::raw::decompress_len(data).map_err(|e| corrupt(kind, e))?;
    if declared != uncompressed_size {
        return Err(size_mismatch(kind, declared, uncompressed_size));
    }
    let mut out = vec![0u8; uncompressed_size];
    let n = snap::raw::Decoder::new()
        .decompress(data, &mut out)
        .map_err(|e| corrupt(kind, e))?;
    out.truncate(n);
    Ok(out)
}

#[cfg(not(feature = "snappy"))]
fn snappy_compress(_data: &[u8]) -> Result<Bytes> {
    Err(CompressionType::Snappy.unavailable())
}

#[cfg(not(feature = "snappy"))]
fn snappy_decompress(_data: &[u8], _uncompressed_size: usize) -> Result<Vec<u8>> {
    Err(CompressionType::Snappy.unavailable())
}

#[cfg(test)]
#[cfg(not(all(
    feature = "lz4",
    feature = "zlib",
    feature = "zstd",
    feature = "snappy"
)))]
mod feature_off_tests {
    use super::*;

    #[test]
    fn disabled_codecs_report_the_missing_feature() {
        for kind in CompressionType::ALL {
            if kind.is_available() {
                continue;
            }
            let err = compress(kind, b"x").unwrap_err();
            assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
            assert!(err.to_string().contains(kind.feature()), "{err}");
            assert!(decompress(kind, b"x", 1, 10).is_err());
        }
    }
}

// The codec tests need every codec compiled in (the default features).
#[cfg(test)]
#[cfg(all(
    feature = "lz4",
    feature = "zlib",
    feature = "zstd",
    feature = "snappy"
))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: usize = 10 * 1024 * 1024;

    const CODECS: [CompressionType; 4] = [
        CompressionType::Lz4,
        CompressionType::Zlib,
        CompressionType::Zstd,
        CompressionType::Snappy,
    ];

    /// The input of the known-answer vectors below (39 bytes).
    const KAT_INPUT: &[u8] = b"hello pulsar hello pulsar hello pulsar!";

    // Known-answer vectors: KAT_INPUT compressed by the reference C libraries through their
    // Python bindings (the same libraries the C++ client links):
    // `lz4.block.compress(data, store_size=False)` (lz4 4.4.5), `zlib.compress(data)`,
    // `zstandard.ZstdCompressor(level=3).compress(data)` (zstandard 0.25.0) and
    // `snappy.compress(data)` (python-snappy).
    const KAT_LZ4: &[u8] = &[
        0xdf, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x20, 0x70, 0x75, 0x6c, 0x73, 0x61, 0x72, 0x20, 0x0d,
        0x00, 0x02, 0x50, 0x6c, 0x73, 0x61, 0x72, 0x21,
    ];
    const KAT_ZLIB: &[u8] = &[
        0x78, 0x9c, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0x57, 0x28, 0x28, 0xcd, 0x29, 0x4e, 0x2c, 0x52,
        0xc8, 0xc0, 0xc5, 0x51, 0x04, 0x00, 0x2a, 0xf0, 0x0e, 0xc3,
    ];
    /// What the Java client's `Deflater` + `SYNC_FLUSH` (never `finish()`) produces: zlib's
    /// `compressobj().compress(data) + flush(Z_SYNC_FLUSH)`: no final block, no Adler-32.
    const KAT_ZLIB_JAVA_SYNC_FLUSH: &[u8] = &[
        0x78, 0x9c, 0xca, 0x48, 0xcd, 0xc9, 0xc9, 0x57, 0x28, 0x28, 0xcd, 0x29, 0x4e, 0x2c, 0x52,
        0xc8, 0xc0, 0xc5, 0x51, 0x04, 0x00, 0x00, 0x00, 0xff, 0xff,
    ];
    const KAT_ZSTD: &[u8] = &[
        0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x27, 0xa5, 0x00, 0x00, 0x70, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
        0x20, 0x70, 0x75, 0x6c, 0x73, 0x61, 0x72, 0x20, 0x21, 0x01, 0x00, 0xb0, 0xcc, 0x2f,
    ];
    const KAT_SNAPPY: &[u8] = &[
        0x27, 0x30, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x20, 0x70, 0x75, 0x6c, 0x73, 0x61, 0x72, 0x20,
        0x62, 0x0d, 0x00, 0x00, 0x21,
    ];

    fn round_trip(kind: CompressionType, data: &[u8]) {
        let c = compress(kind, data).unwrap();
        let d = decompress(kind, &c, data.len(), MAX).unwrap();
        assert_eq!(&d[..], data, "{kind} round trip of {} bytes", data.len());
    }

    fn pseudo_random(n: usize) -> Vec<u8> {
        // xorshift: incompressible enough for every codec here.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn names_parse_and_display() {
        for t in CompressionType::ALL {
            assert_eq!(t.to_string().parse::<CompressionType>().unwrap(), t);
            assert_eq!(
                t.to_string()
                    .to_uppercase()
                    .parse::<CompressionType>()
                    .unwrap(),
                t
            );
        }
        assert_eq!(
            "ZStd".parse::<CompressionType>().unwrap(),
            CompressionType::Zstd
        );
        assert_eq!(CompressionType::default(), CompressionType::None);
        assert_eq!(CompressionType::Snappy.to_string(), "snappy");
        let err = "gzip".parse::<CompressionType>().unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)));
        assert!(err.to_string().contains("gzip"), "{err}");
    }

    #[test]
    fn proto_values_match_the_protocol() {
        let expected = [0, 1, 2, 3, 4];
        for (t, v) in CompressionType::ALL.into_iter().zip(expected) {
            assert_eq!(t.to_proto(), v);
            assert_eq!(CompressionType::from_proto(v).unwrap(), t);
        }
        assert!(matches!(
            CompressionType::from_proto(5),
            Err(Error::Protocol(_))
        ));
        assert!(matches!(
            CompressionType::from_proto(-1),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn round_trips_empty_small_large_and_incompressible() {
        let large: Vec<u8> = b"pulsar batch payload "
            .iter()
            .copied()
            .cycle()
            .take(3 * 1024 * 1024 + 7)
            .collect();
        let random = pseudo_random(256 * 1024 + 3);
        for kind in CODECS {
            round_trip(kind, b"");
            round_trip(kind, b"x");
            round_trip(kind, KAT_INPUT);
            round_trip(kind, &large);
            round_trip(kind, &random);
            let c = compress(kind, &large).unwrap();
            assert!(
                c.len() < large.len() / 10,
                "{kind} compresses repetitive data"
            );
        }
        round_trip(CompressionType::None, KAT_INPUT);
    }

    #[test]
    fn decompresses_reference_library_output() {
        let cases: [(CompressionType, &[u8]); 5] = [
            (CompressionType::Lz4, KAT_LZ4),
            (CompressionType::Zlib, KAT_ZLIB),
            (CompressionType::Zlib, KAT_ZLIB_JAVA_SYNC_FLUSH),
            (CompressionType::Zstd, KAT_ZSTD),
            (CompressionType::Snappy, KAT_SNAPPY),
        ];
        for (kind, compressed) in cases {
            let d = decompress(kind, compressed, KAT_INPUT.len(), MAX).unwrap();
            assert_eq!(&d[..], KAT_INPUT, "{kind}");
            // A wrong declared size is caught either way.
            assert!(
                decompress(kind, compressed, KAT_INPUT.len() - 1, MAX).is_err(),
                "{kind}"
            );
            assert!(
                decompress(kind, compressed, KAT_INPUT.len() + 1, MAX).is_err(),
                "{kind}"
            );
        }
    }

    #[test]
    fn our_output_has_the_reference_framing() {
        // zlib header (CMF 0x78, default level FLG 0x9c) and a 4-byte Adler-32 trailer.
        let z = compress(CompressionType::Zlib, KAT_INPUT).unwrap();
        assert_eq!(&z[..2], &[0x78, 0x9c]);
        assert_eq!(&z[z.len() - 4..], &KAT_ZLIB[KAT_ZLIB.len() - 4..]);
        // zstd frame magic number.
        let z = compress(CompressionType::Zstd, KAT_INPUT).unwrap();
        assert_eq!(&z[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
        // snappy raw: starts with the varint length (39), no stream identifier chunk.
        let s = compress(CompressionType::Snappy, KAT_INPUT).unwrap();
        assert_eq!(s[0], 39);
        // lz4 block: no size prefix and no frame magic; it starts straight with the first
        // sequence's token (13 literals, then a match), like the reference encoder's output.
        // (Encoders may pick different matches, so the bytes after that can differ.)
        let l = compress(CompressionType::Lz4, KAT_INPUT).unwrap();
        assert_eq!(&l[..14], &KAT_LZ4[..14]);
    }

    /// Writes our compressed output to /tmp for checking with the reference libraries:
    /// `cargo test --lib dump_for_reference_check -- --ignored`.
    #[test]
    #[ignore]
    fn dump_for_reference_check() {
        let inputs: [&[u8]; 3] = [b"", KAT_INPUT, &pseudo_random(100_000)];
        for (i, input) in inputs.iter().enumerate() {
            std::fs::write(format!("/tmp/pulsar-sdk-ref-{i}.raw"), input).unwrap();
            for kind in CODECS {
                let c = compress(kind, input).unwrap();
                std::fs::write(format!("/tmp/pulsar-sdk-ref-{i}.{kind}"), &c).unwrap();
            }
        }
    }

    #[test]
    fn empty_payload_compressed_to_nothing_is_accepted() {
        // The Java ZLIB encoder writes zero bytes for an empty payload.
        for kind in CODECS {
            assert!(decompress(kind, b"", 0, MAX).unwrap().is_empty());
            assert!(decompress(kind, b"", 1, MAX).is_err());
        }
    }

    #[test]
    fn declared_size_above_the_limit_is_refused_before_allocating() {
        for kind in CODECS {
            let err = decompress(kind, KAT_INPUT, usize::MAX, MAX).unwrap_err();
            assert!(matches!(err, Error::Protocol(_)), "{kind}: {err}");
            assert!(decompress(kind, KAT_INPUT, MAX + 1, MAX).is_err());
        }
        assert!(decompress(CompressionType::None, KAT_INPUT, 0, 10).is_err());
        assert_eq!(
            &decompress(CompressionType::None, KAT_INPUT, 0, MAX).unwrap()[..],
            KAT_INPUT
        );
    }

    #[test]
    fn zlib_bomb_is_cut_at_the_declared_size() {
        let big = vec![0u8; 1 << 20];
        let c = compress(CompressionType::Zlib, &big).unwrap();
        let err = decompress(CompressionType::Zlib, &c, 1000, MAX).unwrap_err();
        assert!(matches!(err, Error::Protocol(_)));
        for kind in CODECS {
            let c = compress(kind, &big).unwrap();
            assert!(decompress(kind, &c, 1000, MAX).is_err(), "{kind}");
            assert!(
                decompress(kind, &c[..c.len() / 2], big.len(), MAX).is_err(),
                "{kind}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn garbage_never_panics(
            data in proptest::collection::vec(any::<u8>(), 0..512),
            size in 0usize..4096,
        ) {
            for kind in CODECS {
                let _ = decompress(kind, &data, size, 4096);
            }
        }

        #[test]
        fn corrupted_output_never_panics(
            input in proptest::collection::vec(any::<u8>(), 0..1024),
            flip in any::<usize>(),
            byte in any::<u8>(),
        ) {
            for kind in CODECS {
                let mut c = compress(kind, &input).unwrap().to_vec();
                if !c.is_empty() {
                    let i = flip % c.len();
                    c[i] ^= byte | 1;
                }
                let _ = decompress(kind, &c, input.len(), 4096);
            }
        }

        #[test]
        fn arbitrary_round_trip(input in proptest::collection::vec(any::<u8>(), 0..4096)) {
            for kind in CODECS {
                let c = compress(kind, &input).unwrap();
                prop_assert_eq!(&decompress(kind, &c, input.len(), 4096).unwrap()[..], &input[..]);
            }
        }
    }
}
