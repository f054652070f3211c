//! Produce 10 messages and consume them back.
//!
//! Uses the broker at `PULSAR_URL` (or `--url`) if given; otherwise starts the crate's embedded
//! mock broker in-process, so `cargo run --example quickstart` works with nothing else running.
//! For a secured cluster: `PULSAR_TLS_TRUST_CERTS`, `PULSAR_TLS_CERT` + `PULSAR_TLS_KEY`,
//! `PULSAR_ALLOW_INSECURE=1`, `PULSAR_AUTH_TOKEN` (a token or `file:PATH`), `PULSAR_AUTH_OAUTH2`
//! (`ISSUER,KEYFILE,AUDIENCE`), like the other examples' `--tls-*` / `--auth-*` options.

mod common;

use std::time::Duration;

use pulsar_sdk::{Client, InitialPosition, SubscriptionType};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg_url = std::env::args().skip_while(|a| a != "--url").nth(1);
    let url = arg_url.or_else(|| std::env::var("PULSAR_URL").ok());
    // Keep the embedded broker alive for the whole run.
    let _embedded;
    let url = match url {
        Some(url) => url,
        None => {
            let broker = pulsar_sdk::mock::MockBroker::start().await?;
            println!(
                "PULSAR_URL not set: started the embedded mock broker at {}",
                broker.service_url()
            );
            let url = broker.service_url();
            _embedded = broker;
            url
        }
    };

    let client = common::secure(
        Client::builder().service_url(&url),
        common::Security::from_env(),
    )
    .build()?;
    let topic = format!("quickstart-{}", std::process::id());

    // Subscribe first (from the earliest message), then produce.
    let mut consumer = client
        .consumer(&topic)
        .subscription("quickstart-sub")
        .subscription_type(SubscriptionType::Shared)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await?;
    let producer = client.producer(&topic).create().await?;

    // Sends are pipelined: `send` queues the message and returns a future of its id.
    let mut receipts = Vec::new();
    for i in 0..10 {
        receipts.push(producer.send(format!("hello-{i}")).await?);
    }
    for receipt in receipts {
        println!("sent     {}", receipt.await?);
    }

    for _ in 0..10 {
        let msg = tokio::time::timeout(Duration::from_secs(10), consumer.recv()).await??;
        println!(
            "received {} {:?}",
            msg.id,
            msg.payload_str().unwrap_or("<binary>")
        );
        consumer.ack(&msg)?;
    }

    consumer.close().await?;
    producer.close().await?;
    client.close().await?;
    println!("quickstart done: 10 sent, 10 received");
    Ok(())
}
