//! Topic lists of a namespace (PIP-145 and GetTopicsOfNamespace): the regex a pattern
//! consumer matches topic names with, and the hash both sides compute over a list. Pure
//! functions shared by the client's discovery ([`crate::topics_watch`]) and the mock broker.

use crate::error::{Error, Result};
use crate::topic::TopicName;

/// The hash of a topic list, as upstream's `TopicList.calculateHash`: CRC32C (Guava's
/// `Hashing.crc32c()`) over the names sorted (Java `String` order: UTF-16 code units) and
/// joined with `,` (UTF-8), printed as Guava's `HashCode.toString()` does for an `int` hash:
/// the four bytes in little-endian order, as lowercase hex.
pub(crate) fn topics_hash<S: AsRef<str>>(topics: &[S]) -> String {
    let mut sorted: Vec<&str> = topics.iter().map(AsRef::as_ref).collect();
    sorted.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    let mut crc = 0u32;
    for (i, t) in sorted.iter().enumerate() {
        if i > 0 {
            crc = crc32c::crc32c_append(crc, b",");
        }
        crc = crc32c::crc32c_append(crc, t.as_bytes());
    }
    crc.to_le_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Which topics a pattern consumer subscribes, like Java's `RegexSubscriptionMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RegexSubscriptionMode {
    /// Persistent topics only (the default, like upstream).
    #[default]
    PersistentOnly,
    /// Non-persistent topics only.
    NonPersistentOnly,
    /// Both.
    AllTopics,
}

impl RegexSubscriptionMode {
    /// The GetTopicsOfNamespace `mode`.
    pub(crate) fn to_proto(self) -> i32 {
        use crate::proto::command_get_topics_of_namespace::Mode;
        match self {
            RegexSubscriptionMode::PersistentOnly => Mode::Persistent as i32,
            RegexSubscriptionMode::NonPersistentOnly => Mode::NonPersistent as i32,
            RegexSubscriptionMode::AllTopics => Mode::All as i32,
        }
    }

    /// Whether a topic of this domain belongs.
    pub(crate) fn admits(self, topic: &TopicName) -> bool {
        match self {
            RegexSubscriptionMode::PersistentOnly => topic.is_persistent(),
            RegexSubscriptionMode::NonPersistentOnly => !topic.is_persistent(),
            RegexSubscriptionMode::AllTopics => true,
        }
    }
}

/// A topics pattern: `[persistent://|non-persistent://]tenant/namespace/REGEX`, matched like
/// upstream's `TopicList.filterTopics`: against a topic's partitioned name without its domain
/// scheme (`tenant/namespace/local`), the whole name (Java's `Matcher.matches`), with the
/// pattern's own scheme removed (`removeTopicDomainScheme`).
#[derive(Debug, Clone)]
pub(crate) struct TopicsPattern {
    /// As the application wrote it (sent to the broker).
    pub text: String,
    /// `tenant/namespace`.
    pub namespace: String,
    regex: regex::Regex,
}

/// The longest pattern accepted (upstream brokers bound it by `subscriptionPatternMaxLength`,
/// 50 by default, before filtering; the client bound keeps a hostile or careless pattern from
/// building a huge automaton).
const MAX_PATTERN_LEN: usize = 4096;

impl TopicsPattern {
    /// Parses a pattern; fails with [`Error::InvalidConfig`] if it names no namespace or is not
    /// a valid regex.
    pub(crate) fn new(text: &str) -> Result<TopicsPattern> {
        if text.len() > MAX_PATTERN_LEN {
            return Err(Error::InvalidConfig(format!(
                "topics pattern longer than {MAX_PATTERN_LEN} bytes"
            )));
        }
        let body = strip_scheme(text);
        let mut parts = body.splitn(3, '/');
        let (Some(tenant), Some(ns), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Error::InvalidConfig(format!(
                "topics pattern {text:?} must be tenant/namespace/REGEX (optionally with \
                 persistent:// or non-persistent://)"
            )));
        };
        let is_name = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '=' | ':' | '.'))
        };
        if !is_name(tenant) || !is_name(ns) {
            return Err(Error::InvalidConfig(format!(
                "topics pattern {text:?}: the tenant and namespace must be plain names \
                 (patterns match topics within one namespace)"
            )));
        }
        let regex = regex::RegexBuilder::new(&format!("^(?:{body})$"))
            .size_limit(1 << 20)
            .build()
            .map_err(|e| Error::InvalidConfig(format!("topics pattern {text:?}: {e}")))?;
        Ok(TopicsPattern {
            text: text.to_string(),
            namespace: format!("{tenant}/{ns}"),
            regex,
        })
    }

    /// Whether `topic` (a full name, possibly of a partition) matches.
    pub(crate) fn matches(&self, topic: &str) -> bool {
        let Ok(t) = TopicName::new(topic) else {
            return false;
        };
        self.regex
            .is_match(strip_scheme(t.partitioned_topic_name()))
    }
}

/// `text` without its `persistent://` / `non-persistent://` scheme.
fn strip_scheme(text: &str) -> &str {
    text.split_once("://").map_or(text, |(_, rest)| rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_guava_crc32c_little_endian_over_sorted_names() {
        // CRC32C("123456789") = 0xE3069283 (the standard check value); Guava prints an int
        // hash's bytes little-endian.
        assert_eq!(topics_hash(&["123456789"]), "839206e3");
        assert_eq!(topics_hash::<&str>(&[]), "00000000");
        let a = "persistent://my-property/my-ns/pattern-topic-1";
        let b = "persistent://my-property/my-ns/pattern-topic-2";
        let c = "persistent://my-property/my-ns/pattern-topic-3";
        assert_eq!(topics_hash(&[c, b, a]), topics_hash(&[a, c, b]));
        assert_ne!(topics_hash(&[a, b]), topics_hash(&[a, b, c]));
        let joined = format!("{a},{b}");
        let expected = crc32c::crc32c(joined.as_bytes()).to_le_bytes();
        let expected: String = expected.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(topics_hash(&[b, a]), expected);
    }

    #[test]
    fn patterns_match_the_whole_partitioned_name_without_scheme() {
        let p = TopicsPattern::new("persistent://public/default/orders-.*").unwrap();
        assert_eq!(p.namespace, "public/default");
        assert!(p.matches("persistent://public/default/orders-eu"));
        assert!(p.matches("persistent://public/default/orders-eu-partition-3"));
        // The scheme is not matched (the mode decides the domain).
        assert!(p.matches("non-persistent://public/default/orders-eu"));
        assert!(!p.matches("persistent://public/default/my-orders-eu"));
        assert!(!p.matches("persistent://public/other/orders-eu"));
        assert!(TopicsPattern::new("public/default/(").is_err());
        assert!(TopicsPattern::new("orders-.*").is_err());
        assert!(TopicsPattern::new("public/.*/x").is_err());
    }
}
