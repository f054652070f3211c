#![no_main]
//! See `pulsar_sdk::fuzzing::target_decompress` for the input layout; the regression corpus is in
//! `fuzz/corpus/decompress/` and replayed on stable by `tests/fuzz_smoke.rs`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pulsar_sdk::fuzzing::target_decompress(data);
});
