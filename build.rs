//! Compiles the CRI wire contract in `proto/` with a vendored protoc, so the
//! build does not depend on the host's (often too old) protobuf compiler;
//! and `appexec/main.rs` into a static executable the daemon embeds (it runs
//! inside the apps' images, whatever libc they have, if any).

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
    appexec(&out)
}

/// `rustc` on the single file, the standard library only, glibc linked in.
fn appexec(out: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET")?;
    let status = std::process::Command::new(rustc)
        .args(["--edition", "2024", "--crate-name", "appexec", "--target", &target])
        .args(["-C", "target-feature=+crt-static", "-C", "opt-level=2", "-C", "panic=abort", "-C", "strip=symbols"])
        .arg("-o")
        .arg(out.join("appexec"))
        .arg("appexec/main.rs")
        .status()?;
    if !status.success() {
        return Err(format!("compiling appexec/main.rs: {status}").into());
    }
    println!("cargo:rerun-if-changed=appexec");
    Ok(())
}
