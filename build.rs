//! Compiles `proto/PulsarApi.proto` with a pure-Rust protobuf compiler (protox), so building the
//! crate needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/PulsarApi.proto");
    let descriptors = protox::compile(["PulsarApi.proto"], ["proto"])?;
    prost_build::Config::new()
        .bytes(["."])
        .compile_fds(descriptors)?;
    Ok(())
}
