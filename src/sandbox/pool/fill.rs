//! The pool's upkeep, which needs the daemon's runtime: the refill task,
//! the drain at shutdown, discarding a pod, and re-adopting a previous
//! daemon's pods (the pool's state, `crate::pool`, knows nothing of the runtime).

use super::boot;
use crate::pool::{Member, POOL_ANNOTATION, POOL_PARENT, TAKING_FILE};
use crate::runtime::Runtime;
use rkt::pod::{Pod, PodDir, PodState};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use uuid::Uuid;

/// After a take, the refill waits this long, so a burst of requests is
/// served (from the pool or cold) before a background boot competes.
const REFILL_PAUSE: Duration = Duration::from_millis(50);
/// First and longest wait after a failed pool boot.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// The refill task: first re-adopts (or discards) the pool pods a previous
/// daemon left, then keeps the pool full until [`drain`] closes it.
pub(crate) async fn refill(rt: Arc<Runtime>) {
    if let Some(why) = &rt.pool.disabled {
        tracing::warn!(size = rt.config.pod_pool_size, reason = %why, "pod pool disabled");
    }
    if let Err(e) = readopt(&rt).await {
        tracing::warn!(error = %e, "cannot look for pool pods of a previous run");
    }
    let pool = &rt.pool;
    if !pool.enabled() {
        return;
    }
    let mut retry = RETRY_MIN;
    loop {
        match pool.reserve_boot() {
            None => return,
            Some(false) => {
                pool.wake.notified().await;
                tokio::time::sleep(REFILL_PAUSE).await;
                continue;
            }
            Some(true) => {}
        }
        let started = std::time::Instant::now();
        let booted = boot::boot_member(&rt).await;
        let member = match booted {
            Ok((member, cpu_micros)) => {
                let c = &pool.counters;
                c.boots.fetch_add(1, Ordering::Relaxed);
                c.boot_micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                c.boot_cpu_micros.fetch_add(cpu_micros, Ordering::Relaxed);
                retry = RETRY_MIN;
                tracing::debug!(pod = %member.uuid, ms = started.elapsed().as_millis(), "pool pod ready");
                Some(member)
            }
            Err(e) => {
                pool.counters.boot_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, retry_in = ?retry, "pool pod failed to boot");
                None
            }
        };
        let failed = member.is_none();
        if let Some(extra) = pool.boot_done(member) {
            discard(&rt, extra.uuid).await;
        }
        if failed {
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(RETRY_MAX);
        }
    }
}

/// Closes the pool, waits for the refill task, and removes every pool pod.
pub(crate) async fn drain(rt: &Runtime, refill: tokio::task::JoinHandle<()>) {
    let members = rt.pool.close();
    let _ = refill.await;
    let members: Vec<Member> = members.into_iter().chain(rt.pool.close()).collect();
    if members.is_empty() {
        return;
    }
    tracing::info!(pods = members.len(), "draining the pod pool");
    futures::future::join_all(members.iter().map(|m| discard(rt, m.uuid))).await;
    // the pool's parent cgroups go too, unless another daemon's pool pods are in them
    if let Ok(layout) = crate::cgroup::Layout::cached() {
        for dir in crate::cgroup::pod::PodCgroup::new(layout, POOL_PARENT).dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Stops and removes a pool pod with its network namespace (and the pool's
/// controller cgroups, left behind by a take that failed while moving it).
pub(crate) async fn discard(rt: &Runtime, uuid: Uuid) {
    let id = uuid.to_string();
    if let Err(e) = crate::stage1::teardown::remove_pod(
        &rt.data,
        &id,
        Duration::from_secs(5),
        &rt.net_dirs(),
        crate::stage1::teardown::Deletion::Later,
    )
    .await
        && !matches!(e.pod_error(), Ok(rkt::pod::PodError::NotFound(_)))
    {
        tracing::warn!(pod = %uuid, "cannot remove pool pod");
    }
    if let (Ok(layout), Ok(sub)) =
        (crate::cgroup::Layout::cached(), crate::cgroup::pod::subcgroup(POOL_PARENT, &id, false))
    {
        let _ = crate::cgroup::pod::PodCgroup::controllers(layout, &sub).remove();
    }
}

/// After a restart: pool pods that are alive, were booted by this build and
/// fit the configured size join the pool; every other one is removed.
async fn readopt(rt: &Runtime) -> Result<(), rkt::pod::PodError> {
    let wanted = boot::fingerprint(rt);
    let mut stale = Vec::new();
    for (uuid, dir) in rt.data.list_pods()? {
        if dir != PodDir::Run {
            continue;
        }
        let mut pod = Pod::at(&rt.data, uuid, dir);
        let Ok(manifest) = pod.read_manifest() else { continue };
        let Some(booted_by) = manifest.annotation(POOL_ANNOTATION) else { continue };
        let alive = pod.state().ok() == Some(PodState::Running) && pod.is_ready();
        let netns = pod.read_file(rkt::pod::NETNS_FILE).ok().flatten().map(PathBuf::from);
        let half_taken = pod.path().join(TAKING_FILE).exists();
        let keep = alive && booted_by == wanted && rt.pool.enabled() && !half_taken;
        let adopted = match netns {
            Some(netns) if keep => {
                // a daemon killed mid-boot may not have moved it into its controller cgroups
                let moved = tokio::task::spawn_blocking(move || {
                    crate::cgroup::pod::adopt_controllers(POOL_PARENT, uuid, false)
                })
                .await;
                matches!(moved, Ok(Ok(()))) && rt.pool.boot_reserved_or_full(Member { uuid, netns }).is_none()
            }
            _ => false,
        };
        if adopted {
            tracing::info!(pod = %uuid, "pool pod of a previous run adopted");
        } else {
            stale.push(uuid);
        }
    }
    for uuid in stale {
        tracing::info!(pod = %uuid, "removing a pool pod of a previous run");
        discard(rt, uuid).await;
    }
    Ok(())
}
