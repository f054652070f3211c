//! Operator metrics (feature `metrics`, upstream PIP-342 names) seen by the application's
//! recorder. The `metrics` facade has one global recorder per process, so these tests have a
//! binary of their own and share one recorder (`pip342::recorder`); each test keeps to its
//! own namespace (or topic labels) so that tests running beside it do not move its series.

mod observability;
mod pip342;
