//! Where the client's tracer comes from: what the client and its core keep (a leaf: the
//! spans that use it are the parent module's, above the layers that hold this).

use std::fmt;
use std::sync::Arc;

use opentelemetry::global::BoxedTracer;

/// The instrumentation scope's name.
const SCOPE: &str = "pulsar-sdk";

/// Where the client's tracer comes from.
#[derive(Clone)]
pub(crate) enum Tracing {
    /// The global tracer provider's, asked for as each producer or consumer is created.
    Global,
    /// The tracer given to [`ClientBuilder::tracer`](crate::ClientBuilder::tracer).
    Given(Arc<BoxedTracer>),
}

impl fmt::Debug for Tracing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tracing::Global => "Tracing(global)",
            Tracing::Given(_) => "Tracing(given)",
        })
    }
}

impl Tracing {
    /// The tracer of a new producer or consumer.
    pub(crate) fn tracer(&self) -> Arc<BoxedTracer> {
        match self {
            Tracing::Global => Arc::new(opentelemetry::global::tracer(SCOPE)),
            Tracing::Given(t) => t.clone(),
        }
    }
}
