//! The one reconnect loop producers and consumers share: backoff between attempts (fast
//! retries while the broker refuses connections), a PIP-307 assigned broker tried first and at
//! once, retriable failures retried, the first non-retriable one returned.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::service_url::ServiceUrl;
use crate::topic::TopicName;

/// After a connection loss, while the broker refuses connections (e.g. it is restarting),
/// attempts stay at the initial backoff delay for this long before growing: such an attempt
/// costs nothing, and the entity is back as soon as the broker is.
pub(crate) const FAST_RETRY_WINDOW: Duration = Duration::from_secs(5);

/// The delay between those fast attempts (or the policy's initial delay, if smaller).
pub(crate) const FAST_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Runs `attempt` until it succeeds or fails for good. `attempt` gets the broker to connect
/// to directly (the assigned broker, first attempt only) or `None` for a lookup.
pub(crate) async fn reconnect<T, F, Fut>(
    client: &Client,
    topic: &TopicName,
    kind: &'static str,
    mut direct: Option<ServiceUrl>,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut(Option<ServiceUrl>) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let lost_at = Instant::now();
    let mut backoff = client.backoff();
    let mut refused = false;
    loop {
        if direct.is_none() {
            let delay = if refused && lost_at.elapsed() < FAST_RETRY_WINDOW {
                client.backoff_policy().initial.min(FAST_RETRY_DELAY)
            } else {
                backoff.next_delay()
            };
            tokio::time::sleep(delay).await;
        }
        match attempt(direct.take()).await {
            Ok(ok) => return Ok(ok),
            Err(e) if e.is_retriable() => {
                refused = matches!(e, Error::Connect { .. });
                tracing::debug!(%topic, kind, error = %e, "reconnect failed; retrying");
            }
            Err(e) => return Err(e),
        }
    }
}
