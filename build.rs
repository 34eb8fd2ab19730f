//! Compiles the CRI wire contract in `proto/` with a vendored protoc, so the
//! build does not depend on the host's (often too old) protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().file_descriptor_set_path(out.join("cri_descriptor.bin")).compile_with_config(
        config,
        &["proto/runtime/v1/api.proto"],
        &["proto"],
    )?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
