//! Transactions against pulsar-lite, which has no transaction coordinator: `begin` fails with
//! `TransactionError::NoCoordinator` within one operation timeout, whatever pulsar-lite does
//! with the coordinator discovery (the `pulsar/system` metadata lookup, TC_CLIENT_CONNECT).

use std::time::{Duration, Instant};

use pulsar_sdk::{Error, TransactionError};

#[tokio::test]
async fn pulsar_lite_has_no_coordinator_and_begin_says_so_within_one_operation_timeout() {
    let broker = support::shared_broker();
    let op = Duration::from_secs(2);
    let client = pulsar_sdk::Client::builder()
        .service_url(broker.url())
        .operation_timeout(op)
        .enable_transaction(true)
        .build()
        .unwrap();
    let started = Instant::now();
    let e = tokio::time::timeout(op * 5, client.transaction().begin())
        .await
        .expect("begin ends")
        .unwrap_err();
    let took = started.elapsed();
    eprintln!("pulsar-lite: begin failed after {took:?} with {e}");
    assert!(
        matches!(
            e,
            Error::Transaction(TransactionError::NoCoordinator { .. })
        ),
        "{e:?}"
    );
    assert!(took < op + Duration::from_millis(500), "took {took:?}");
}
