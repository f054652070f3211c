//! The fault-injection calls of one broker, at the level of librdkafka's MockCluster: pushed
//! errors per request type (`rd_kafka_mock_push_request_errors`), a round-trip time
//! (`rd_kafka_mock_broker_set_rtt`), a connection cut mid-frame, and a storage cut. Going down
//! and up (`rd_kafka_mock_broker_set_down` / `_up`) is in `cluster`; the cluster-wide view is
//! [`MockCluster`](super::MockCluster).

use std::time::Duration;

use super::injected::{ConsumedError, MockError, MockRequest};
use super::session::Pushed;
use super::{lock, ConnectionId, MockBroker};
use crate::error::ServerError;

impl MockBroker {
    /// Answers the next [`error.times`](MockError::times) requests of type
    /// [`error.request`](MockError::request) that this broker receives (and that match the
    /// error's topic and connection scope) with the error, instead of serving them; see
    /// [`MockRequest`] for the answer each request type gets. Errors are consumed in the order
    /// they were pushed, once each; [`consumed_errors`](Self::consumed_errors) reports them.
    ///
    /// ```no_run
    /// # async fn demo() -> std::io::Result<()> {
    /// use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
    /// use pulsar_sdk::ServerError;
    ///
    /// let broker = MockBroker::start().await?;
    /// // The next two SENDs on "orders" fail; the producer reconnects and sends them again.
    /// broker.push_error(
    ///     MockError::new(MockRequest::Send, ServerError::PersistenceError, "bookie down")
    ///         .times(2)
    ///         .on_topic("orders"),
    /// );
    /// # Ok(()) }
    /// ```
    pub fn push_error(&self, error: MockError) {
        let url = self.service_url();
        lock(&self.shared().state).injected.push(error, Some(&url));
    }

    /// Answers the next `codes.len()` requests of type `request` with these codes, one each in
    /// order (as `rd_kafka_mock_push_request_errors`); the message names the code.
    pub fn push_errors(&self, request: MockRequest, codes: &[ServerError]) {
        for code in codes {
            self.push_error(MockError::new(
                request,
                *code,
                format!("mock broker: pushed {code:?}"),
            ));
        }
    }

    /// The pushed errors this broker has answered requests with, in order (one entry per
    /// request answered).
    pub fn consumed_errors(&self) -> Vec<ConsumedError> {
        lock(&self.shared().state)
            .injected
            .consumed(Some(&self.shared().service_url))
    }

    /// The pushed errors this broker may still answer with (also cluster-wide ones), each with
    /// the number of requests it still answers in [`MockError::times`].
    pub fn pending_errors(&self) -> Vec<MockError> {
        lock(&self.shared().state)
            .injected
            .pending(Some(&self.shared().service_url))
    }

    /// Drops the errors pushed to this broker that are still pending.
    pub fn clear_pushed_errors(&self) {
        lock(&self.shared().state)
            .injected
            .clear(Some(&self.shared().service_url));
    }

    /// Waits until this broker has answered at least `count` requests with pushed errors and
    /// returns the report ([`consumed_errors`](Self::consumed_errors)); `None` after `timeout`.
    pub async fn wait_for_consumed_errors(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Option<Vec<ConsumedError>> {
        let notify = lock(&self.shared().state).injected.notify.clone();
        tokio::time::timeout(timeout, async {
            loop {
                let notified = notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let consumed = self.consumed_errors();
                if consumed.len() >= count {
                    return consumed;
                }
                notified.await;
            }
        })
        .await
        .ok()
    }

    /// Sets the broker's round-trip time: every frame it sends of its own (responses, PONG,
    /// MESSAGE and other broker-initiated frames) leaves `rtt` after it would have, as over a
    /// slow link; frames keep their order. Frames pushed by the test are not delayed. Adds to
    /// [`set_response_delay`](Self::set_response_delay). Applies to frames from now on;
    /// `Duration::ZERO` turns it off.
    pub fn set_round_trip_time(&self, rtt: Duration) {
        lock(&self.shared().faults).round_trip_time = rtt;
    }

    /// Cuts connection `conn` in the middle of a frame: the broker writes the first half of a
    /// frame (the first response waiting for its delay, if any, else a PING) and closes the
    /// connection, so the client reads a truncated frame and then the end of the stream. Its
    /// producers and consumers are detached as for [`drop_connection`](Self::drop_connection).
    /// Happens after the frames already pushed to it; returns `false` if the connection is
    /// gone.
    pub fn drop_connection_mid_frame(&self, conn: ConnectionId) -> bool {
        lock(&self.shared().connections)
            .live
            .get(&conn)
            .is_some_and(|s| s.push_tx.send(Pushed::CutMidFrame).is_ok())
    }

    /// Cuts the broker from the storage (`true`) or restores it (`false`): it keeps answering,
    /// but every write fails with a retriable error: SEND with SEND_ERROR PersistenceError
    /// (nothing is stored), a PRODUCER or SUBSCRIBE that would create a topic or a durable
    /// subscription with ERROR ServiceNotReady. Reads (lookups, dispatch, existing producers
    /// and subscriptions) go on; acks are kept in memory. Other brokers of the cluster are not
    /// affected.
    pub fn set_storage_cut(&self, cut: bool) {
        let url = self.service_url();
        lock(&self.shared().state)
            .settings_mut(&url, self.config())
            .storage_cut = cut;
    }
}
