//! OpenTelemetry tracing end to end: a request span, the `send` span it parents, the
//! `process` span on the consumer (a child of the send span, through the message's
//! `traceparent`), and the application's own work continuing the trace.
//!
//! ```text
//! cargo run --features opentelemetry --example tracing                   # in-process mock broker
//! cargo run --features opentelemetry --example tracing -- pulsar://localhost:6650
//! ```
//!
//! The exporter here keeps the spans in memory and prints them as the program ends; a real
//! service installs its own (OTLP, stdout, ...) on the `SdkTracerProvider` the same way.

use opentelemetry::trace::{Span, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use pulsar_sdk::{Client, ProducerMessage};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("tracing-example");

    // A broker: the one named on the command line, else the crate's mock broker.
    let mut _mock = None;
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            let broker = pulsar_sdk::mock::MockBroker::start().await?;
            let url = broker.service_url();
            _mock = Some(broker);
            url
        }
    };
    let client = Client::builder()
        .service_url(url)
        .tracer(provider.tracer("tracing-example"))
        .build()?;
    let topic = format!("tracing-example-{}", std::process::id());
    let mut consumer = client
        .consumer(&topic)
        .subscription("example")
        .subscribe()
        .await?;
    let producer = client.producer(&topic).create().await?;

    // The request this message is sent for: the send span's parent.
    let request = Context::current_with_span(tracer.start("handle request"));
    let id = producer
        .send_and_wait(ProducerMessage::new("order-1").trace_context(&request))
        .await?;
    request.span().end();
    println!("sent {id}, traceparent carried as a message property");

    let msg = consumer.recv().await?;
    println!(
        "received {} with traceparent {:?}",
        msg.id,
        msg.properties.get("traceparent")
    );
    // The application's own work on the message, in the same trace.
    let mut work = tracer.start_with_context("process order", &msg.trace_context());
    work.end();
    consumer.ack(&msg)?; // ends the process span
    client.close().await?;

    for span in exporter.get_finished_spans()? {
        println!(
            "{:<55} kind={:<9?} trace={} span={} parent={}",
            span.name,
            span.span_kind,
            span.span_context.trace_id(),
            span.span_context.span_id(),
            span.parent_span_id
        );
    }
    provider.shutdown()?;
    Ok(())
}
