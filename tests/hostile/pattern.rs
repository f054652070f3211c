//! A hostile broker against pattern consumers (issue #31 §3): a namespace listing far more
//! matching topics than the consumer may subscribe. `pattern_max_topics` bounds what is
//! subscribed (each topic costs a consumer per partition, ~21 KB), and the rest is reported.

use crate::hostile;
use common::client;
use support as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hostile::{Hostile, MemWatch};
use pulsar_sdk::mock::wire::{self, base_command::Type};

const MIB: usize = 1024 * 1024;

/// 30,000 matching topics listed (one 1.4 MB GetTopicsOfNamespace answer, polled again every
/// 100 ms), `pattern_max_topics(50)`: 50 SUBSCRIBEs, 29,950 reported skipped, and the heap
/// stays bounded. Without the bound (today's main, where the option did not exist) every
/// listed topic was subscribed: the subscribe did not finish in 10 s and the heap grew by
/// ~21 KB per topic.
#[tokio::test]
async fn a_listing_of_thirty_thousand_topics_subscribes_only_max_topics() {
    const LISTED: usize = 30_000;
    hostile::serial();
    let subscribes = Arc::new(AtomicUsize::new(0));
    let listings = Arc::new(AtomicUsize::new(0));
    let (seen, listed) = (subscribes.clone(), listings.clone());
    let broker = Hostile::start(move |mut peer| {
        let (seen, listed) = (seen.clone(), listed.clone());
        async move {
            if peer.handshake(None).await.is_none() {
                return;
            }
            while let Some(frame) = peer.recv().await {
                let answer = match frame.ty() {
                    Type::GetTopicsOfNamespace => {
                        listed.fetch_add(1, Ordering::SeqCst);
                        let req = frame.cmd.get_topics_of_namespace.as_ref().unwrap();
                        wire::BaseCommand {
                            r#type: Type::GetTopicsOfNamespaceResponse as i32,
                            get_topics_of_namespace_response: Some(
                                wire::CommandGetTopicsOfNamespaceResponse {
                                    request_id: req.request_id,
                                    topics: (0..LISTED)
                                        .map(|i| format!("persistent://public/default/hp-{i:06}"))
                                        .collect(),
                                    filtered: Some(false),
                                    topics_hash: None,
                                    changed: Some(true),
                                },
                            ),
                            ..Default::default()
                        }
                    }
                    Type::Subscribe => {
                        seen.fetch_add(1, Ordering::SeqCst);
                        hostile::success(frame.cmd.subscribe.as_ref().unwrap().request_id)
                    }
                    _ => match peer.reply(&frame.cmd) {
                        Some(a) => a,
                        None => continue,
                    },
                };
                if peer.send(answer).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    let client = client(&broker.url());
    let mem = MemWatch::start();
    let consumer = common::within(
        "subscribe",
        client
            .pattern_consumer("persistent://public/default/hp-.*")
            .subscription("s")
            .pattern_auto_discovery_period(Duration::from_millis(100))
            .pattern_max_topics(50)
            .subscribe(),
    )
    .await
    .unwrap();
    assert_eq!(consumer.topics().len(), 50);
    common::within(
        "the skipped count",
        common::wait_until("29,950 skipped", || {
            consumer.pattern_topics_skipped() == LISTED - 50
        }),
    )
    .await;
    // A poll later nothing more is subscribed. (One, not three: a poll of 30,000 topics in a
    // debug build took ~3 s on a loaded machine, and three of them overran the 10 s patience
    // in 3 of 20 runs of this tier under load.)
    let polls = listings.load(Ordering::SeqCst);
    common::within(
        "one more poll",
        common::wait_until("one more poll", || listings.load(Ordering::SeqCst) > polls),
    )
    .await;
    assert_eq!(subscribes.load(Ordering::SeqCst), 50, "SUBSCRIBEs sent");
    eprintln!(
        "30,000 listed, 50 subscribed: heap growth {} KiB, peak {} KiB",
        mem.growth() / 1024,
        mem.peak_growth() / 1024
    );
    mem.assert_peak_below("a listing of 30,000 topics", 64 * MIB);
    consumer.close().await.unwrap();
}
