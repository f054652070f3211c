//! OpenTelemetry tracing (cargo feature `opentelemetry`), built on the interceptors: a `send`
//! span per message from [`Producer::send`](crate::Producer::send) to its receipt, a `process`
//! span per message from the moment the application takes it to its ack, nack or ack timeout,
//! and the W3C trace context carried in the message's properties (`traceparent`,
//! `tracestate`: the names Java's client and every W3C propagator use), so the consumer's
//! span is a child of the producer's.
//!
//! Span names, kinds and attributes follow Java's `OpenTelemetryProducerInterceptor` /
//! `OpenTelemetryConsumerInterceptor` (`TracingContext`) and the OpenTelemetry messaging
//! semantic conventions: `send {topic}` (Producer) and `process {topic}` (Consumer), with
//! `messaging.system = pulsar`, `messaging.destination.name`, `messaging.operation.name`,
//! `messaging.operation.type`, `messaging.message.id` (once known),
//! `messaging.destination.subscription.name`, `messaging.batch.message_count` (the size of
//! the batch the message travelled in, when it did), `messaging.message.body.size`, and
//! `messaging.pulsar.acknowledgment.type` (`acknowledge`, `cumulative_acknowledge`,
//! `negative_acknowledge`, `ack_timeout`) on the process span. As in Java, a nack and an
//! ack timeout end the process span with status Ok (normal flow, not a failure); a failed
//! send or a refused ack ends its span with status Error.
//!
//! The context is written and read in the W3C format directly, whatever global propagator
//! the application installed (Java asks `GlobalOpenTelemetry`'s propagator, which injects
//! nothing unless one was configured): a trace always crosses the topic.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};

pub(crate) mod source;
pub(crate) use source::Tracing;

use crate::error::Error;
use crate::interceptor::{ConsumerInterceptor, ProducerInterceptor};
use crate::message::{Message, ProducerMessage};
use crate::message_id::MessageId;
use crate::topic::TopicName;

/// The property that carries the W3C `traceparent` header.
pub(crate) const TRACEPARENT: &str = "traceparent";
/// The property that carries the W3C `tracestate` header.
pub(crate) const TRACESTATE: &str = "tracestate";

/// Spans one producer or consumer keeps open at most (sends awaiting their receipt, messages
/// awaiting their ack): past it, a new span is ended at once rather than kept, so an
/// application that never acks cannot grow the table without bound.
const MAX_OPEN_SPANS: usize = 100_000;

impl Tracing {
    /// The tracing interceptor of a new producer.
    pub(crate) fn producer(&self) -> Arc<dyn ProducerInterceptor> {
        Arc::new(SendSpans {
            tracer: self.tracer(),
            open: Mutex::default(),
        })
    }

    /// The tracing interceptor of a new consumer of `subscription`.
    pub(crate) fn consumer(&self, subscription: &str) -> Arc<dyn ConsumerInterceptor> {
        Arc::new(ProcessSpans {
            tracer: self.tracer(),
            subscription: subscription.to_string(),
            open: Mutex::default(),
        })
    }
}

/// The `traceparent` header of `sc`: version 00, trace id, span id, flags.
fn traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// The remote span context that `properties` carry (W3C trace context), if a valid one.
pub(crate) fn extract(properties: &BTreeMap<String, String>) -> Option<SpanContext> {
    let header = properties.get(TRACEPARENT)?.trim();
    let mut parts = header.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    // W3C: version ff is invalid; version 00 has exactly four fields (a later version may
    // add fields, read as far as these four).
    if version.len() != 2
        || version == "ff"
        || (version == "00" && parts.next().is_some())
        || trace.len() != 32
        || span.len() != 16
        || flags.len() != 2
    {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = properties
        .get(TRACESTATE)
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    let sc = SpanContext::new(trace, span, TraceFlags::new(flags & 1), true, state);
    sc.is_valid().then_some(sc)
}

/// Writes `sc` into `properties` as the W3C trace context.
pub(crate) fn inject(sc: &SpanContext, properties: &mut BTreeMap<String, String>) {
    properties.insert(TRACEPARENT.into(), traceparent(sc));
    let state = sc.trace_state().header();
    if state.is_empty() {
        properties.remove(TRACESTATE);
    } else {
        properties.insert(TRACESTATE.into(), state);
    }
}

/// The context to continue a trace from: the remote parent `properties` carry, else
/// `otherwise`.
fn parent_of(
    properties: &BTreeMap<String, String>,
    otherwise: impl FnOnce() -> Context,
) -> Context {
    match extract(properties) {
        Some(sc) => Context::new().with_remote_span_context(sc),
        None => otherwise(),
    }
}

/// Ends `span` with `status`.
fn end(mut span: BoxedSpan, error: Option<&Error>) {
    match error {
        Some(e) => {
            span.record_error(e);
            span.set_status(Status::error(e.to_string()));
        }
        None => span.set_status(Status::Ok),
    }
    span.end();
}

/// The producer side: a `send` span per message.
struct SendSpans {
    tracer: Arc<BoxedTracer>,
    /// Spans awaiting their receipt, by the span id injected into their message.
    open: Mutex<HashMap<SpanId, BoxedSpan>>,
}

impl ProducerInterceptor for SendSpans {
    fn before_send(&self, topic: &TopicName, message: &mut ProducerMessage) {
        // The application's own parent (`ProducerMessage::trace_context` or a `traceparent`
        // it set), else the current context (Java: `Context.current()`).
        let parent = parent_of(&message.properties, Context::current);
        let span = self
            .tracer
            .span_builder(format!("send {topic}"))
            .with_kind(SpanKind::Producer)
            .with_attributes([
                KeyValue::new("messaging.system", "pulsar"),
                KeyValue::new("messaging.destination.name", topic.to_string()),
                KeyValue::new("messaging.operation.name", "send"),
                KeyValue::new("messaging.operation.type", "send"),
                KeyValue::new("messaging.message.body.size", message.payload.len() as i64),
            ])
            .start_with_context(&*self.tracer, &parent);
        let sc = span.span_context().clone();
        if !sc.is_valid() {
            return; // a no-op tracer: nothing to carry
        }
        inject(&sc, &mut message.properties);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() < MAX_OPEN_SPANS {
            open.insert(sc.span_id(), span);
        } else {
            drop(open);
            end(span, None);
        }
    }

    fn on_send_acknowledgement(
        &self,
        _topic: &TopicName,
        message: &ProducerMessage,
        result: Result<&MessageId, &Error>,
    ) {
        let Some(sc) = extract(&message.properties) else {
            return;
        };
        let span = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            open.remove(&sc.span_id())
        };
        let Some(mut span) = span else { return };
        match result {
            Ok(id) => {
                span.set_attribute(KeyValue::new("messaging.message.id", id.to_string()));
                if id.batch_size > 0 {
                    span.set_attribute(KeyValue::new(
                        "messaging.batch.message_count",
                        i64::from(id.batch_size),
                    ));
                }
                end(span, None);
            }
            Err(e) => end(span, Some(e)),
        }
    }
}

/// The consumer side: a `process` span per message taken.
struct ProcessSpans {
    tracer: Arc<BoxedTracer>,
    subscription: String,
    /// Spans awaiting their ack, by topic (a partition's name on a partitioned topic) and
    /// id: a cumulative ack ends every span of its topic up to its id (as Java's interceptor).
    open: Mutex<OpenProcessSpans>,
}

#[derive(Default)]
struct OpenProcessSpans {
    by_topic: HashMap<TopicName, BTreeMap<MessageId, BoxedSpan>>,
    len: usize,
}

impl OpenProcessSpans {
    fn take(&mut self, topic: &TopicName, id: &MessageId) -> Option<BoxedSpan> {
        let spans = self.by_topic.get_mut(topic)?;
        let span = spans.remove(id)?;
        self.len -= 1;
        if spans.is_empty() {
            self.by_topic.remove(topic);
        }
        Some(span)
    }

    fn take_through(&mut self, topic: &TopicName, id: &MessageId) -> Vec<BoxedSpan> {
        let Some(spans) = self.by_topic.get_mut(topic) else {
            return Vec::new();
        };
        let rest = spans.split_off(&MessageId {
            batch_index: id.batch_index.saturating_add(1),
            ..*id
        });
        let through = std::mem::replace(spans, rest);
        self.len -= through.len();
        if spans.is_empty() {
            self.by_topic.remove(topic);
        }
        through.into_values().collect()
    }
}

impl ProcessSpans {
    fn settle(&self, spans: Vec<BoxedSpan>, kind: &'static str, error: Option<&Error>) {
        for mut span in spans {
            span.set_attribute(KeyValue::new("messaging.pulsar.acknowledgment.type", kind));
            end(span, error);
        }
    }

    fn settle_ids(&self, topic: &TopicName, ids: &[MessageId], kind: &'static str) {
        let spans: Vec<BoxedSpan> = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            ids.iter().filter_map(|id| open.take(topic, id)).collect()
        };
        self.settle(spans, kind, None);
    }
}

impl ConsumerInterceptor for ProcessSpans {
    fn before_consume(&self, message: &mut Message) {
        // The producer's span, else the current context (Java: `extractContext` from
        // `Context.current()`).
        let parent = parent_of(&message.properties, Context::current);
        let mut attributes = vec![
            KeyValue::new("messaging.system", "pulsar"),
            KeyValue::new("messaging.destination.name", message.topic.to_string()),
            KeyValue::new(
                "messaging.destination.subscription.name",
                self.subscription.clone(),
            ),
            KeyValue::new("messaging.operation.name", "process"),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.message.id", message.id.to_string()),
            KeyValue::new("messaging.message.body.size", message.payload.len() as i64),
        ];
        if message.id.batch_size > 0 {
            attributes.push(KeyValue::new(
                "messaging.batch.message_count",
                i64::from(message.id.batch_size),
            ));
        }
        let span = self
            .tracer
            .span_builder(format!("process {}", message.topic))
            .with_kind(SpanKind::Consumer)
            .with_attributes(attributes)
            .start_with_context(&*self.tracer, &parent);
        if !span.span_context().is_valid() {
            return;
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len < MAX_OPEN_SPANS {
            let replaced = open
                .by_topic
                .entry(message.topic.clone())
                .or_default()
                .insert(message.id, span);
            match replaced {
                // Handed out again (redelivered) before its ack: the earlier one ends here.
                Some(old) => {
                    drop(open);
                    self.settle(vec![old], "redelivered", None);
                }
                None => open.len += 1,
            }
        } else {
            drop(open);
            end(span, None);
        }
    }

    fn on_acknowledge(&self, topic: &TopicName, id: &MessageId, result: Result<(), &Error>) {
        let span = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            open.take(topic, id)
        };
        self.settle(span.into_iter().collect(), "acknowledge", result.err());
    }

    fn on_acknowledge_cumulative(
        &self,
        topic: &TopicName,
        id: &MessageId,
        result: Result<(), &Error>,
    ) {
        let spans = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            match result {
                Ok(()) => open.take_through(topic, id),
                // A refused cumulative ack acked nothing: only its own message's span ends.
                Err(_) => open.take(topic, id).into_iter().collect(),
            }
        };
        self.settle(spans, "cumulative_acknowledge", result.err());
    }

    fn on_negative_acks_send(&self, topic: &TopicName, ids: &[MessageId]) {
        self.settle_ids(topic, ids, "negative_acknowledge");
    }

    fn on_ack_timeout_send(&self, topic: &TopicName, ids: &[MessageId]) {
        self.settle_ids(topic, ids, "ack_timeout");
    }
}

// The trace-context methods of the message types live here, beside the W3C codec they use,
// so that `message` does not import this module (which imports `message`).
impl ProducerMessage {
    /// The parent of this message's `send` span (cargo feature `opentelemetry`): the span of
    /// `context` (e.g. the request being served), written into the message's properties as
    /// the W3C `traceparent` / `tracestate`. With tracing on, the `send` span is its child
    /// (and replaces it in the properties); with tracing off, the message carries it as
    /// is. Without this, the send span's parent is the current context. A context without
    /// a valid span changes nothing.
    #[cfg(feature = "opentelemetry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
    pub fn trace_context(mut self, context: &opentelemetry::Context) -> Self {
        use opentelemetry::trace::TraceContextExt;
        let span = context.span();
        let sc = span.span_context();
        if sc.is_valid() {
            inject(sc, &mut self.properties);
        }
        self
    }
}

impl Message {
    /// The trace context the producer sent with this message (cargo feature `opentelemetry`):
    /// a [`Context`] whose remote span is the producer's `send` span,
    /// read from the W3C `traceparent` / `tracestate` properties; an empty context if the
    /// message carries none (or a malformed one). Start the spans of your own work on the
    /// message from it to continue the trace. Without the feature the same two headers are
    /// in [`properties`](Self::properties), for any propagator.
    #[cfg(feature = "opentelemetry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
    pub fn trace_context(&self) -> opentelemetry::Context {
        use opentelemetry::trace::TraceContextExt;
        match extract(&self.properties) {
            Some(sc) => opentelemetry::Context::new().with_remote_span_context(sc),
            None => opentelemetry::Context::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_w3c_context_round_trips_and_bad_headers_are_ignored() {
        let sc = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_str("vendor=x").unwrap(),
        );
        let mut props = BTreeMap::new();
        inject(&sc, &mut props);
        assert_eq!(
            props[TRACEPARENT],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(props[TRACESTATE], "vendor=x");
        assert_eq!(extract(&props), Some(sc));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-xyz-00f067aa0ba902b7-01",
        ] {
            props.insert(TRACEPARENT.into(), bad.into());
            assert_eq!(extract(&props), None, "{bad}");
        }
    }
}
