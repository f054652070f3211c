//! # Feature table
//!
//! What this client offers of the Java client's features, in one list: the other chapters and
//! the README point here instead of keeping lists of their own. The list is checked against
//! the code:
//!
//! - every row marked **yes** links to the API that provides it, so the documentation build
//!   (which treats a broken link as an error) fails when that API goes away;
//! - every row marked **no** has an example below the table that uses the API upstream names
//!   for it and must *not* compile (or, for a setting, must be refused), so a change that adds
//!   the feature fails this chapter's doc tests until its row says **yes**;
//! - a unit test fails if any other chapter of the guide, or the README, says "not supported"
//!   or "not available" again.
//!
//! ## Supported
//!
//! | Feature (Java client) | Here | Where |
//! |---|---|---|
//! | Producers: batching, key-based batching, compression (LZ4, ZLIB, ZSTD, SNAPPY) | yes | [`ProducerBuilder::batching`], [`ProducerBuilder::batching_options`], [`ProducerBuilder::compression`] |
//! | Large messages in chunks (PIP-37) | yes | [`ProducerBuilder::chunking`]; consumers reassemble by themselves |
//! | Send timeouts, pending-message and memory limits, blocking when full | yes | [`ProducerBuilder::send_timeout`], [`ProducerBuilder::max_pending_messages`], [`ProducerBuilder::block_if_queue_full`], [`ClientBuilder::memory_limit`] |
//! | Producer access modes (Shared, Exclusive, WaitForExclusive, ExclusiveWithFencing) | yes | [`ProducerBuilder::access_mode`] |
//! | Partitioned topics, key routing, partition growth (PIP-247 pushes or polling) | yes | [`ProducerBuilder::auto_update_partitions`], [`ConsumerBuilder::auto_update_partitions`], [`partitions`](super::partitions) |
//! | Subscription types Exclusive, Shared, Failover, Key_Shared; durable and non-durable subscriptions (PIP-245 on non-persistent topics) | yes | [`ConsumerBuilder::subscription_type`], [`ConsumerBuilder::subscription_mode`] |
//! | Batch receive (`batchReceive`, `BatchReceivePolicy`, `acknowledge(Messages)`) | yes | [`Consumer::batch_recv`], [`ConsumerBuilder::batch_receive_policy`], [`Consumer::ack_all`], [`Consumer::ack_cumulative_all`]; typed: [`TypedConsumer::batch_recv`](crate::schema::TypedConsumer::batch_recv) |
//! | Individual and cumulative acks, grouped acks, acks from other tasks | yes | [`Consumer::ack`], [`Consumer::ack_cumulative`], [`Consumer::acker`], [`ConsumerBuilder::ack_group_time`] |
//! | Negative acks with delay or backoff, ack timeout | yes | [`ConsumerBuilder::negative_ack_delay`], [`ConsumerBuilder::negative_ack_backoff`], [`ConsumerBuilder::ack_timeout`] |
//! | Dead-letter and retry topics (with PIP-124's initial subscription) | yes | [`ConsumerBuilder::dead_letter_policy`], [`ConsumerBuilder::retry_enable`], [`Consumer::reconsume_later`] |
//! | Batch-index acknowledgement | yes | [`ConsumerBuilder::batch_index_ack`] |
//! | A zero-size receiver queue (`ZeroQueueConsumerImpl`: no prefetch, one permit per receive) | yes | [`ConsumerBuilder::receiver_queue_size`] with 0, on one non-partitioned topic (others refused, as upstream); batched messages handed out whole; see [consuming](super::consuming#a-zero-size-receiver-queue-one-message-at-a-time) |
//! | Auto-scaled receiver queue (PIP-74) | yes | [`ConsumerBuilder::auto_scaled_receiver_queue_size`] (off by default, as upstream) |
//! | Seek by message id or publish time | yes | [`Consumer::seek`], [`Consumer::seek_by_time`] |
//! | Readers | yes | [`Client::reader`] |
//! | Table views (`TableView`): a key → latest value map of a topic, tombstones, `refresh`, listeners, partitions and their growth | yes | [`Client::table_view`], [`TableView`](crate::TableView), [`table_views`](super::table_views) |
//! | Multi-topic consumers (a list of topics) | yes | [`ConsumerBuilder::topics`] |
//! | Pattern (regex) subscriptions, with PIP-145 topic-list watchers or polling | yes | [`ConsumerBuilder::topics_pattern`], [`ConsumerBuilder::subscription_topics_mode`] |
//! | Schemas: bytes, string, primitives, key/value, JSON, Avro, `PROTOBUF_NATIVE`, `AUTO_CONSUME` | yes | [`crate::schema`] (JSON, Avro and protobuf behind cargo features) |
//! | TLS and mutual TLS | yes | [`ClientBuilder::tls_trust_certs_file_path`], [`ClientBuilder::tls_cert_file_path`], [`connecting`](super::connecting) |
//! | Authentication: token, basic, TLS, OAuth2 client credentials, your own provider | yes | [`ClientBuilder::auth_token`], [`ClientBuilder::auth_provider`], [`crate::auth`] (OAuth2 behind cargo feature `oauth2`) |
//! | Producer, consumer and reader statistics | yes | [`Producer::stats`], [`Consumer::stats`], [`Reader::stats`], [`crate::stats`] |
//! | Operator metrics (PIP-342 names) | yes | cargo feature `metrics` (`pulsar_sdk::metrics`), through the `metrics` facade |
//! | Lookups through a Pulsar proxy, redirects, topic migration (PIP-188), direct reconnect (PIP-307) | yes | automatic; [`ClientBuilder::max_lookup_redirects`] |
//! | End-to-end encryption (PIP-4): RSA keys, several recipients, key readers, failure actions | yes | [`ProducerBuilder::encryption_key`], [`ConsumerBuilder::crypto_key_reader`] (cargo feature `encryption`, `pulsar_sdk::crypto`; EC keys are refused) |
//! | Interceptors (producer, consumer, reader) | yes | [`ProducerBuilder::interceptor`], [`ConsumerBuilder::interceptor`], [`crate::interceptor`], [`observing`](super::observing) |
//! | OpenTelemetry tracing (send and process spans, W3C context in message properties) | yes | cargo feature `opentelemetry`: `ClientBuilder::tracing` / `ClientBuilder::tracer`, [`observing`](super::observing) |
//! | Transactions (PIP-31): transactional sends and acks, commit and abort | yes | cargo feature `transactions`: `ClientBuilder::enable_transaction`, `Client::transaction`, `ProducerMessage::transaction`, `Consumer::ack_with_transaction` (and `Acker`'s); the guide chapter `transactions`; `examples/exactly_once.rs` (a message of a batch is acknowledged on its own with an ack set, as upstream; a chunked message is refused: upstream would acknowledge only its last chunk) |
//! | Cluster-level failover (PIP-121: `AutoClusterFailover`, `ControlledClusterFailover`, `ServiceInfoProvider`) | yes | [`ClientBuilder::service_info_provider`], [`AutoClusterFailover`], [`Client::update_service_info`]; `ControlledClusterFailover` with the `controlled-failover` feature; see [connecting](super::connecting#cluster-level-failover) |
//! | A mock broker for tests | yes | [`crate::mock`] (cargo feature `mock-broker`), [`testing`](super::testing) |
//!
//! ## Not supported yet
//!
//! | Feature (Java client) | Here | What happens instead |
//! |---|---|---|
//! | HTTP lookup (`http://` service URLs) | no | only the binary protocol: `pulsar://` and `pulsar+ssl://` |
//! | `Schema.PROTOBUF` (the Avro-form definition), `AUTO_PRODUCE_BYTES`, producers sending several schemas (`newMessage(schema)`) | no | typed messages ([`crate::schema`]) as listed above; an incompatible schema fails with [`ServerError::IncompatibleSchema`] |
//!
//! ### The checks behind the "no" rows
//!
//! Each example below uses the API the Java client offers for the row (in this crate's naming)
//! and is expected not to compile. When one of them starts compiling, the feature has arrived:
//! move its row to the table above and replace the example with a snippet of the new API.
//!
//! `AUTO_PRODUCE_BYTES`:
//! ```compile_fail
//! let _ = pulsar_sdk::schema::AutoProduceBytesSchema::default();
//! ```
//!
//! HTTP lookup is refused when the client is built:
//! ```
//! let built = pulsar_sdk::Client::builder().service_url("http://localhost:8080").build();
//! assert!(built.is_err());
//! ```
//!
//! [`ClientBuilder::service_info_provider`]: crate::ClientBuilder::service_info_provider
//! [`AutoClusterFailover`]: crate::AutoClusterFailover
//! [`Client::update_service_info`]: crate::Client::update_service_info
//! [`ProducerBuilder::batching`]: crate::ProducerBuilder::batching
//! [`ProducerBuilder::batching_options`]: crate::ProducerBuilder::batching_options
//! [`ProducerBuilder::compression`]: crate::ProducerBuilder::compression
//! [`ProducerBuilder::chunking`]: crate::ProducerBuilder::chunking
//! [`ProducerBuilder::encryption_key`]: crate::ProducerBuilder::encryption_key
//! [`ConsumerBuilder::crypto_key_reader`]: crate::ConsumerBuilder::crypto_key_reader
//! [`ProducerBuilder::send_timeout`]: crate::ProducerBuilder::send_timeout
//! [`ProducerBuilder::max_pending_messages`]: crate::ProducerBuilder::max_pending_messages
//! [`ProducerBuilder::block_if_queue_full`]: crate::ProducerBuilder::block_if_queue_full
//! [`ProducerBuilder::access_mode`]: crate::ProducerBuilder::access_mode
//! [`ProducerBuilder::auto_update_partitions`]: crate::ProducerBuilder::auto_update_partitions
//! [`ProducerBuilder::interceptor`]: crate::ProducerBuilder::interceptor
//! [`ConsumerBuilder::interceptor`]: crate::ConsumerBuilder::interceptor
//! [`ClientBuilder::memory_limit`]: crate::ClientBuilder::memory_limit
//! [`ClientBuilder::max_lookup_redirects`]: crate::ClientBuilder::max_lookup_redirects
//! [`ClientBuilder::tls_trust_certs_file_path`]: crate::ClientBuilder::tls_trust_certs_file_path
//! [`ClientBuilder::tls_cert_file_path`]: crate::ClientBuilder::tls_cert_file_path
//! [`ClientBuilder::auth_token`]: crate::ClientBuilder::auth_token
//! [`ClientBuilder::auth_provider`]: crate::ClientBuilder::auth_provider
//! [`ConsumerBuilder::auto_update_partitions`]: crate::ConsumerBuilder::auto_update_partitions
//! [`ConsumerBuilder::subscription_type`]: crate::ConsumerBuilder::subscription_type
//! [`ConsumerBuilder::subscription_mode`]: crate::ConsumerBuilder::subscription_mode
//! [`ConsumerBuilder::ack_group_time`]: crate::ConsumerBuilder::ack_group_time
//! [`ConsumerBuilder::batch_receive_policy`]: crate::ConsumerBuilder::batch_receive_policy
//! [`Consumer::batch_recv`]: crate::Consumer::batch_recv
//! [`Consumer::ack_all`]: crate::Consumer::ack_all
//! [`Consumer::ack_cumulative_all`]: crate::Consumer::ack_cumulative_all
//! [`ConsumerBuilder::negative_ack_delay`]: crate::ConsumerBuilder::negative_ack_delay
//! [`ConsumerBuilder::negative_ack_backoff`]: crate::ConsumerBuilder::negative_ack_backoff
//! [`ConsumerBuilder::ack_timeout`]: crate::ConsumerBuilder::ack_timeout
//! [`ConsumerBuilder::receiver_queue_size`]: crate::ConsumerBuilder::receiver_queue_size
//! [`ConsumerBuilder::auto_scaled_receiver_queue_size`]: crate::ConsumerBuilder::auto_scaled_receiver_queue_size
//! [`ConsumerBuilder::dead_letter_policy`]: crate::ConsumerBuilder::dead_letter_policy
//! [`ConsumerBuilder::retry_enable`]: crate::ConsumerBuilder::retry_enable
//! [`ConsumerBuilder::batch_index_ack`]: crate::ConsumerBuilder::batch_index_ack
//! [`ConsumerBuilder::topics`]: crate::ConsumerBuilder::topics
//! [`ConsumerBuilder::topics_pattern`]: crate::ConsumerBuilder::topics_pattern
//! [`ConsumerBuilder::subscription_topics_mode`]: crate::ConsumerBuilder::subscription_topics_mode
//! [`Consumer::ack`]: crate::Consumer::ack
//! [`Consumer::ack_cumulative`]: crate::Consumer::ack_cumulative
//! [`Consumer::acker`]: crate::Consumer::acker
//! [`Consumer::reconsume_later`]: crate::Consumer::reconsume_later
//! [`Consumer::seek`]: crate::Consumer::seek
//! [`Consumer::seek_by_time`]: crate::Consumer::seek_by_time
//! [`Consumer::stats`]: crate::Consumer::stats
//! [`Producer::stats`]: crate::Producer::stats
//! [`Reader::stats`]: crate::Reader::stats
//! [`Client::reader`]: crate::Client::reader
//! [`Client::table_view`]: crate::Client::table_view
//! [`ServerError`]: crate::ServerError
//! [`ServerError::IncompatibleSchema`]: crate::ServerError::IncompatibleSchema

#[cfg(test)]
mod tests {
    /// The guide's chapters and the README, as text: only this chapter may list what is not
    /// supported, so the list cannot be contradicted by a second one.
    const OTHER_PAGES: &[(&str, &str)] = &[
        ("guide/mod.rs", include_str!("mod.rs")),
        ("guide/connecting.rs", include_str!("connecting.rs")),
        ("guide/consuming.rs", include_str!("consuming.rs")),
        ("guide/errors.rs", include_str!("errors.rs")),
        (
            "guide/java_differences.rs",
            include_str!("java_differences.rs"),
        ),
        ("guide/partitions.rs", include_str!("partitions.rs")),
        ("guide/observing.rs", include_str!("observing.rs")),
        ("guide/producing.rs", include_str!("producing.rs")),
        ("guide/table_views.rs", include_str!("table_views.rs")),
        ("guide/testing.rs", include_str!("testing.rs")),
        ("README.md", include_str!("../../README.md")),
        ("lib.rs", include_str!("../lib.rs")),
    ];

    const THIS_PAGE: &str = include_str!("features.rs");

    #[test]
    fn no_other_page_keeps_its_own_list_of_what_is_missing() {
        let mut found = Vec::new();
        for (name, text) in OTHER_PAGES {
            for (n, line) in text.lines().enumerate() {
                let lower = line.to_lowercase();
                for phrase in ["not supported", "not available", "not implemented"] {
                    if lower.contains(phrase) {
                        found.push(format!("{name}:{}: {}", n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "say it in guide::features instead:\n{}",
            found.join("\n")
        );
    }

    /// Every "no" row has its check below the table (one example per row), and every row is
    /// either "yes" or "no".
    #[test]
    fn every_missing_feature_has_a_check() {
        let doc: Vec<&str> = THIS_PAGE
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| l.trim_start_matches("//!").trim())
            .collect();
        let (mut yes, mut no) = (0, 0);
        for line in &doc {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if !line.starts_with('|') || cells.len() != 5 || cells[2] == "Here" {
                continue;
            }
            match cells[2] {
                "yes" => yes += 1,
                "no" => no += 1,
                "---" => {}
                other => panic!("a row says {other:?}, not yes or no: {line}"),
            }
        }
        // A check is a code fence opened right after a line that ends with ':' (its label).
        let checks = doc
            .windows(2)
            .filter(|w| w[0].ends_with(':') && w[1].starts_with("```"))
            .count();
        assert!(yes >= 20, "the supported table lost rows: {yes}");
        assert_eq!(
            checks, no,
            "each \"no\" row needs exactly one example below the table"
        );
    }
}
