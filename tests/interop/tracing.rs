//! The W3C trace context across clients: a `traceparent` the official client sends is the
//! parent of our consumer's `process` span, and the one our traced producer writes is a plain
//! property the official client reads back unchanged.

use std::time::Duration;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use pulsar_sdk::{Client, InitialPosition};
use support::official::{self, OfficialMessage, ProduceOpts};
use support::{shared_broker, unique_name};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: &str = "00f067aa0ba902b7";

fn traced_client() -> (Client, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let client = Client::builder()
        .service_url(shared_broker().url())
        .tracer(provider.tracer("interop"))
        .build()
        .unwrap();
    (client, exporter)
}

#[tokio::test]
async fn a_traceparent_from_the_official_client_parents_our_process_span() {
    let (client, exporter) = traced_client();
    let topic = unique_name("trace-from-official");
    let mut consumer = client
        .consumer(&topic)
        .subscription("s")
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let mut msg = OfficialMessage::new("traced by python");
    msg.properties
        .insert("traceparent".into(), format!("00-{TRACE}-{SPAN}-01"));
    msg.properties
        .insert("tracestate".into(), "vendor=x".into());
    let opts = ProduceOpts {
        messages: vec![msg],
        ..Default::default()
    };
    official::produce_async(&shared_broker().url(), &topic, &opts)
        .await
        .unwrap();
    let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
        .await
        .expect("the message in time")
        .unwrap();
    let parent = m.trace_context().span().span_context().clone();
    assert_eq!(parent.trace_id().to_string(), TRACE);
    assert_eq!(parent.span_id().to_string(), SPAN);
    assert_eq!(parent.trace_state().header(), "vendor=x");
    consumer.ack(&m).unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let process = spans
        .iter()
        .find(|s| s.name.starts_with("process "))
        .unwrap_or_else(|| panic!("a process span: {spans:#?}"));
    assert_eq!(process.span_context.trace_id().to_string(), TRACE);
    assert_eq!(process.parent_span_id.to_string(), SPAN);
    consumer.close().await.unwrap();
}

#[tokio::test]
async fn the_official_client_reads_our_traceparent_unchanged() {
    let (client, exporter) = traced_client();
    let topic = unique_name("trace-to-official");
    let producer = client.producer(&topic).create().await.unwrap();
    producer.send_and_wait("traced by rust").await.unwrap();
    producer.close().await.unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let send = spans
        .iter()
        .find(|s| s.name.starts_with("send "))
        .unwrap_or_else(|| panic!("a send span: {spans:#?}"));
    let got = official::consume_async(
        &shared_broker().url(),
        &topic,
        &unique_name("sub"),
        1,
        Duration::from_secs(30),
        "earliest",
        "shared",
    )
    .await
    .unwrap();
    assert_eq!(
        got[0].properties.get("traceparent"),
        Some(&format!(
            "00-{}-{}-01",
            send.span_context.trace_id(),
            send.span_context.span_id()
        ))
    );
}
