//! # Transactions (PIP-31)
//!
//! A transaction groups messages produced and acknowledgements made, on any topics and
//! partitions, so that they take effect together at its commit, or not at all. It is what
//! exactly-once consume–transform–produce pipelines are built on: each input is acknowledged
//! in the same transaction that produces its outputs, so a crash before the commit leaves
//! neither the outputs nor the acknowledgement (the input is received again), and a commit
//! leaves both. Cargo feature `transactions`; the cluster needs its transaction coordinator
//! (broker setting `transactionCoordinatorEnabled=true`).
//!
//! ```no_run
//! # async fn demo() -> pulsar_sdk::Result<()> {
//! use std::time::Duration;
//! use pulsar_sdk::{Client, ProducerMessage, SubscriptionType};
//!
//! let client = Client::builder()
//!     .service_url("pulsar://localhost:6650")
//!     .enable_transaction(true)
//!     .build()?;
//! let mut input = client
//!     .consumer("orders")
//!     .subscription("enricher")
//!     .subscription_type(SubscriptionType::Shared)
//!     .subscribe()
//!     .await?;
//! let output = client.producer("orders-enriched").batching(false).create().await?;
//! loop {
//!     let msg = input.recv().await?;
//!     let txn = client.transaction().timeout(Duration::from_secs(30)).begin().await?;
//!     // The receipt need not be awaited: the commit waits for every send of the transaction.
//!     let _receipt = output
//!         .send(ProducerMessage::new(msg.payload.clone()).transaction(&txn))
//!         .await?;
//!     input.ack_with_transaction(&msg, &txn).await?;
//!     txn.commit().await?;
//! }
//! # }
//! ```
//!
//! ## The transaction
//!
//! - `client.transaction()` returns a builder: `.timeout(d)` (default 60 s, as Java), then
//!   `.begin().await` opens it on a coordinator and returns a `Transaction` (cheap to clone,
//!   `Send + Sync`). `id()` is the coordinator's `TxnId`, `state()` one of `Open`,
//!   `Committing`, `Aborting`, `Committed`, `Aborted`, `Error`, `TimedOut` (upstream's states).
//! - `commit()` waits for every send and acknowledgement made in the transaction, then asks
//!   the coordinator to commit. If one of them failed, it aborts instead and fails with
//!   `TransactionError::OperationFailed`: run the work again in a new transaction.
//! - `abort()` waits for them too, then aborts: the messages are never delivered, the
//!   acknowledgements are dropped.
//! - Past its timeout the client refuses new work in the transaction (`TimedOut`) and the
//!   coordinator aborts it; a transaction whose handles are all dropped is left to that
//!   timeout (as upstream: dropping does not abort).
//!
//! ## Sending and acknowledging in a transaction
//!
//! - `ProducerMessage::transaction(&txn)`: the message's partition is registered with the
//!   coordinator before its first send (once per partition). Consumers see the message once
//!   the transaction commits; until then nothing published after it on that partition is
//!   delivered either (the broker's "max read position"), so keep transactions short.
//!   Transactional messages are sent one entry each, never batched.
//! - `Consumer::ack_with_transaction(&msg, &txn)` and `ack_cumulative_with_transaction`
//!   (Exclusive and Failover subscriptions), and the same on the consumer's `Acker` (from any
//!   task): the subscription is registered once, and the acknowledgement waits for the
//!   broker's answer. A message already acknowledged, or pending in another transaction, is
//!   refused with `Error::Broker` code `TransactionConflict`; so is a cumulative
//!   acknowledgement while another transaction holds the subscription's, or at or before the
//!   one this transaction holds. After an abort the broker redelivers the messages: those
//!   acknowledged individually, or, for a cumulative acknowledgement, everything
//!   unacknowledged on the subscription (the consumer may then see messages it had queued
//!   twice; Java's consumer does the same).
//! - A message of a batch (producers batch by default) is acknowledged in a transaction on
//!   its own, as Java's consumer does: the ACK names its entry with an `ack_set` clearing only
//!   its bit (a cumulative one, the bits through it). Different messages of one batch may be
//!   pending in different transactions; the same message in two is a `TransactionConflict`.
//!   The broker acknowledges the entry once each of its messages is, by a committed
//!   transaction or a plain acknowledgement; an abort makes the messages it held
//!   redeliverable (the entry comes again without the messages already acknowledged). The
//!   consumer's plain acknowledgement of the rest of such a batch leaves out the messages
//!   acknowledged in transactions.
//! - A chunked message cannot be acknowledged in a transaction: refused with
//!   `Error::InvalidOperation` (Java's consumer would acknowledge only its last chunk).
//!
//! ## Errors
//!
//! | Error | Meaning | Retriable |
//! |---|---|---|
//! | `TransactionError::NotEnabled` | the client was built without `enable_transaction(true)` | no |
//! | `TransactionError::NoCoordinator` | the broker refused the coordinator connection (transactions disabled there) or did not answer it within the operation timeout | no |
//! | `TransactionError::InvalidState` | the transaction is not open (committed, aborted, timed out) | no |
//! | `TransactionError::OperationFailed` | a send or acknowledgement of the transaction failed; the commit aborted it | no |
//! | `Error::Broker` `TransactionConflict` | the acknowledgement conflicts with an earlier one | no |
//! | `Error::Broker` `TransactionNotFound` / `InvalidTxnStatus` | the coordinator no longer has the transaction (it aborted it for its timeout, or it already ended it: see below); the state becomes `Error` | no |
//! | `Error::Timeout`, `Error::ConnectionLost`, another `Error::Broker` on `commit` / `abort` | the outcome is unknown; the state stays `Committing` / `Aborting` and the call may be made again | yes |
//!
//! ## The coordinator going away mid-commit
//!
//! Requests to the coordinator are retried within the operation timeout when the connection
//! is lost (connected again, the request is sent again, as Java's
//! `TransactionMetaStoreHandler` re-sends its pending requests) and when it answers
//! `TransactionCoordinatorNotFound` (with backoff). What a resent END_TXN meets is the
//! coordinator's state, recovered from its log (the broker's `TransactionMetadataStoreService`):
//!
//! - the transaction still COMMITTING (the coordinator had recorded the commit but not
//!   finished it): the resend finishes it and `commit` succeeds;
//! - the transaction already committed and forgotten: the answer is `TransactionNotFound`,
//!   so `commit` fails with it and the state is `Error`, as Java's `TransactionImpl`. The
//!   outcome is then unknown to the client: committed (the usual case after a lost answer)
//!   or aborted (its timeout passed first). An exactly-once loop needs no more: whatever the
//!   coordinator decided, the input's acknowledgement and its outputs went together, so
//!   negatively acknowledge the input and move on (it comes back only if it was aborted).
//!
//! ## Exactly once, end to end
//!
//! `examples/exactly_once.rs` runs the consume–transform–produce loop above (one transaction
//! per input) against the mock broker by default, or any broker through `PULSAR_URL`
//! (`--input` / `--output` make it the service); its tests kill its process inside a
//! transaction and start it again, kill the loop before and after a commit, and run it
//! through a broker restart, counting one delivered output per input each time, and over
//! batched input. One thing it relies on: for the output producer's resends after a
//! reconnect, broker deduplication on the output's namespace (a send that was stored but
//! whose receipt was lost is otherwise stored twice in the transaction).
//!
//! ```
//! # #[cfg(feature = "mock-broker")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pulsar_sdk::mock::{MockBroker, MockBrokerConfig, MockTransactions};
//! use pulsar_sdk::{Client, InitialPosition, ProducerMessage, SubscriptionType};
//!
//! let broker = MockBroker::start_with(MockBrokerConfig {
//!     transactions: MockTransactions::Enabled,
//!     ..Default::default()
//! })
//! .await?;
//! let client = Client::builder()
//!     .service_url(broker.service_url())
//!     .enable_transaction(true)
//!     .build()?;
//! // Batched input (the default) is fine: each message is acknowledged on its own.
//! let feeder = client.producer("in").create().await?;
//! feeder.send_and_wait("hello").await?;
//! let mut input = client
//!     .consumer("in")
//!     .subscription("upper")
//!     .subscription_type(SubscriptionType::Shared)
//!     .initial_position(InitialPosition::Earliest)
//!     .subscribe()
//!     .await?;
//! let mut check = client
//!     .consumer("out")
//!     .subscription("check")
//!     .initial_position(InitialPosition::Earliest)
//!     .subscribe()
//!     .await?;
//! let output = client.producer("out").create().await?;
//!
//! let msg = input.recv().await?;
//! let txn = client.transaction().begin().await?;
//! let upper = msg.payload_str().unwrap_or_default().to_uppercase();
//! let _receipt = output.send(ProducerMessage::new(upper).transaction(&txn)).await?;
//! input.acker().ack_with_transaction(&msg, &txn).await?;
//! txn.commit().await?;
//!
//! assert_eq!(check.recv().await?.payload_str(), Some("HELLO"));
//! client.close().await?;
//! # Ok(()) }
//! # #[cfg(not(feature = "mock-broker"))]
//! # fn main() {}
//! ```
//!
//! ## pulsar-lite and brokers without a coordinator
//!
//! pulsar-lite (the broker of this crate's real-broker tests) has no transaction coordinator:
//! it ignores the coordinator connection, so `begin()` fails with
//! `TransactionError::NoCoordinator` after one operation timeout. Test transactional code
//! against the mock broker instead: `MockBrokerConfig { transactions:
//! MockTransactions::Enabled, .. }` gives it a coordinator, a transaction buffer per topic and
//! pending acknowledgements per subscription (its docs say where it simplifies the broker).
