//! Parsing a [`MessageId`] from its string form (upstream's `toString`), apart from the type
//! so that the type imports nothing of `crate::error`.

use std::str::FromStr;

use super::id::{ChunkStart, MessageId};
use crate::error::Error;

impl FromStr for MessageId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        // A chunked id `first-last`: the separator is the `-` right after a digit (a negative
        // number's sign follows the start or a `:`).
        let sep = s
            .char_indices()
            .find(|&(i, c)| c == '-' && i > 0 && s.as_bytes()[i - 1].is_ascii_digit());
        if let Some((i, _)) = sep {
            let first: MessageId = s[..i].parse()?;
            let mut last: MessageId = s[i + 1..].parse()?;
            if first.is_chunked() || last.is_chunked() || first.partition != last.partition {
                return Err(Error::InvalidConfig(format!(
                    "invalid chunked message id `{s}`: expected first-last of one partition"
                )));
            }
            last.first_chunk = Some(ChunkStart {
                ledger_id: first.ledger_id,
                entry_id: first.entry_id,
            });
            return Ok(last);
        }
        let bad = |why: &str| Error::InvalidConfig(format!("invalid message id `{s}`: {why}"));
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() < 2 || parts.len() > 4 {
            return Err(bad("expected ledger:entry[:partition[:batch_index]]"));
        }
        let num = |p: &str| p.parse::<i64>().map_err(|_| bad("not a number"));
        let ledger = num(parts[0])?;
        let entry = num(parts[1])?;
        let partition = parts.get(2).map(|p| num(p)).transpose()?.unwrap_or(-1);
        let batch = parts.get(3).map(|p| num(p)).transpose()?.unwrap_or(-1);
        let small = |v: i64| i32::try_from(v).map_err(|_| bad("out of range"));
        Ok(MessageId {
            ledger_id: ledger as u64,
            entry_id: entry as u64,
            partition: small(partition)?,
            batch_index: small(batch)?,
            batch_size: 0,
            first_chunk: None,
        })
    }
}
