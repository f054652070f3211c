//! Key_Shared hashing, as upstream's broker does it: Murmur3 (x86, 32-bit, seed 0) over the
//! sticky key, slots in a 65536-wide hash range, and a consistent-hash ring of consumer points.
//! Written for the mock from the published algorithm; upstream's classes are named on each item.

use std::borrow::Cow;

/// The hash range size (upstream `StickyKeyConsumerSelector.DEFAULT_RANGE_SIZE = 2 << 15`).
pub(crate) const RANGE_SIZE: u32 = 65536;

/// Hash ring points per consumer (upstream broker setting
/// `subscriptionKeySharedConsistentHashingReplicaPoints`, default 100).
pub(crate) const RING_POINTS: u32 = 100;

/// MurmurHash3 x86 32-bit with seed 0 (upstream `org.apache.pulsar.common.util.Murmur3_32Hash`
/// computes this, then clears the sign bit in `makeHash`).
pub(crate) fn murmur3_32(bytes: &[u8]) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mix_k1 = |k: u32| k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    let mut h: u32 = 0;
    let mut chunks = bytes.chunks_exact(4);
    for chunk in &mut chunks {
        let k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        h ^= mix_k1(k);
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    let k = tail
        .iter()
        .enumerate()
        .fold(0u32, |k, (i, b)| k ^ (u32::from(*b) << (8 * i)));
    h ^= mix_k1(k);
    h ^= bytes.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The slot of a key in the hash range: upstream `StickyKeyConsumerSelectorUtils.makeStickyKeyHash`
/// with the selectors' key hash range `1..=65535` (0 is `STICKY_KEY_HASH_NOT_SET`):
/// `(murmur3 & Integer.MAX_VALUE) % 65535 + 1`.
pub(crate) fn sticky_key_hash(key: &[u8]) -> u32 {
    (murmur3_32(key) & 0x7fff_ffff) % (RANGE_SIZE - 1) + 1
}

/// The ring point `point` of a consumer named `name` (upstream
/// `ConsistentHashingStickyKeyConsumerSelector.calculateHashForConsumerAndIndex`: the hash of
/// `name + "\0" + nameIndex + "\0" + point`, `nameIndex` telling apart consumers of one name).
pub(crate) fn ring_point(name: &str, name_index: u32, point: u32) -> u32 {
    sticky_key_hash(format!("{name}\0{name_index}\0{point}").as_bytes())
}

/// Decodes standard base64 (RFC 4648 alphabet, `=` padding optional but, if present, whole),
/// as Java's `Base64.getDecoder()`; `None` where that would throw.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let pad = bytes.iter().rev().take_while(|c| **c == b'=').count();
    if pad > 2 || (pad > 0 && bytes.len() % 4 != 0) {
        return None;
    }
    let body = &bytes[..bytes.len() - pad];
    if body.len() % 4 == 1 {
        return None;
    }
    let value = |c: u8| -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    };
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for group in body.chunks(4) {
        let mut acc = 0u32;
        for (i, c) in group.iter().enumerate() {
            acc |= value(*c)? << (18 - 6 * i);
        }
        let n = group.len() - 1;
        out.extend_from_slice(&acc.to_be_bytes()[1..=n]);
    }
    Some(out)
}

/// The Key_Shared sticky key of an entry, from its (outer) metadata, as upstream
/// `Commands.peekStickyKey`: the ordering key if present; else the partition key (base64-decoded
/// when `partition_key_b64_encoded`, where a decoding failure gives `NONE_KEY`); else
/// `NONE_KEY`.
pub(crate) fn sticky_key<'a>(
    ordering_key: Option<&'a [u8]>,
    partition_key: Option<&'a str>,
    b64_encoded: bool,
    none_key: &'static [u8],
) -> Cow<'a, [u8]> {
    match (ordering_key, partition_key) {
        (Some(key), _) => Cow::Borrowed(key),
        (None, Some(key)) if b64_encoded => {
            base64_decode(key).map_or(Cow::Borrowed(none_key), Cow::Owned)
        }
        (None, Some(key)) => Cow::Borrowed(key.as_bytes()),
        (None, None) => Cow::Borrowed(none_key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_known_vectors() {
        // MurmurHash3_x86_32, seed 0 (SMHasher reference values).
        assert_eq!(murmur3_32(b""), 0);
        assert_eq!(murmur3_32(b"hello"), 0x248b_fa47);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog"),
            0x2e4f_f723
        );
        assert_eq!(murmur3_32(&[0, 0, 0, 0]), 0x2362_f9de);
        assert_eq!(murmur3_32(&[0xff, 0xff, 0xff, 0xff]), 0x7629_3b50);
        assert_eq!(murmur3_32(&[0x21, 0x43, 0x65, 0x87]), 0xf55b_516b);
        assert_eq!(murmur3_32(&[0x21, 0x43, 0x65]), 0x7e4a_8634);
        assert_eq!(murmur3_32(&[0x21, 0x43]), 0xa0f7_b07a);
        assert_eq!(murmur3_32(&[0x21]), 0x7266_1cf4);
    }

    #[test]
    fn slots_are_in_the_range() {
        for key in [&b""[..], b"a", b"NONE_KEY", b"key-17"] {
            let slot = sticky_key_hash(key);
            assert!((1..RANGE_SIZE).contains(&slot), "{slot}");
        }
        assert_eq!(sticky_key_hash(b""), 1);
    }

    #[test]
    fn base64_like_java() {
        assert_eq!(base64_decode("AAEC").as_deref(), Some(&[0u8, 1, 2][..]));
        assert_eq!(base64_decode("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_decode("aGk").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_decode("aA==").as_deref(), Some(&b"h"[..]));
        assert_eq!(base64_decode("").as_deref(), Some(&[][..]));
        assert_eq!(base64_decode("a"), None);
        assert_eq!(base64_decode("aGk*"), None);
        assert_eq!(base64_decode("aA="), None);
    }

    #[test]
    fn sticky_keys() {
        const NONE: &[u8] = b"NONE_KEY";
        assert_eq!(&*sticky_key(Some(b"o"), Some("p"), false, NONE), b"o");
        assert_eq!(&*sticky_key(Some(b""), Some("p"), false, NONE), b"");
        assert_eq!(&*sticky_key(None, Some("AAEC"), true, NONE), &[0, 1, 2]);
        assert_eq!(&*sticky_key(None, Some("AAEC"), false, NONE), b"AAEC");
        assert_eq!(&*sticky_key(None, Some("!!"), true, NONE), NONE);
        assert_eq!(&*sticky_key(None, None, true, NONE), NONE);
    }
}
