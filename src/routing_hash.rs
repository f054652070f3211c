//! Key hashing compatible with the Java client, so a keyed message lands on the same partition
//! whichever client produced it, and Key_Shared hashes agree with the broker.
//!
//! Upstream (apache/pulsar, `pulsar-client/.../client/impl/`):
//! - the producer's default `hashingScheme` is `JavaStringHash` (`ProducerConfigurationData`);
//! - `JavaStringHash.makeHash(s)` is `s.hashCode() & Integer.MAX_VALUE` — the sign bit is
//!   *masked off*, not folded;
//! - `Murmur3_32Hash.makeHash` is MurmurHash3 x86 32-bit, seed 0, over the key's UTF-8 bytes,
//!   also `& Integer.MAX_VALUE`;
//! - the routers (`RoundRobinPartitionMessageRouterImpl`, `SinglePartitionMessageRouterImpl`)
//!   pick `signSafeMod(hash, numPartitions)`, which for the non-negative hashes above is plain
//!   `hash % numPartitions`.
//!
//! The broker's Key_Shared selectors hash the sticky key (ordering key, else partition key) with
//! the same masked `Murmur3_32Hash.makeHash(bytes)` and take it modulo the hash range size
//! (65536 by default).
// Wired into the producer and consumer by other modules; until then parts are only used by tests.

/// Java's `String.hashCode()`: `h = 31 * h + c` over the UTF-16 code units, wrapping in `i32`.
pub(crate) fn java_string_hash_code(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Java's `JavaStringHash.makeHash`: `hashCode() & Integer.MAX_VALUE`.
pub(crate) fn java_string_hash(s: &str) -> u32 {
    (java_string_hash_code(s) as u32) & 0x7fff_ffff
}

/// The partition the Java client's default router picks for a message with `key` on a topic
/// with `partitions` partitions (default `JavaStringHash` scheme). Returns 0 for
/// `partitions == 0` (Java would throw).
pub(crate) fn java_partition_for_key(key: &str, partitions: u32) -> u32 {
    if partitions == 0 {
        return 0;
    }
    java_string_hash(key) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMILEY_KEY: &str = "\u{e9}t\u{e9}-\u{1F600}"; // "été-😀": BMP + a surrogate pair

    // Expected `String.hashCode()` values, from a Python reimplementation over UTF-16 code
    // units (`h = (31*h + unit) mod 2^32`, as signed); "hello" and "polygenelubricants"
    // (Integer.MIN_VALUE) are well-known Java values.
    #[test]
    fn java_hash_code_vectors() {
        let cases: [(&str, i32); 9] = [
            ("", 0),
            ("a", 97),
            ("key", 106079),
            ("hello", 99162322),
            ("Aa", 2112),
            ("BB", 2112),
            ("my-key-1", -1903183646),
            ("polygenelubricants", i32::MIN),
            (SMILEY_KEY, -1803456526),
        ];
        for (s, h) in cases {
            assert_eq!(java_string_hash_code(s), h, "{s:?}");
        }
    }

    // Expected partitions: `(hashCode & 0x7fffffff) % n`, from the same Python script.
    #[test]
    fn java_partition_vectors() {
        let ns = [1, 2, 3, 7, 10, 16, 100];
        let cases: [(&str, [u32; 7]); 6] = [
            ("key", [0, 1, 2, 1, 9, 15, 79]),
            ("hello", [0, 0, 1, 0, 2, 2, 22]),
            ("my-key-1", [0, 0, 0, 2, 2, 2, 2]),
            ("polygenelubricants", [0, 0, 0, 0, 0, 0, 0]),
            (SMILEY_KEY, [0, 0, 1, 5, 2, 2, 22]),
            ("order-12345", [0, 0, 1, 5, 4, 4, 84]),
        ];
        for (key, parts) in cases {
            for (n, p) in ns.into_iter().zip(parts) {
                assert_eq!(java_partition_for_key(key, n), p, "{key:?} over {n}");
            }
        }
        assert_eq!(java_partition_for_key("key", 0), 0);
    }

    #[test]
    fn masking_differs_from_sign_safe_mod_of_the_raw_hash() {
        // "my-key-1" hashes negative: Java masks first (-> 2 over 7), whereas signSafeMod of
        // the raw hash would give 0. Guards against "fixing" the mask away.
        let raw = i64::from(java_string_hash_code("my-key-1"));
        assert_eq!(raw.rem_euclid(7), 0);
        assert_eq!(java_partition_for_key("my-key-1", 7), 2);
    }
}
