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
//!   (Exclusive and Failover subscriptions): the subscription is registered once, and the
//!   acknowledgement waits for the broker's answer. A message already acknowledged, or pending
//!   in another transaction, is refused with `Error::Broker` code `TransactionConflict`. After
//!   an abort the messages are unacknowledged again and come back on a redelivery (ack
//!   timeout, negative ack, reconnect, another consumer taking over).
//! - Acknowledging a message of a batch, or a chunked message, in a transaction is refused
//!   with `Error::InvalidOperation` for now: produce pipeline inputs without batching.
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
//! | `Error::Broker` `TransactionNotFound` / `InvalidTxnStatus` | the coordinator no longer has the transaction (e.g. it aborted it for its timeout); the state becomes `Error` | no |
//! | `Error::Timeout`, `Error::ConnectionLost` on `commit` / `abort` | the outcome is unknown; the state stays `Committing` / `Aborting` and the call may be made again | yes |
//!
//! Requests to the coordinator are retried within the operation timeout when the connection
//! is lost and when it answers `TransactionCoordinatorNotFound` (as upstream).
//!
//! ## pulsar-lite and brokers without a coordinator
//!
//! pulsar-lite (the broker of this crate's real-broker tests) has no transaction coordinator:
//! it ignores the coordinator connection, so `begin()` fails with
//! `TransactionError::NoCoordinator` after one operation timeout. Test transactional code
//! against the mock broker instead: `MockBrokerConfig { transactions:
//! MockTransactions::Enabled, .. }` gives it a coordinator, a transaction buffer per topic and
//! pending acknowledgements per subscription (its docs say where it simplifies the broker).
