//! Ack sets as the broker keeps them: bitsets of `long` words (Java's `BitSet.toLongArray`),
//! a bit per message of a batch, set while the message is unacknowledged.

/// A bitset (as `long` words, like Java's `BitSet.toLongArray`) with bits `0..n` set.
pub(crate) fn full_bitset(n: u32) -> Vec<i64> {
    let n = n as usize;
    (0..n.div_ceil(64))
        .map(|w| {
            let bits = (n - w * 64).min(64);
            if bits == 64 {
                -1
            } else {
                ((1u64 << bits) - 1) as i64
            }
        })
        .collect()
}

/// The number of set bits.
pub(crate) fn count_bits(words: &[i64]) -> u32 {
    words.iter().map(|w| w.count_ones()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitsets() {
        assert_eq!(full_bitset(3), vec![0b111]);
        assert_eq!(full_bitset(64), vec![-1]);
        assert_eq!(full_bitset(65), vec![-1, 1]);
        assert_eq!(count_bits(&full_bitset(70)), 70);
    }
}
