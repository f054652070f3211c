//! Hostile-broker tests of the client-wide parts: reconnect pacing, partition counts, and the
//! inputs the builders accept (issue: a hostile broker cannot crash, exhaust or spin the client).

mod common;
mod hostile;

use common::{test_client, within};
use hostile::Hostile;

/// The harness itself: a broker that answers the ordinary requests lets a producer be created
/// and closed.
#[tokio::test]
async fn a_well_behaved_script_serves_a_producer() {
    let broker = Hostile::start(|mut peer| async move {
        peer.handshake(None).await;
        peer.serve().await;
    })
    .await;
    let client = test_client(&broker.url()).build().unwrap();
    let producer = within("create", client.producer("t").create())
        .await
        .unwrap();
    within("close", producer.close()).await.unwrap();
    within("client close", client.close()).await.unwrap();
}
