#![no_main]
//! See `pulsar_sdk::fuzzing::target_avro_schema` for the input layout; the regression corpus is in
//! `fuzz/corpus/avro_schema/` and replayed on stable by `tests/fuzz_smoke.rs`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pulsar_sdk::fuzzing::target_avro_schema(data);
});
