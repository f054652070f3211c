//! Interop with the official client (PyPI `pulsar-client`, the C++ core), driven through
//! `official.py` and `schema_official.py` beside this file: what we produce it reads, and back
//! (the W3C trace context too).

mod encryption;
mod official_client;
mod schema;
mod send_path;
mod tls;
mod tracing;
