//! # Observing messages: interceptors and tracing
//!
//! ## Interceptors
//!
//! An interceptor is code of yours that runs at fixed points of every message's life, as the
//! Java client's `ProducerInterceptor` and `ConsumerInterceptor`: to stamp a header on every
//! message, audit what was consumed, or count outcomes. Implement the hooks you need (each
//! has an empty default body) and add the interceptor to the builder; several run in the
//! order they were added. [`crate::interceptor`] lists each hook and when it runs.
//!
//! ```
//! use pulsar_sdk::interceptor::{ConsumerInterceptor, ProducerInterceptor};
//! use pulsar_sdk::{Message, MessageId, ProducerMessage, TopicName};
//!
//! /// Stamps every message with the sending service, and logs what the consumer acked.
//! struct Audit;
//!
//! impl ProducerInterceptor for Audit {
//!     fn before_send(&self, _topic: &TopicName, message: &mut ProducerMessage) {
//!         message.properties.insert("sent-by".into(), "billing".into());
//!     }
//! }
//!
//! impl ConsumerInterceptor for Audit {
//!     fn before_consume(&self, message: &mut Message) {
//!         println!("took {} from {}", message.id, message.topic);
//!     }
//!     fn on_acknowledge(
//!         &self,
//!         topic: &TopicName,
//!         id: &MessageId,
//!         result: Result<(), &pulsar_sdk::Error>,
//!     ) {
//!         println!("acked {id} of {topic}: {}", result.is_ok());
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let broker = pulsar_sdk::mock::MockBroker::start().await?;
//! # let client = pulsar_sdk::Client::builder().service_url(broker.service_url()).build()?;
//! let mut consumer = client
//!     .consumer("orders")
//!     .subscription("audit")
//!     .interceptor(Audit)
//!     .subscribe()
//!     .await?;
//! let producer = client.producer("orders").interceptor(Audit).create().await?;
//! producer.send_and_wait("order-1").await?;
//! let msg = consumer.recv().await?;
//! assert_eq!(msg.properties["sent-by"], "billing");
//! consumer.ack(&msg)?;
//! # Ok(()) }
//! ```
//!
//! Hooks run on the caller's task (`before_send`, `before_consume`, the ack hooks) or on the
//! producer's or consumer's task (`on_send_acknowledgement`, the nack and ack-timeout hooks):
//! keep them short and never block in them. A hook that panics is caught: the message goes
//! on, the panic is counted in `stats().interceptor_panics` and logged once per interceptor.
//! A producer or consumer without interceptors pays one `Option` check per message.
//!
//! ## OpenTelemetry tracing
//!
//! With the cargo feature `opentelemetry` (on the `opentelemetry` API crate only: you choose
//! the SDK and exporter), turn tracing on for a client with `ClientBuilder::tracing(true)`
//! (the global tracer provider) or `ClientBuilder::tracer(tracer)` (your own). Every producer
//! and consumer of that client then records:
//!
//! - a **`send {topic}`** span (kind Producer) from `send` until the broker's receipt (status
//!   Error if the send failed), with `messaging.system = pulsar`,
//!   `messaging.destination.name`, `messaging.operation.name = send`, and the message id
//!   (`messaging.message.id`) and batch size (`messaging.batch.message_count`) once known;
//! - a **`process {topic}`** span (kind Consumer) from the moment the application takes the
//!   message until it acks it, its negative ack is redelivered, or its ack timeout expires,
//!   with `messaging.destination.subscription.name`, `messaging.message.id` and
//!   `messaging.pulsar.acknowledgment.type` (`acknowledge`, `cumulative_acknowledge`,
//!   `negative_acknowledge`, `ack_timeout`). As in the Java client, a nack or an ack timeout
//!   ends it with status Ok: redelivery is normal flow. A refused ack ends it with Error.
//!
//! The send span's context travels in the message's properties as the W3C `traceparent` and
//! `tracestate` (the names the Java client uses), so the process span is a child of the send
//! span, in the same trace, even across clients in other languages. The send span's parent is
//! the current context, or the one you pass with `ProducerMessage::trace_context(&cx)` (e.g.
//! the request being served); on the consumer, `Message::trace_context()` returns the
//! producer's context to start your own spans from. Readers are not traced (as in Java).
//!
//! ```
//! use opentelemetry::trace::{Tracer, TracerProvider};
//! use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let broker = pulsar_sdk::mock::MockBroker::start().await?;
//! // Any exporter: stdout, OTLP ...; in memory here.
//! let exporter = InMemorySpanExporter::default();
//! let provider = SdkTracerProvider::builder()
//!     .with_simple_exporter(exporter.clone())
//!     .build();
//! let client = pulsar_sdk::Client::builder()
//!     .service_url(broker.service_url())
//!     .tracer(provider.tracer("my-service"))
//!     .build()?;
//! let mut consumer = client.consumer("orders").subscription("s").subscribe().await?;
//! let producer = client.producer("orders").create().await?;
//! producer.send_and_wait("order-1").await?;
//!
//! // Continue the producer's trace in your own work, then ack (ends the process span).
//! let msg = consumer.recv().await?;
//! let tracer = provider.tracer("my-service");
//! let mut work = tracer.start_with_context("handle order", &msg.trace_context());
//! opentelemetry::trace::Span::end(&mut work);
//! consumer.ack(&msg)?;
//!
//! let spans = exporter.get_finished_spans()?;
//! let names: Vec<_> = spans.iter().map(|s| s.name.to_string()).collect();
//! assert!(names.contains(&"send persistent://public/default/orders".to_string()));
//! assert!(names.contains(&"process persistent://public/default/orders".to_string()));
//! # Ok(()) }
//! ```
//!
//! See `examples/tracing.rs` for a whole program.
//!
//! Without the feature nothing is traced and no property is added; a `traceparent` that
//! another client sent is still in [`Message::properties`](crate::Message::properties), for
//! any propagator you use. Tracing off (the default) adds nothing to messages either.
//!
//! ## Statistics
//!
//! [`Producer::stats`](crate::Producer::stats) and [`Consumer::stats`](crate::Consumer::stats)
//! return counters (see [`crate::stats`]); the `metrics` feature records upstream's metrics
//! through the `metrics` facade (see the [crate root](crate)).
