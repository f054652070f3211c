//! The router's request bookkeeping, without a socket.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{PendingRequest, Router};
use crate::proto::{base_command::Type, BaseCommand, CommandProducerSuccess};

fn request(
    deadline: Instant,
) -> (
    PendingRequest,
    oneshot::Receiver<crate::connection::Response>,
) {
    let (responder, rx) = oneshot::channel();
    let req = PendingRequest {
        responder,
        operation: "create",
        timeout: Duration::from_secs(1),
        deadline,
        sent: true,
    };
    (req, rx)
}

fn producer_success(request_id: u64, ready: bool) -> Box<BaseCommand> {
    Box::new(BaseCommand {
        r#type: Type::ProducerSuccess as i32,
        producer_success: Some(CommandProducerSuccess {
            request_id,
            producer_ready: Some(ready),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Java `ClientCnx.handleProducerSuccess`: `producer_ready = false` marks the request
/// responded; it outlives its deadline and completes with the second answer.
#[tokio::test(start_paused = true)]
async fn a_request_answered_wait_has_no_deadline_until_its_final_answer() {
    let mut router = Router::default();
    let deadline = Instant::now() + Duration::from_secs(1);
    let (req, mut rx) = request(deadline);
    router.add_request(7, req);
    router.complete(7, producer_success(7, false));
    assert_eq!(router.next_deadline(), None);
    router.expire(deadline + Duration::from_secs(3600));
    assert!(rx.try_recv().is_err(), "still waiting");
    router.complete(7, producer_success(7, true));
    let granted = rx.try_recv().expect("answered").expect("granted");
    assert_eq!(granted.producer_success.unwrap().producer_ready, Some(true));
    assert_eq!(router.stats().pending_requests, 0);
}

/// A waiting request whose caller is gone can never be answered to anyone: it is forgotten
/// (when the next request is added), so waits given up do not pile up on a connection.
#[tokio::test(start_paused = true)]
async fn a_waiting_request_given_up_by_its_caller_is_forgotten() {
    let mut router = Router::default();
    let far = Instant::now() + Duration::from_secs(1);
    for id in 0..100 {
        let (req, rx) = request(far);
        router.add_request(id, req);
        router.complete(id, producer_success(id, false));
        drop(rx); // the caller gave up
    }
    let (req, _rx) = request(far);
    router.add_request(1000, req);
    assert_eq!(
        router.stats().pending_requests,
        1,
        "only the live request is kept"
    );
}

/// Java `ClientCnx.channelInactive`: whatever ended the connection (here a bad frame), the
/// requests pending on it fail as disconnected, which is retriable; the client's own close
/// stays `Closed`.
#[tokio::test(start_paused = true)]
async fn pending_requests_of_a_connection_that_ended_see_it_lost() {
    let far = Instant::now() + Duration::from_secs(1);
    let bad_frame = crate::error::Error::Codec(crate::codec::CodecError::Malformed("x".into()));
    let mut router = Router::default();
    let (req, mut rx) = request(far);
    router.add_request(1, req);
    router.shutdown(&bad_frame);
    let e = rx.try_recv().unwrap().unwrap_err();
    assert!(matches!(e, crate::error::Error::ConnectionLost(_)), "{e:?}");
    assert!(e.is_retriable());

    let mut router = Router::default();
    let (req, mut rx) = request(far);
    router.add_request(1, req);
    router.shutdown(&crate::error::Error::Closed);
    let e = rx.try_recv().unwrap().unwrap_err();
    assert!(matches!(e, crate::error::Error::Closed), "{e:?}");
}
