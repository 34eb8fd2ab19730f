//! Booting pool pods: an ordinary pod boot (`stage1::boot`) with a pre-made
//! network namespace, no CNI identity, the pool's cgroup parent, a low
//! priority and the pool annotation. The network's identity-free plugins
//! (bridge with host-local: the slow part, two Go execs and iptables for
//! masquerading) run while the pod boots, with the pod's uuid as the
//! container id it keeps; a take runs the rest (`sandbox::pool`).
//!
//! Runs in: the daemon (the refill task).

use crate::net::pod as podnet;
use crate::pool::{self, Member, adapt};
use crate::runtime::Runtime;
use crate::stage1::boot::BootError;
use crate::stage1::sandbox::SandboxArgs;
use rkt::schema::PodManifest;
use uuid::Uuid;

/// Boots one pool pod: pre-made netns, no CNI, pool cgroup parent, low
/// priority, marked with the pool annotation. Returns it with the CPU time
/// its boot used (µs).
pub(crate) async fn boot_member(rt: &Runtime) -> Result<(Member, u64), BootError> {
    let uuid = Uuid::new_v4();
    let mut manifest = PodManifest::mutable();
    manifest.set_annotation(pool::POOL_ANNOTATION, fingerprint(rt));
    // see stage1::boot::interrupted_starts
    let manifest_file = crate::stage1::boot::start_manifest(&rt.data, uuid);
    let bytes = serde_json::to_vec(&manifest).map_err(|e| BootError::failed(uuid, "encoding manifest", e))?;
    rkt::fs::write_volatile(&manifest_file, &bytes, 0o600)
        .map_err(|e| BootError::failed(uuid, "writing manifest", e))?;
    let booted = async {
        let netns = podnet::create_netns(uuid).map_err(|e| BootError::failed(uuid, "creating network namespace", e))?;
        let args = SandboxArgs {
            uuid: Some(uuid),
            pod_manifest: Some(manifest_file.clone()),
            net: "default".into(),
            netns: Some(netns.path().to_path_buf()),
            cgroup_parent: Some(pool::POOL_PARENT.into()),
            nice: Some(pool::POOL_NICE),
            ..Default::default()
        };
        let netns = netns.path().to_path_buf();
        let boot = async {
            let program =
                rt.sandbox_program().map_err(|e| BootError::failed(uuid, "locating the sandbox program", e))?;
            crate::stage1::boot::boot(&rt.data, &program, rt.supervisor(), uuid, args, None, None).await
        };
        let (booted, ()) = tokio::join!(boot, prewire(rt, uuid, &netns));
        booted?;
        Ok::<_, BootError>(netns)
    }
    .await;
    let _ = std::fs::remove_file(&manifest_file);
    match booted {
        Ok(netns) => {
            let cpu = pool::subcgroup(uuid)
                .ok()
                .zip(crate::cgroup::Layout::cached().ok())
                .and_then(|(sub, layout)| adapt::cpu_micros(layout, &sub))
                .unwrap_or(0);
            Ok((Member { uuid, netns }, cpu))
        }
        Err(e) => {
            // what the boot made goes: processes, cgroups, mounts, the netns, the directory
            if let Err(e) = crate::stage1::teardown::abort_start(&rt.data, uuid, &rt.net_dirs()).await {
                tracing::error!(pod = %uuid, error = %e, "cleanup after a failed start");
            }
            Err(e)
        }
    }
}

/// Runs the identity-free head of the pod network's plugin chain (e.g.
/// bridge + host-local, not portmap) while the pool pod boots, so a take
/// only runs the rest with the pod's identity and port mappings. Without a
/// network config yet, or with nothing identity-free, the take runs all.
async fn prewire(rt: &Runtime, uuid: Uuid, netns: &std::path::Path) {
    let Ok(net) = crate::net::cni::Network::load_default(&rt.config.cni_conf_dir, &rt.config.cni_bin_dirs) else {
        return;
    };
    let n = net.identity_free_prefix();
    if n == 0 {
        return;
    }
    if let Err(e) = net.add_prefix(&podnet::request(&rt.data, uuid, netns), n).await {
        tracing::warn!(pod = %uuid, error = %e, "cannot wire the pool pod's network ahead; its take will");
    }
}

/// What a pool pod must have been booted with to be usable by this daemon:
/// the program that built its stage1 and its version.
pub(crate) fn fingerprint(rt: &Runtime) -> String {
    let program = rt.sandbox_program().map(|p| p.display().to_string()).unwrap_or_default();
    format!("{}@{program}", env!("CARGO_PKG_VERSION"))
}
