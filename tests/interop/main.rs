//! Interop with the official client (PyPI `pulsar-client`, the C++ core), driven through
//! `official.py`, `schema_official.py` and `table_view_official.py` beside this file: what we
//! produce it reads, and back (the W3C trace context too); its table view and ours agree.

mod encryption;
mod official_client;
mod schema;
mod send_path;
mod table_view;
mod tls;
mod tracing;
