//! Cluster-level failover (PIP-121) between two pulsar-lite brokers, each a cluster of its own:
//! the primary is killed (SIGKILL) under a steady produce/consume load, the clients move to the
//! standby by themselves (`AutoClusterFailover`), and back once the primary runs again.
//!
//! Two pulsar-lite do not replicate, so nothing the primary stored is on the standby: the
//! consumer (Earliest, so its subscription on the standby starts at the beginning) reads what
//! was sent there, and, back on the primary, what the primary stored and had not delivered.
//! Every message whose send was acknowledged must be received (duplicates are allowed: pulsar-lite
//! has no deduplication, and a receipt lost in the kill means a re-send). Bounds are generous:
//! this pins correctness; `benches/cluster_failover.rs` measures.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pulsar_sdk::{
    AutoClusterFailover, BackoffPolicy, Client, InitialPosition, ServiceInfo, SubscriptionType,
};
use support::{unique_name, PulsarLite};
use tokio::time::Instant;

const TOTAL: usize = 1_500;
/// Messages per second.
const RATE: u64 = 300;
const WITHIN: Duration = Duration::from_secs(90);

fn client(primary: &PulsarLite, standby: &PulsarLite) -> Client {
    if std::env::var("RUST_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
    let failover = AutoClusterFailover::builder()
        .primary(ServiceInfo::new(&primary.url()).unwrap())
        .secondary(ServiceInfo::new(&standby.url()).unwrap())
        .check_interval(Duration::from_millis(200))
        .failover_threshold(2)
        .switch_back_threshold(3)
        .probe_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    Client::builder()
        .service_info_provider(failover)
        .operation_timeout(Duration::from_secs(10))
        .backoff(BackoffPolicy {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
            ..Default::default()
        })
        .build()
        .unwrap()
}

fn on(url: String) -> impl FnMut(&ServiceInfo) -> bool {
    move |i| i.service_url().to_string() == url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// Was #[ignore]d (1 run in ~15 lost acked messages and stalled ~98 s): acks of messages
// received on the standby, kept in the ack group at the switch back (or made just after it),
// went to the primary, where pulsar-lite's ids (ledger 0, entries from 0) named other
// messages, which were then never delivered. Acks of the cluster left are now dropped.
async fn kill_the_primary_under_load_move_to_the_standby_and_back_without_losing_acked_messages() {
    let mut primary = PulsarLite::start();
    let standby = PulsarLite::start();
    let producer_client = client(&primary, &standby);
    let consumer_client = client(&primary, &standby);
    let topic = unique_name("failover");
    let producer = producer_client
        .producer(&topic)
        .send_timeout(Duration::from_secs(120))
        .create()
        .await
        .unwrap();
    let mut consumer = consumer_client
        .consumer(&topic)
        .subscription("live")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();

    let received = Arc::new(Mutex::new(Vec::<(usize, Instant)>::new()));
    let seen = received.clone();
    let reading = tokio::spawn(async move {
        while let Ok(m) = consumer.recv().await {
            let i: usize = std::str::from_utf8(&m.payload).unwrap().parse().unwrap();
            seen.lock().unwrap().push((i, Instant::now()));
            let _ = consumer.ack(&m);
        }
    });

    // The load: one send every 1/RATE s; receipts awaited in order by one task.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, pulsar_sdk::SendFuture)>();
    let receipts = tokio::spawn(async move {
        let mut acked = Vec::new();
        let mut failed = 0usize;
        while let Some((i, f)) = rx.recv().await {
            match f.await {
                Ok(_) => acked.push((i, Instant::now())),
                Err(_) => failed += 1,
            }
        }
        (acked, failed)
    });
    let sending = {
        let producer = producer.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
            for i in 0..TOTAL {
                tick.tick().await;
                let f = producer.send(i.to_string()).await.unwrap();
                tx.send((i, f)).unwrap();
            }
        })
    };

    let mut producer_side = producer_client.service_info_updates();
    let mut consumer_side = consumer_client.service_info_updates();
    support::wait_until("some traffic", || received.lock().unwrap().len() >= 200).await;
    primary.stop(); // SIGKILL
    let killed = Instant::now();
    for updates in [&mut producer_side, &mut consumer_side] {
        tokio::time::timeout(WITHIN, updates.wait_for(on(standby.url())))
            .await
            .expect("moved to the standby")
            .unwrap();
    }
    let moved = killed.elapsed();
    let n_at_kill = received
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, at)| *at <= killed)
        .count();
    support::wait_until("a delivery from the standby", || {
        received.lock().unwrap().len() > n_at_kill + 50
    })
    .await;
    let first_after = received
        .lock()
        .unwrap()
        .iter()
        .find(|(_, at)| *at > killed)
        .map(|(_, at)| at.duration_since(killed));

    primary.start_again();
    let restarted = Instant::now();
    for updates in [&mut producer_side, &mut consumer_side] {
        tokio::time::timeout(WITHIN, updates.wait_for(on(primary.url())))
            .await
            .expect("switched back to the primary")
            .unwrap();
    }
    let back = restarted.elapsed();

    sending.await.unwrap();
    producer.flush().await.unwrap();
    drop(producer);
    let (acked, failed) = tokio::time::timeout(WITHIN, receipts)
        .await
        .unwrap()
        .unwrap();
    let acked: BTreeSet<usize> = acked.into_iter().map(|(i, _)| i).collect();
    // What the standby stored after the consumer had left it (the two do not replicate):
    // read it there, on the same subscription, with a client of the standby alone.
    let standby_client = Client::builder()
        .service_url(standby.url())
        .build()
        .unwrap();
    // pulsar-lite, just left by the consumer that switched back, has once closed the
    // connection of this fresh subscribe ("broker closed the connection", a fresh-clone CI
    // run): a lost connection is retried, as an application would; any other error fails.
    let mut attempts = 0;
    let mut leftover = loop {
        match standby_client
            .consumer(&topic)
            .subscription("live")
            .subscription_type(SubscriptionType::Shared)
            .subscribe()
            .await
        {
            Ok(c) => break c,
            Err(pulsar_sdk::Error::ConnectionLost(why)) if attempts < 20 => {
                attempts += 1;
                println!("subscribe to the standby: connection lost ({why}), again");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("subscribe to the standby: {e}"),
        }
    };
    let mut on_standby = 0usize;
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(3), leftover.recv()).await {
        let i: usize = std::str::from_utf8(&m.payload).unwrap().parse().unwrap();
        received.lock().unwrap().push((i, Instant::now()));
        leftover.ack(&m).unwrap();
        on_standby += 1;
    }
    let deadline = Instant::now() + WITHIN;
    let lost = loop {
        let got: BTreeSet<usize> = received.lock().unwrap().iter().map(|(i, _)| *i).collect();
        let lost: Vec<usize> = acked.difference(&got).copied().collect();
        if lost.is_empty() || Instant::now() > deadline {
            break lost;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let deliveries = received.lock().unwrap().len();
    let distinct = received
        .lock()
        .unwrap()
        .iter()
        .map(|(i, _)| *i)
        .collect::<BTreeSet<_>>()
        .len();
    println!(
        "failover: moved {moved:?} after the kill, first delivery after the kill {first_after:?}, \
         back {back:?} after the restart; {} acked, {failed} failed sends, {} lost, {} duplicates, \
         {on_standby} read from the standby after the switch back",
        acked.len(),
        lost.len(),
        deliveries - distinct
    );
    assert!(lost.is_empty(), "acknowledged then lost: {lost:?}");
    assert_eq!(
        failed, 0,
        "no send failed (the send timeout covers the switch)"
    );
    assert_eq!(acked.len(), TOTAL);
    reading.abort();
    producer_client.close().await.unwrap();
    let _ = consumer_client.close().await;
}
