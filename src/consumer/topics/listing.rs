//! What a pattern consumer lists: GetTopicsOfNamespace (the first listing and each poll),
//! which listed topics join (the pattern, the mode, system topics, the consumer's own retry
//! and dead-letter topics). Pure of the discovery task ([`super::pattern`]), which drives it.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::commands;
use crate::connection::Connection;
use crate::core::CoreRef;
use crate::error::{Error, Result};
use crate::retry::{retry, AtDeadline, Schedule, Verdict};
use crate::topic::TopicName;
use crate::topic_list::{is_system_topic, RegexSubscriptionMode, TopicsPattern};

/// What a pattern consumer discovers, and how often it polls.
#[derive(Debug, Clone)]
pub(crate) struct PatternConfig {
    pub pattern: TopicsPattern,
    pub mode: RegexSubscriptionMode,
    pub period: Duration,
    /// The consumer's own retry and dead-letter topics, which never join as topics.
    pub own_letters: OwnLetters,
    /// The most topics subscribed at once (`ConsumerBuilder::pattern_max_topics`).
    pub max_topics: usize,
}

/// The retry and dead-letter topics of a pattern consumer that has them (`retry_enable`, or a
/// dead-letter policy): those of every matched topic (`<topic>-<subscription>-RETRY` and
/// `-DLQ`, the default names) and those the policy names.
///
/// Upstream's pattern consumer filters only system topics (`TopicList.filterSystemTopic`), so
/// a pattern like `orders-.*` also matches its own `orders-x-sub-RETRY` and `-DLQ` topics.
/// Here each topic's retry topic is already subscribed with it (as Java does for a consumer
/// of named topics), so matching it again would subscribe it twice and then, with its own
/// retry topic, `…-RETRY-sub-RETRY` without end; and consuming the dead-letter topic would
/// deliver again what was dead-lettered. So they are left out.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnLetters {
    /// `-<subscription>-RETRY` (with `retry_enable`), `-<subscription>-DLQ`: each only when
    /// the policy does not name that topic.
    pub suffixes: Vec<String>,
    /// The policy's own retry and dead-letter topic names.
    pub names: Vec<String>,
}

impl OwnLetters {
    /// What a consumer with these options leaves out (nothing without retry or DLQ).
    pub(crate) fn of(options: &crate::consumer::ConsumerOptions) -> OwnLetters {
        if !options.retry_enable && options.dead_letter_policy.is_none() {
            return OwnLetters::default();
        }
        let sub = &options.subscription;
        let mut names = Vec::new();
        if let Some(p) = &options.dead_letter_policy {
            for t in [&p.retry_letter_topic, &p.dead_letter_topic]
                .into_iter()
                .flatten()
            {
                if let Ok(name) = TopicName::new(t) {
                    names.push(name.to_string());
                }
            }
        }
        // A default name only for a letter topic the consumer has and the policy does not
        // name: anything else left out would be a topic upstream's consumer (which leaves
        // out only system topics) consumes, with nothing of this consumer's to justify it.
        let policy = options.dead_letter_policy.as_ref();
        let mut suffixes = Vec::new();
        if options.retry_enable && policy.and_then(|p| p.retry_letter_topic.as_ref()).is_none() {
            suffixes.push(format!("-{sub}-RETRY"));
        }
        if policy.and_then(|p| p.dead_letter_topic.as_ref()).is_none() {
            suffixes.push(format!("-{sub}-DLQ"));
        }
        OwnLetters { suffixes, names }
    }

    /// Whether `topic` (a partition: its partitioned topic) is one of them.
    fn contains(&self, topic: &TopicName) -> bool {
        let base = topic.partitioned_topic_name();
        self.suffixes.iter().any(|s| base.ends_with(s.as_str()))
            || self.names.iter().any(|n| n == base)
    }
}

/// The matching topics of one GetTopicsOfNamespace answer: `None` if unchanged since `hash`.
pub(super) async fn list_once(
    conn: &Connection,
    cfg: &PatternConfig,
    hash: Option<String>,
    timeout: Duration,
) -> Result<Listing> {
    let request_id = conn.new_request_id();
    let cmd = commands::get_topics_of_namespace(
        request_id,
        &cfg.pattern.namespace,
        cfg.mode.to_proto(),
        &cfg.pattern.text,
        hash,
    );
    let resp = conn
        .request_with_timeout(
            request_id,
            Box::new(crate::codec::Frame::simple(cmd)),
            "list the namespace's topics for a pattern consumer (GetTopicsOfNamespace)",
            timeout,
        )
        .await?;
    let r = resp.get_topics_of_namespace_response.ok_or_else(|| {
        Error::Protocol("GetTopicsOfNamespace answered without its response".into())
    })?;
    let hash = r.topics_hash.clone();
    if !r.changed.unwrap_or(true) {
        return Ok(Listing { topics: None, hash });
    }
    let filtered = r.filtered.unwrap_or(false);
    let topics = r
        .topics
        .into_iter()
        // Upstream filters on the client when the broker did not (`filtered = false`),
        // and the mode is checked on both sides.
        .filter(|t| admits(cfg, t, filtered))
        .collect();
    Ok(Listing {
        topics: Some(topics),
        hash,
    })
}

/// One GetTopicsOfNamespace answer.
pub(super) struct Listing {
    /// The matching topics; `None` when the broker says nothing changed.
    pub(super) topics: Option<BTreeSet<String>>,
    /// The broker's hash of its list (over what it listed: the whole namespace when it did not
    /// filter), sent back on the next poll like upstream's `topicsHash`.
    pub(super) hash: Option<String>,
}

/// Whether a listed topic joins a pattern consumer: it matches the pattern (unless the broker
/// already filtered, `filtered`: upstream trusts that and filters only otherwise), is no
/// system topic and is of the mode's domain. One check for the poll's answer and both of the
/// watcher's: a watcher update is checked as much as a listing (upstream's broker only
/// watches persistent topics; a broker that pushes a non-persistent one into a
/// persistent-only consumer must not get it subscribed).
///
/// Whatever `filtered` says, the name must be a full topic name (as brokers list them; a short
/// name would be expanded into `public/default`) of the pattern's namespace: an honest broker
/// lists nothing else, and a topic of another namespace must never join (the regex may be
/// trusted to the broker, the namespace costs nothing to check).
pub(super) fn admits(cfg: &PatternConfig, topic: &str, filtered: bool) -> bool {
    let Ok(name) = TopicName::new(topic) else {
        return false;
    };
    name.as_str() == topic
        && name.namespace() == cfg.pattern.namespace
        && (filtered || cfg.pattern.matches(topic))
        && !is_system_topic(topic)
        && cfg.mode.admits(&name)
        && !cfg.own_letters.contains(&name)
}

/// The first listing of a pattern consumer: fails (with the broker's error, or a timeout
/// naming GetTopicsOfNamespace) once the operation timeout has passed.
pub(crate) async fn initial_topics(client: &CoreRef, cfg: &PatternConfig) -> Result<Vec<String>> {
    let deadline = crate::util::deadline_after(client.operation_timeout());
    let listing = retry(
        &mut client.backoff(),
        Schedule::until(deadline, AtDeadline::LastAttemptAt),
        || async {
            let conn = client.lookup_service_connection().await?;
            let left = deadline.saturating_duration_since(Instant::now());
            list_once(&conn, cfg, None, left).await
        },
        // A timeout used the whole operation time; other retriable errors are retried (not
        // once the client is closing, like `partitioned_topic_metadata_with`).
        |e| {
            if e.is_retriable() && !matches!(e, Error::Timeout { .. }) && !client.is_shut_down() {
                Verdict::Retry
            } else {
                Verdict::Fail
            }
        },
    )
    .await?;
    Ok(listing.topics.unwrap_or_default().into_iter().collect())
}
