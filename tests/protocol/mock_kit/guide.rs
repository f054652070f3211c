//! The mock kit guide's example, run as a test: the code lives in `src/mock/guide_example.rs`
//! so that `pulsar_sdk::mock::guide` can show it (and the published crate contains it).

include!("../../../src/mock/guide_example.rs");
