//! Upstream `PartitionedProducerImpl`: the behaviours the ledger (`docs/conformance.md`) records for it.

#[allow(unused_imports)]
use crate::common;
