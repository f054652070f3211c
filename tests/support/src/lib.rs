//! Helpers shared by pulsar-sdk's test binaries (`tests/protocol`, `tests/hostile`,
//! `tests/real_broker`, `tests/interop`, `tests/metrics`, `tests/conformance`): a dev-dependency
//! of the crate, used as `support::...` (and, for the mock tier's helpers, under their old name
//! with `use support as common;`).
//!
//! * [`mock`] (re-exported at the root): a test client, waits with patience, topics, publishing
//!   helpers — for tests against the mock broker.
//! * [`chunks`]: hand-made chunk entries and chunking producers (PIP-37).
//! * [`certs`]: a CA and certificates generated at run time.
//! * [`broker`] (re-exported at the root): pulsar-lite, the real test broker, shared per process
//!   or private; fresh names; the official Python client ([`official`]).
//! * [`stunnel`]: a TLS terminator in front of pulsar-lite.
//! * [`examples`]: runs the crate's example binaries.

pub mod broker;
pub mod certs;
pub mod chunks;
pub mod examples;
pub mod mock;
pub mod stunnel;

pub use broker::*;
pub use mock::*;

/// The cargo target directory's `tmp/` (what `CARGO_TARGET_TMPDIR` names for an integration
/// test; cargo sets that variable only when it compiles a test or bench target, not this
/// library, so it is found from the running test binary: `<target>/<profile>/deps/<test>`).
pub fn target_tmp_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("a test binary lives in <target>/<profile>/deps/");
    let tmp = target.join("tmp");
    std::fs::create_dir_all(&tmp).expect("create <target>/tmp");
    tmp
}
