//! Topic names, parsed and normalised like the upstream Java client's `TopicName`.
//!
//! Accepted forms (anything else is rejected with [`Error::InvalidTopicName`] before a request is
//! sent):
//!
//! | Given                                   | Canonical name                                  |
//! |-----------------------------------------|-------------------------------------------------|
//! | `my-topic`                              | `persistent://public/default/my-topic`          |
//! | `tenant/ns/my-topic`                    | `persistent://tenant/ns/my-topic`               |
//! | `persistent://tenant/ns/my-topic`       | unchanged                                       |
//! | `non-persistent://tenant/ns/my-topic`   | unchanged                                       |
//! | `persistent://tenant/cluster/ns/topic`  | unchanged (legacy "v1" name with a cluster)     |
//!
//! As upstream, the part after `<domain>://` is split on `/` into at most four pieces: three
//! pieces are `tenant/namespace/local-name`, four are the legacy
//! `tenant/cluster/namespace/local-name` (so `persistent://t/ns/a/b` is a v1 name with cluster
//! `ns`, and only a v1 local name can itself contain `/`). The domain is matched
//! case-insensitively and written in lower case. Tenant, cluster and namespace must be non-empty
//! and made of ASCII letters, digits and `_ - = : .` (upstream's `[-=:.\w]`); the local name must
//! be non-empty.
//!
//! A topic whose local name ends in `-partition-<N>` (N a canonical non-negative decimal that
//! fits a Java `int`, e.g. not `01` or `-1`) is a partition of the partitioned topic named
//! without the suffix.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The tenant used for short topic names (`my-topic`).
pub const PUBLIC_TENANT: &str = "public";

/// The namespace used for short topic names (`my-topic`).
pub const DEFAULT_NAMESPACE: &str = "default";

/// The suffix separating a partitioned topic's name from the partition index.
pub const PARTITIONED_TOPIC_SUFFIX: &str = "-partition-";

/// Whether a topic's messages are stored (`persistent://`) or only relayed
/// (`non-persistent://`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopicDomain {
    /// `persistent://`: messages are stored durably by the broker.
    Persistent,
    /// `non-persistent://`: messages are only delivered to connected consumers.
    NonPersistent,
}

impl TopicDomain {
    /// The domain as written in a topic name (`persistent` or `non-persistent`).
    pub fn as_str(self) -> &'static str {
        match self {
            TopicDomain::Persistent => "persistent",
            TopicDomain::NonPersistent => "non-persistent",
        }
    }

    /// Whether this is [`TopicDomain::Persistent`].
    pub fn is_persistent(self) -> bool {
        self == TopicDomain::Persistent
    }

    /// Parses a domain, case-insensitively like upstream (`Persistent` is accepted).
    fn parse(s: &str) -> Option<Self> {
        if s.eq_ignore_ascii_case("persistent") {
            Some(TopicDomain::Persistent)
        } else if s.eq_ignore_ascii_case("non-persistent") {
            Some(TopicDomain::NonPersistent)
        } else {
            None
        }
    }
}

impl fmt::Display for TopicDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated, fully qualified topic name (see the [module documentation](self) for the rules).
///
/// Equality, hashing and [`Display`](fmt::Display) use the canonical full name, e.g.
/// `persistent://public/default/my-topic`.
#[derive(Debug, Clone, Eq)]
pub struct TopicName(Arc<str>);

impl std::hash::Hash for TopicName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialEq for TopicName {
    fn eq(&self, other: &TopicName) -> bool {
        // Clones of one name (a message's and its consumer's, compared on every ack) are
        // equal without reading them: `Arc<str>`'s own `==` compares the bytes every time.
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

// Only the canonical full name is kept, in one shared allocation: cloning is cheap (every
// received message carries one), and every producer and consumer holds one for its life, so
// its parts are not kept beside it (issue #39: five allocations, ~265 bytes, became one).
// They are read back from the canonical form, whose `/`s are exactly its parts' separators.

fn invalid(topic: &str, reason: impl Into<String>) -> Error {
    Error::InvalidTopicName {
        topic: topic.to_owned(),
        reason: reason.into(),
    }
}

/// Upstream's `NamedEntity` rule for tenants, clusters and namespaces: `[-=:.\w]+` (ASCII).
fn check_named_entity(topic: &str, what: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(invalid(topic, format!("the {what} is empty")));
    }
    if let Some(c) = value
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '=' | ':' | '.')))
    {
        return Err(invalid(
            topic,
            format!(
                "the {what} `{value}` contains {c:?}; only ASCII letters, digits and `_ - = : .` \
                 are allowed"
            ),
        ));
    }
    Ok(())
}

/// The partition index encoded in a `-partition-<N>` suffix, following upstream's
/// `getPartitionIndex`: the text after the last suffix must be a canonical non-negative decimal
/// (no sign, no leading zeros) that fits a Java `int`.
fn parse_partition_index(local_name: &str) -> Option<u32> {
    let (_, idx) = local_name.rsplit_once(PARTITIONED_TOPIC_SUFFIX)?;
    if idx.is_empty()
        || !idx.bytes().all(|b| b.is_ascii_digit())
        || (idx.len() > 1 && idx.starts_with('0'))
    {
        return None;
    }
    idx.parse::<u32>().ok().filter(|&i| i <= i32::MAX as u32)
}

impl TopicName {
    /// Parses and normalises a topic name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTopicName`] with the reason, if the name does not follow the rules in the
    /// [module documentation](self).
    pub fn new(topic: &str) -> Result<TopicName> {
        if topic.is_empty() {
            return Err(invalid(topic, "the topic name is empty"));
        }

        let (domain, rest) = match topic.split_once("://") {
            Some((domain, rest)) => {
                let domain = TopicDomain::parse(domain).ok_or_else(|| {
                    invalid(
                        topic,
                        format!(
                            "unknown domain `{domain}`; expected `persistent` or `non-persistent`"
                        ),
                    )
                })?;
                (domain, rest)
            }
            None => {
                // Short forms: `<topic>` or `<tenant>/<namespace>/<topic>`.
                match topic.split('/').count() {
                    1 | 3 => {}
                    _ => {
                        return Err(invalid(
                            topic,
                            "a topic name without a domain must be `<topic>` or \
                             `<tenant>/<namespace>/<topic>`",
                        ))
                    }
                }
                (TopicDomain::Persistent, topic)
            }
        };

        let parts: Vec<&str> = rest.splitn(4, '/').collect();
        let (tenant, cluster, namespace_portion, local_name) = match parts[..] {
            [local] if !topic.contains("://") => (PUBLIC_TENANT, None, DEFAULT_NAMESPACE, local),
            [tenant, namespace, local] => (tenant, None, namespace, local),
            [tenant, cluster, namespace, local] => (tenant, Some(cluster), namespace, local),
            _ => {
                return Err(invalid(
                    topic,
                    "expected `<domain>://<tenant>/<namespace>/<topic>` (or the legacy \
                     `<domain>://<tenant>/<cluster>/<namespace>/<topic>`)",
                ))
            }
        };

        check_named_entity(topic, "tenant", tenant)?;
        if let Some(cluster) = cluster {
            check_named_entity(topic, "cluster", cluster)?;
        }
        check_named_entity(topic, "namespace", namespace_portion)?;
        if local_name.is_empty() {
            return Err(invalid(topic, "the topic's local name is empty"));
        }

        // A name given in its canonical form (the usual case: names handed on inside the
        // client, or written out in full) is kept as given, not formatted anew.
        if topic
            .split_once("://")
            .is_some_and(|(given, _)| given == domain.as_str())
        {
            return Ok(TopicName(topic.into()));
        }
        let full = match cluster {
            None => format!("{domain}://{tenant}/{namespace_portion}/{local_name}"),
            Some(cluster) => {
                format!("{domain}://{tenant}/{cluster}/{namespace_portion}/{local_name}")
            }
        };
        Ok(TopicName(full.into()))
    }

    /// The parts after `<domain>://`: tenant, cluster (v1 names), namespace, local name.
    fn parts(&self) -> (&str, Option<&str>, &str, &str) {
        let rest = self.0.split_once("://").map_or(&*self.0, |(_, rest)| rest);
        let mut pieces = rest.splitn(4, '/');
        let mut next = || pieces.next().unwrap_or("");
        let (a, b, c, d) = (next(), next(), next(), next());
        // A canonical name has three pieces (v2) or four (v1, whose local name may hold `/`).
        if d.is_empty() {
            (a, None, b, c)
        } else {
            (a, Some(b), c, d)
        }
    }

    /// The canonical full name, e.g. `persistent://public/default/my-topic`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the topic is persistent or non-persistent.
    pub fn domain(&self) -> TopicDomain {
        // The canonical name starts with its lower-case domain: `p` or `n` tells them apart
        // (read for every received message, e.g. whether it is acknowledged).
        if self.0.as_bytes().first() == Some(&b'p') {
            TopicDomain::Persistent
        } else {
            TopicDomain::NonPersistent
        }
    }

    /// Whether the topic is in the `persistent` domain.
    pub fn is_persistent(&self) -> bool {
        self.domain().is_persistent()
    }

    /// The tenant (upstream `getTenant`).
    pub fn tenant(&self) -> &str {
        self.parts().0
    }

    /// The cluster of a legacy v1 name (`persistent://tenant/cluster/ns/topic`); `None` for v2
    /// names.
    pub fn cluster(&self) -> Option<&str> {
        self.parts().1
    }

    /// The namespace including its tenant, like upstream `getNamespace`: `tenant/ns`, or
    /// `tenant/cluster/ns` for a legacy v1 name.
    pub fn namespace(&self) -> String {
        match self.parts() {
            (tenant, None, namespace, _) => format!("{tenant}/{namespace}"),
            (tenant, Some(cluster), namespace, _) => format!("{tenant}/{cluster}/{namespace}"),
        }
    }

    /// The namespace alone, without tenant or cluster (upstream `getNamespacePortion`).
    pub fn namespace_portion(&self) -> &str {
        self.parts().2
    }

    /// The topic's own name within its namespace (upstream `getLocalName`), e.g. `my-topic`.
    pub fn local_name(&self) -> &str {
        self.parts().3
    }

    /// Whether this is a v2 name (no cluster component).
    pub fn is_v2(&self) -> bool {
        self.cluster().is_none()
    }

    /// Whether this names one partition of a partitioned topic (a `-partition-<N>` suffix).
    pub fn is_partition(&self) -> bool {
        self.partition_index().is_some()
    }

    /// The partition index from a `-partition-<N>` suffix, or `None` if this is not a
    /// partition.
    pub fn partition_index(&self) -> Option<u32> {
        parse_partition_index(self.local_name())
    }

    /// The full name of the partitioned topic this partition belongs to (the name without the
    /// `-partition-<N>` suffix); this topic's own full name if it is not a partition.
    pub fn partitioned_topic_name(&self) -> &str {
        if self.is_partition() {
            if let Some(pos) = self.0.rfind(PARTITIONED_TOPIC_SUFFIX) {
                return &self.0[..pos];
            }
        }
        &self.0
    }

    /// The partitioned topic this partition belongs to, as a [`TopicName`] (a clone of `self`
    /// if this is not a partition).
    pub fn partitioned_topic(&self) -> TopicName {
        if self.is_partition() {
            TopicName::new(self.partitioned_topic_name())
                .expect("the base name of a valid partition name is valid")
        } else {
            self.clone()
        }
    }

    /// The name of partition `index` of this topic: `<full name>-partition-<index>`.
    ///
    /// As upstream `getPartition`, if this name already is partition `index` it is returned
    /// unchanged; otherwise the suffix is appended to the full name as is.
    pub fn partition(&self, index: u32) -> TopicName {
        if self.partition_index() == Some(index) {
            return self.clone();
        }
        TopicName::new(&format!("{}{PARTITIONED_TOPIC_SUFFIX}{index}", self.0))
            .expect("appending a partition suffix to a valid name keeps it valid")
    }
}

impl fmt::Display for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for TopicName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<TopicName> for String {
    fn from(topic: TopicName) -> String {
        topic.0.to_string()
    }
}

impl FromStr for TopicName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        TopicName::new(s)
    }
}

impl TryFrom<&str> for TopicName {
    type Error = Error;

    fn try_from(s: &str) -> Result<Self> {
        TopicName::new(s)
    }
}

impl TryFrom<String> for TopicName {
    type Error = Error;

    fn try_from(s: String) -> Result<Self> {
        TopicName::new(&s)
    }
}

impl TryFrom<&String> for TopicName {
    type Error = Error;

    fn try_from(s: &String) -> Result<Self> {
        TopicName::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> TopicName {
        TopicName::new(s).unwrap_or_else(|e| panic!("{s:?} should be valid: {e}"))
    }

    fn reason(s: &str) -> String {
        match TopicName::new(s) {
            Err(Error::InvalidTopicName { topic, reason }) => {
                assert_eq!(topic, s, "the error names the topic as given");
                reason
            }
            Err(other) => panic!("{s:?}: unexpected error {other:?}"),
            Ok(t) => panic!("{s:?} should be rejected, got {t}"),
        }
    }

    #[test]
    fn short_name_goes_to_public_default() {
        let t = name("my-topic");
        assert_eq!(t.as_str(), "persistent://public/default/my-topic");
        assert_eq!(t.to_string(), "persistent://public/default/my-topic");
        assert_eq!(t.domain(), TopicDomain::Persistent);
        assert!(t.is_persistent());
        assert_eq!(t.tenant(), "public");
        assert_eq!(t.namespace(), "public/default");
        assert_eq!(t.namespace_portion(), "default");
        assert_eq!(t.local_name(), "my-topic");
        assert_eq!(t.cluster(), None);
        assert!(t.is_v2());
        assert!(!t.is_partition());
    }

    #[test]
    fn three_part_short_name_gets_persistent_domain() {
        let t = name("tenant/ns/topic");
        assert_eq!(t.as_str(), "persistent://tenant/ns/topic");
        assert_eq!(t.tenant(), "tenant");
        assert_eq!(t.namespace(), "tenant/ns");
        assert_eq!(t.local_name(), "topic");
    }

    #[test]
    fn full_names_are_kept() {
        assert_eq!(name("persistent://t/n/x").as_str(), "persistent://t/n/x");
        let np = name("non-persistent://t/n/x");
        assert_eq!(np.as_str(), "non-persistent://t/n/x");
        assert_eq!(np.domain(), TopicDomain::NonPersistent);
        assert!(!np.is_persistent());
        assert!(!np.domain().is_persistent());
        assert_eq!(np.namespace(), "t/n");
        assert_eq!(TopicDomain::NonPersistent.to_string(), "non-persistent");
    }

    #[test]
    fn all_forms_of_the_same_topic_are_equal() {
        let a = name("my-topic");
        let b = name("public/default/my-topic");
        let c = name("persistent://public/default/my-topic");
        assert_eq!(a, b);
        assert_eq!(b, c);
        let set: std::collections::HashSet<_> = [a, b, c].into_iter().collect();
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn domain_is_case_insensitive_and_normalised() {
        assert_eq!(name("PERSISTENT://t/n/x").as_str(), "persistent://t/n/x");
        assert_eq!(
            name("Non-Persistent://t/n/x").as_str(),
            "non-persistent://t/n/x"
        );
    }

    #[test]
    fn legacy_v1_names_with_cluster() {
        let t = name("persistent://t/cluster/ns/x");
        assert_eq!(t.as_str(), "persistent://t/cluster/ns/x");
        assert_eq!(t.tenant(), "t");
        assert_eq!(t.cluster(), Some("cluster"));
        assert_eq!(t.namespace(), "t/cluster/ns");
        assert_eq!(t.namespace_portion(), "ns");
        assert_eq!(t.local_name(), "x");
        assert!(!t.is_v2());

        // As upstream: four pieces after the domain make a v1 name, and the v1 local name is
        // everything after the third `/`.
        let t = name("persistent://t/ns/a/b");
        assert_eq!(t.cluster(), Some("ns"));
        assert_eq!(t.namespace_portion(), "a");
        assert_eq!(t.local_name(), "b");
        let t = name("persistent://t/c/ns/a/b/c");
        assert_eq!(t.local_name(), "a/b/c");
        assert_eq!(t.as_str(), "persistent://t/c/ns/a/b/c");
    }

    #[test]
    fn allowed_characters_in_tenant_and_namespace() {
        let t = name("persistent://my_Tenant-1=a:b.c/ns.0:x=y_z-w/topic");
        assert_eq!(t.tenant(), "my_Tenant-1=a:b.c");
        assert_eq!(t.namespace_portion(), "ns.0:x=y_z-w");
        // The local name is not restricted by upstream (beyond being non-empty).
        assert_eq!(name("t/n/a b%c?d").local_name(), "a b%c?d");
    }

    #[test]
    fn conversions() {
        let t: TopicName = "my-topic".parse().unwrap();
        assert_eq!(TopicName::try_from("my-topic").unwrap(), t);
        assert_eq!(TopicName::try_from(String::from("my-topic")).unwrap(), t);
        assert_eq!(TopicName::try_from(&String::from("my-topic")).unwrap(), t);
        assert_eq!(t.as_ref(), "persistent://public/default/my-topic");
        assert_eq!(String::from(t), "persistent://public/default/my-topic");
        assert!("".parse::<TopicName>().is_err());
    }

    #[test]
    fn rejects_empty_name() {
        assert!(reason("").contains("empty"));
    }

    #[test]
    fn rejects_unknown_domain() {
        let r = reason("foo://t/n/x");
        assert!(r.contains("unknown domain `foo`"), "{r}");
        assert!(reason("://t/n/x").contains("unknown domain"));
        assert!(reason("persistent:/t/n/x").contains("without a domain"));
    }

    #[test]
    fn rejects_wrong_number_of_parts() {
        for bad in [
            "a/b",
            "a/b/c/d",
            "a/b/c/d/e",
            "/my-topic",
            "my-topic/",
            "a/b/c/",
        ] {
            let r = reason(bad);
            assert!(r.contains("<tenant>/<namespace>/<topic>"), "{bad}: {r}");
        }
        for bad in [
            "persistent://t",
            "persistent://t/n",
            "persistent://",
            "persistent://x",
        ] {
            let r = reason(bad);
            assert!(r.contains("expected `<domain>://"), "{bad}: {r}");
        }
    }

    #[test]
    fn rejects_empty_components() {
        assert!(reason("persistent://t/n/").contains("local name is empty"));
        assert!(reason("persistent://t/c/n/").contains("local name is empty"));
        assert!(reason("persistent:///n/x").contains("tenant is empty"));
        assert!(reason("persistent://t//x").contains("namespace is empty"));
        assert!(reason("/n/x").contains("tenant is empty"));
        assert!(reason("t//x").contains("namespace is empty"));
        assert!(reason("t/n/").contains("local name is empty"));
        assert!(reason("persistent://t//n/x").contains("cluster is empty"));
        assert!(reason("persistent://t/c//x").contains("namespace is empty"));
    }

    #[test]
    fn rejects_invalid_characters() {
        let r = reason("persistent://te nant/n/x");
        assert!(r.contains("tenant `te nant`") && r.contains("' '"), "{r}");
        assert!(reason("persistent://t/n$s/x").contains("namespace `n$s`"));
        assert!(reason("t/n%2F/x").contains("namespace"));
        assert!(reason("tenänt/n/x").contains("tenant"));
        assert!(reason("persistent://t/c*/n/x").contains("cluster `c*`"));
    }

    #[test]
    fn partitions() {
        let base = name("persistent://t/n/x");
        assert_eq!(base.partition_index(), None);
        assert_eq!(base.partitioned_topic_name(), "persistent://t/n/x");
        assert_eq!(base.partitioned_topic(), base);

        let p = base.partition(3);
        assert_eq!(p.as_str(), "persistent://t/n/x-partition-3");
        assert!(p.is_partition());
        assert_eq!(p.partition_index(), Some(3));
        assert_eq!(p.local_name(), "x-partition-3");
        assert_eq!(p.partitioned_topic_name(), "persistent://t/n/x");
        assert_eq!(p.partitioned_topic(), base);
        assert_eq!(p.partition(3), p);

        let parsed = name("my-topic-partition-0");
        assert_eq!(parsed.partition_index(), Some(0));
        assert_eq!(
            parsed.partitioned_topic_name(),
            "persistent://public/default/my-topic"
        );

        let np = name("non-persistent://t/n/y").partition(12);
        assert_eq!(np.as_str(), "non-persistent://t/n/y-partition-12");
        assert_eq!(np.partitioned_topic_name(), "non-persistent://t/n/y");

        let v1 = name("persistent://t/c/n/z-partition-7");
        assert_eq!(v1.partition_index(), Some(7));
        assert_eq!(v1.partitioned_topic_name(), "persistent://t/c/n/z");
    }

    #[test]
    fn partition_suffix_must_be_canonical() {
        for not_partition in [
            "x-partition-",
            "x-partition-01",
            "x-partition--1",
            "x-partition-+1",
            "x-partition-1a",
            "x-partition- 1",
            "x-partition-2147483648",
            "x-partition-1-foo",
        ] {
            let t = name(not_partition);
            assert_eq!(t.partition_index(), None, "{not_partition}");
            assert_eq!(t.partitioned_topic_name(), t.as_str());
        }
        assert_eq!(
            name("x-partition-2147483647").partition_index(),
            Some(2147483647)
        );
        // The last suffix counts.
        let t = name("x-partition-1-partition-2");
        assert_eq!(t.partition_index(), Some(2));
        assert_eq!(
            t.partitioned_topic_name(),
            "persistent://public/default/x-partition-1"
        );
    }
}
