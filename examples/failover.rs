//! Cluster-level failover: produces one message every 200 ms to a topic while an
//! `AutoClusterFailover` moves the client between a primary and a standby cluster, printing
//! each switch and each receipt's cluster.
//!
//! cargo run --example failover -- pulsar://east:6650 pulsar://west:6650 [TOPIC] [COUNT]
//!
//! Kill the primary while it runs: the client moves to the standby (a few seconds: the default
//! check interval is 5 s), then back once the primary answers again. See the guide's
//! connecting chapter for the geo-replication the brokers need so consumers miss nothing.

use std::time::Duration;

use pulsar_sdk::{AutoClusterFailover, Client, ServiceInfo};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: failover PRIMARY_URL STANDBY_URL [TOPIC] [COUNT]";
    let primary = args.next().ok_or(usage)?;
    let standby = args.next().ok_or(usage)?;
    let topic = args.next().unwrap_or_else(|| "failover-demo".into());
    let count: usize = args.next().map_or(Ok(100), |n| n.parse())?;

    let failover = AutoClusterFailover::builder()
        .primary(ServiceInfo::new(&primary)?)
        .secondary(ServiceInfo::new(&standby)?)
        .check_interval(Duration::from_secs(1))
        .failover_threshold(2)
        .switch_back_threshold(5)
        .build()?;
    let client = Client::builder().service_info_provider(failover).build()?;

    let mut clusters = client.service_info_updates();
    tokio::spawn(async move {
        while let Some(now) = clusters.changed().await {
            println!("switched to {}", now.service_url());
        }
    });

    let producer = client.producer(&topic).create().await?;
    for i in 0..count {
        let receipt = producer.send(format!("message {i}")).await?.await?;
        println!("{i}: {receipt} on {}", client.service_url());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    client.close().await?;
    Ok(())
}
