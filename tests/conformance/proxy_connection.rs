//! Upstream `ProxyConnection`: the behaviours the ledger (`docs/conformance.md`) records for it.
