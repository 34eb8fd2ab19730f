//! Compiles the CRI wire contract in `proto/` with a vendored protoc, so the
//! build does not depend on the host's (often too old) protobuf compiler;
//! and the workspace's `appexec` and `logwriter` crates into static
//! executables the daemon embeds (appexec runs inside the apps' images,
//! whatever libc they have, if any; the log writer is what every pod keeps
//! resident, so it is small).

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

/// The `appexec` and `logwriter` programs of this workspace, built by a cargo of its own: its
/// own target directory under OUT_DIR (the outer build holds the lock of
/// its own), for the target being built, with the `appexec` profile (the
/// workspace's Cargo.toml: opt-level 2, panic=abort, stripped) and glibc
/// linked in (`+crt-static`); offline, from the workspace's Cargo.lock.
fn appexec(out: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = std::env::var("TARGET")?;
    let manifest_dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let target_dir = out.join("appexec-build");
    let status = std::process::Command::new(cargo)
        .args(["build", "--package", "appexec", "--package", "logwriter", "--bins", "--profile", "appexec"])
        .args(["--offline", "--locked", "--quiet"])
        .arg("--manifest-path")
        .arg(manifest_dir.join("Cargo.toml"))
        .args(["--target", &target])
        .arg("--target-dir")
        .arg(&target_dir)
        // its own flags, not the outer build's (a fuzzer's instrumentation,
        // a developer's RUSTFLAGS); --target keeps them off build scripts
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
        // `cargo clippy` lints the workspace through this: not the nested build
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .status()?;
    if !status.success() {
        return Err(format!("building appexec and logwriter: {status}").into());
    }
    for program in ["appexec", "logwriter"] {
        std::fs::copy(target_dir.join(&target).join("appexec").join(program), out.join(program))?;
    }
    // the log writer's copy in a data dir is named by its content, known
    // here so that no pod start hashes it (`stage1::logwriter`)
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&std::fs::read(out.join("logwriter"))?, &mut hasher);
    println!("cargo:rustc-env=RKTLET_LOGWRITER_NAME=logwriter-{:016x}", std::hash::Hasher::finish(&hasher));
    for input in ["appexec", "logwriter", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={input}");
    }
    Ok(())
}
