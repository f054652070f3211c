//! OpenTelemetry tracing (cargo feature `opentelemetry`) against the SDK's in-memory
//! exporter: one trace from the application's request through `send` to `process`, the
//! process span's end on ack, nack and ack timeout, and nothing at all with tracing off.

use support as common;

use std::time::Duration;

use common::{full, recv, test_client, unbatched_producer, within};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use pulsar_sdk::mock::wire::base_command::Type;
use pulsar_sdk::mock::MockBroker;
use pulsar_sdk::{ProducerMessage, SubscriptionType};

fn exporter() -> (InMemorySpanExporter, SdkTracerProvider) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    (exporter, provider)
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv: &KeyValue| &kv.value)
}

fn attr_str(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

fn finished(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
    exporter.get_finished_spans().unwrap()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The application's request span is the parent of the `send` span, whose context travels
/// in the message's `traceparent` to the consumer; the `process` span is its child, in the
/// same trace, and ends with the ack (status Ok, acknowledgment type "acknowledge").
#[tokio::test]
async fn one_trace_follows_a_message_from_the_request_through_send_to_ack() {
    let broker = MockBroker::start().await.unwrap();
    let (exporter, provider) = exporter();
    let client = test_client(&broker.service_url())
        .tracer(provider.tracer("app"))
        .build()
        .unwrap();
    let topic = full("otel-one-trace");
    let mut consumer = client
        .consumer(&topic)
        .subscription("sub")
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, &topic).await;

    let app = provider.tracer("app");
    let request = app.start("request");
    let request_cx = Context::current_with_span(request);
    let request_sc = request_cx.span().span_context().clone();
    let id = producer
        .send_and_wait(ProducerMessage::new("traced").trace_context(&request_cx))
        .await
        .unwrap();
    request_cx.span().end();

    let m = recv(&mut consumer).await;
    let carried = m.trace_context().span().span_context().clone();
    assert!(carried.is_remote() && carried.is_valid());
    assert_eq!(carried.trace_id(), request_sc.trace_id());
    consumer.ack(&m).unwrap();

    let spans = finished(&exporter);
    let send = named(&spans, &format!("send {topic}"));
    let process = named(&spans, &format!("process {topic}"));
    assert_eq!((send.len(), process.len()), (1, 1), "{spans:#?}");
    let (send, process) = (send[0], process[0]);
    // request -> send -> process, one trace.
    assert_eq!(send.span_context.trace_id(), request_sc.trace_id());
    assert_eq!(send.parent_span_id, request_sc.span_id());
    assert_eq!(process.span_context.trace_id(), request_sc.trace_id());
    assert_eq!(process.parent_span_id, send.span_context.span_id());
    assert!(process.parent_span_is_remote);
    assert_eq!(carried.span_id(), send.span_context.span_id());
    assert_eq!(
        m.properties["traceparent"],
        format!(
            "00-{}-{}-01",
            send.span_context.trace_id(),
            send.span_context.span_id()
        )
    );
    // Kinds, status and attributes (Java's `TracingContext` and the semantic conventions).
    assert_eq!(send.span_kind, SpanKind::Producer);
    assert_eq!(process.span_kind, SpanKind::Consumer);
    assert_eq!(send.status, Status::Ok);
    assert_eq!(process.status, Status::Ok);
    for s in [send, process] {
        assert_eq!(attr_str(s, "messaging.system").as_deref(), Some("pulsar"));
        assert_eq!(
            attr_str(s, "messaging.destination.name").as_deref(),
            Some(topic.as_str())
        );
        assert_eq!(
            attr_str(s, "messaging.message.id").as_deref(),
            Some(id.to_string().as_str())
        );
    }
    assert_eq!(
        attr_str(send, "messaging.operation.name").as_deref(),
        Some("send")
    );
    assert_eq!(
        attr_str(process, "messaging.operation.name").as_deref(),
        Some("process")
    );
    assert_eq!(
        attr_str(process, "messaging.destination.subscription.name").as_deref(),
        Some("sub")
    );
    assert_eq!(
        attr_str(process, "messaging.pulsar.acknowledgment.type").as_deref(),
        Some("acknowledge")
    );
}

/// A nack ends the process span once its redelivery is asked, an ack timeout when it
/// redelivers; both with status Ok (normal flow, as Java's interceptor) and their
/// acknowledgment type.
#[tokio::test(start_paused = true)]
async fn nack_and_ack_timeout_end_the_process_span() {
    let broker = MockBroker::start().await.unwrap();
    let (exporter, provider) = exporter();
    let client = test_client(&broker.service_url())
        .tracer(provider.tracer("app"))
        .build()
        .unwrap();
    let topic = full("otel-nack-timeout");
    let mut consumer = client
        .consumer(&topic)
        .subscription("sub")
        .subscription_type(SubscriptionType::Shared)
        .ack_timeout(Duration::from_secs(5))
        .negative_ack_delay(Duration::from_secs(1))
        .subscribe()
        .await
        .unwrap();
    let producer = unbatched_producer(&client, &topic).await;
    producer.send_and_wait("nacked").await.unwrap();
    producer.send_and_wait("timed-out").await.unwrap();
    let nacked = recv(&mut consumer).await;
    let timed_out = recv(&mut consumer).await;
    consumer.nack(&nacked).unwrap();
    let process_of = |id: pulsar_sdk::MessageId| {
        finished(&exporter).into_iter().find(|s| {
            s.name.starts_with("process ")
                && attr_str(s, "messaging.message.id") == Some(id.to_string())
        })
    };
    assert!(
        process_of(nacked.id).is_none(),
        "not ended at the nack call"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let span = process_of(nacked.id).expect("ended once the redelivery was asked");
    assert_eq!(span.status, Status::Ok);
    assert_eq!(
        attr_str(&span, "messaging.pulsar.acknowledgment.type").as_deref(),
        Some("negative_acknowledge")
    );
    assert!(process_of(timed_out.id).is_none());
    tokio::time::sleep(Duration::from_secs(12)).await;
    let span = process_of(timed_out.id).expect("ended by the ack timeout");
    assert_eq!(span.status, Status::Ok);
    assert_eq!(
        attr_str(&span, "messaging.pulsar.acknowledgment.type").as_deref(),
        Some("ack_timeout")
    );
}

/// With tracing off nothing is recorded and no property is added, even with a global tracer
/// provider installed; `tracing(true)` then uses that global provider. (The only test of this
/// binary that touches the global provider.)
#[tokio::test]
async fn tracing_off_records_nothing_and_on_uses_the_global_provider() {
    let broker = MockBroker::start().await.unwrap();
    let (exporter, provider) = exporter();
    opentelemetry::global::set_tracer_provider(provider.clone());
    let topic = full("otel-off");
    for on in [false, true] {
        let client = test_client(&broker.service_url())
            .tracing(on)
            .build()
            .unwrap();
        let mut consumer = client
            .consumer(&topic)
            .subscription(format!("sub-{on}"))
            .subscribe()
            .await
            .unwrap();
        let producer = unbatched_producer(&client, &topic).await;
        within("send", producer.send_and_wait("m")).await.unwrap();
        let m = recv(&mut consumer).await;
        consumer.ack(&m).unwrap();
        let stored = broker.received_of(Type::Send);
        let props = &stored
            .last()
            .unwrap()
            .payload
            .as_ref()
            .unwrap()
            .0
            .properties;
        let spans = finished(&exporter);
        if on {
            assert!(m.properties.contains_key("traceparent"));
            assert_eq!(props.len(), 1, "{props:?}");
            assert_eq!(spans.len(), 2, "a send and a process span: {spans:#?}");
        } else {
            assert!(m.properties.is_empty(), "{:?}", m.properties);
            assert!(props.is_empty(), "{props:?}");
            assert!(spans.is_empty(), "{spans:#?}");
            assert!(!m.trace_context().span().span_context().is_valid());
        }
    }
}

/// Batched messages on a multi-topic consumer: each message keeps its own send span (with
/// the batch's size) as the parent of its own process span; a cumulative ack ends the process
/// spans of its topic up to it, and only those.
#[tokio::test]
async fn batched_messages_of_a_multi_topic_consumer_each_keep_their_trace() {
    let broker = MockBroker::start().await.unwrap();
    let (exporter, provider) = exporter();
    let client = test_client(&broker.service_url())
        .tracer(provider.tracer("app"))
        .build()
        .unwrap();
    let (a, b) = (full("otel-batched-a"), full("otel-batched-b"));
    let mut consumer = client
        .consumer(&a)
        .topics([a.clone(), b.clone()])
        .subscription("sub")
        .subscribe()
        .await
        .unwrap();
    let batched = client.producer(&a).create().await.unwrap();
    let mut receipts = Vec::new();
    for i in 0..3 {
        receipts.push(batched.send(format!("a{i}")).await.unwrap());
    }
    batched.flush().await.unwrap();
    for r in receipts {
        assert_eq!(r.await.unwrap().batch_size, 3, "one batch of three");
    }
    unbatched_producer(&client, &b)
        .await
        .send_and_wait("b0")
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(recv(&mut consumer).await);
    }
    let last_a = got
        .iter()
        .filter(|m| m.topic.to_string() == a)
        .max_by_key(|m| m.id)
        .unwrap()
        .clone();
    let from_b = got.iter().find(|m| m.topic.to_string() == b).unwrap();
    consumer.ack_cumulative(&last_a).unwrap();
    let spans = finished(&exporter);
    let processed: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("process "))
        .collect();
    assert_eq!(processed.len(), 3, "the three of topic a only: {spans:#?}");
    for m in got.iter().filter(|m| m.topic.to_string() == a) {
        let id = m.id.to_string();
        let process = processed
            .iter()
            .find(|s| attr_str(s, "messaging.message.id") == Some(id.clone()))
            .unwrap();
        let send = spans
            .iter()
            .find(|s| {
                s.name.starts_with("send ")
                    && attr_str(s, "messaging.message.id") == Some(id.clone())
            })
            .unwrap();
        assert_eq!(process.parent_span_id, send.span_context.span_id());
        assert_eq!(
            attr(send, "messaging.batch.message_count"),
            Some(&Value::I64(3))
        );
        assert_eq!(
            attr_str(process, "messaging.pulsar.acknowledgment.type").as_deref(),
            Some("cumulative_acknowledge")
        );
    }
    consumer.ack(from_b).unwrap();
    let spans = finished(&exporter);
    let process_b = spans
        .iter()
        .find(|s| s.name == format!("process {b}"))
        .expect("b's process span, ended by its ack");
    assert_eq!(
        attr_str(process_b, "messaging.pulsar.acknowledgment.type").as_deref(),
        Some("acknowledge")
    );
}

/// A dead-lettered message stays in its trace: the dead-letter copy carries the original
/// context, so its `send` span (the dead-letter producer is traced too) is a child of the
/// original send span, and the copy's `traceparent` names that child.
#[tokio::test]
async fn a_dead_lettered_copy_links_to_the_original_trace() {
    let broker = MockBroker::start().await.unwrap();
    let (exporter, provider) = exporter();
    let client = test_client(&broker.service_url())
        .tracer(provider.tracer("app"))
        .build()
        .unwrap();
    let topic = full("otel-dead-letter");
    let mut consumer = client
        .consumer(&topic)
        .subscription("work")
        .subscription_type(SubscriptionType::Shared)
        .negative_ack_delay(Duration::from_millis(20))
        .dead_letter_policy(pulsar_sdk::DeadLetterPolicy::new(1))
        .subscribe()
        .await
        .unwrap();
    let dlq = consumer.dead_letter_topic().unwrap().to_string();
    let producer = unbatched_producer(&client, &topic).await;
    producer.send_and_wait("poison").await.unwrap();
    within("dead-lettered", async {
        while consumer.stats().totals.dlq_sends < 1 {
            if let Ok(m) = tokio::time::timeout(Duration::from_millis(50), consumer.recv()).await {
                consumer.nack(&m.unwrap()).unwrap();
            }
        }
    })
    .await;
    let spans = finished(&exporter);
    let original = named(&spans, &format!("send {topic}"));
    assert_eq!(original.len(), 1, "{spans:#?}");
    let original = original[0];
    let copy = spans
        .iter()
        .find(|s| s.name == format!("send {dlq}"))
        .unwrap_or_else(|| panic!("the dead-letter send span: {spans:#?}"));
    assert_eq!(
        copy.span_context.trace_id(),
        original.span_context.trace_id()
    );
    assert_eq!(copy.parent_span_id, original.span_context.span_id());
}
