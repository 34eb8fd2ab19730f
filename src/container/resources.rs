//! UpdateContainerResources: an app's limits changed while it runs, on its
//! cgroups (and on cgroup v2 hosts its unit's properties), undone when the
//! kernel refuses one; recorded in the pod manifest.

use super::{ContainerError, Target, app_cgroup, meta, open, unit, with_unit_bus};
use crate::cgroup::app::{Limits, LimitsWriter};
use crate::runtime::Runtime;
use crate::stage1::app::{self, AppPaths, AppState};
use crate::stage1::unit_spec::limits as systemd_limits;

/// Updates the limits of running container `id`: the values of `update`
/// replace those in force, the others stay (`None`: the request had no
/// Linux resources, refused once the container is found).
pub(crate) fn update(rt: &Runtime, id: &str, update: Option<Limits>) -> Result<(), ContainerError> {
    let t = open(rt, id)?;
    let update = update.ok_or_else(|| ContainerError::InvalidArgument("linux resources are required".into()))?;
    if !t.running || app::facts(&AppPaths::new(&t.pod, &t.app.name), true).state == AppState::Created {
        return Err(ContainerError::FailedPrecondition(format!("container {id} is not running")));
    }
    // what is not given stays as it was: the merged limits are applied and recorded
    update.validate().map_err(ContainerError::InvalidArgument)?;
    let old = meta::limits(&t.app);
    let limits = merged_limits(&old, &update);
    // on cgroup v2 the pod's systemd is told first (it rewrites the memory
    // and cpu files of a unit whose properties change), then the host
    // writes every file, those systemd does not know included
    let through_systemd = crate::cgroup::Layout::cached().is_ok_and(|l| l.limits_through_systemd());
    let set_unit =
        |l: &Limits| with_unit_bus(rt, &t.pod, |bus| bus.set_unit_properties(&unit(&t.app.name), systemd_limits(l)));
    let cgroup = app_cgroup(&t.pod, &t.app.name);
    let cgroup: &dyn LimitsWriter = match &cgroup {
        Some(cg) => cg,
        None => &NoCgroup,
    };
    // (no exec puts the app back in its cgroups meanwhile, with the limits it read before)
    let _held = crate::cgroup::writes();
    change_limits(through_systemd.then_some(&set_unit), cgroup, id, &old, &limits)?;
    Ok(store_limits(&t, &limits)?)
}

/// Writes the limits and moves the app's processes under them.
pub(super) fn apply_limits(t: &Target, limits: &Limits) -> std::io::Result<()> {
    let Some(cg) = app_cgroup(&t.pod, &t.app.name) else { return Ok(()) };
    cg.write_limits(limits)
}

/// A pod without cgroups: nothing to write.
struct NoCgroup;

impl LimitsWriter for NoCgroup {
    fn write_limits(&self, _: &Limits) -> std::io::Result<()> {
        Ok(())
    }
}

/// Tells the pod's systemd an app unit's limits (over `stage1::bus::UnitBus`).
pub(super) type SetUnit<'a> = &'a dyn Fn(&Limits) -> Result<(), ContainerError>;

/// Changes container `id`'s limits from `old` to `limits`: the unit's
/// properties first (`set_unit`, on cgroup v2 hosts), then the cgroup files
/// (`cgroup`). Nothing half-applied: when the kernel refuses a limit (v1
/// memory below usage: EBUSY) after others were written, the unit's and the
/// cgroup's old limits are put back, in that order, and the refusal is the error.
pub(super) fn change_limits(
    set_unit: Option<SetUnit<'_>>,
    cgroup: &dyn LimitsWriter,
    id: &str,
    old: &Limits,
    limits: &Limits,
) -> Result<(), ContainerError> {
    if let Some(set_unit) = set_unit {
        set_unit(limits)?;
    }
    if let Err(e) = cgroup.write_limits(limits) {
        if let Some(set_unit) = set_unit
            && let Err(e) = set_unit(old)
        {
            tracing::warn!(container = %id, error = %e, "restoring the unit's limits");
        }
        if let Err(e) = cgroup.write_limits(old) {
            tracing::warn!(container = %id, error = %e, "restoring the app's limits");
        }
        return Err(ContainerError::io(format!("limits of {id}"))(e));
    }
    Ok(())
}

/// An update over the limits in force: the values given replace those, the
/// others stay (the OOM score is the one the app started with).
fn merged_limits(current: &Limits, update: &Limits) -> Limits {
    Limits {
        memory_bytes: update.memory_bytes.or(current.memory_bytes),
        cpu_shares: update.cpu_shares.or(current.cpu_shares),
        cpu_quota_us: update.cpu_quota_us.or(current.cpu_quota_us),
        cpu_period_us: update.cpu_period_us.or(current.cpu_period_us),
        pids: update.pids.or(current.pids),
        memory_swap_bytes: update.memory_swap_bytes.or(current.memory_swap_bytes),
        cpuset_cpus: update.cpuset_cpus.clone().or_else(|| current.cpuset_cpus.clone()),
        cpuset_mems: update.cpuset_mems.clone().or_else(|| current.cpuset_mems.clone()),
        hugepages: current.hugepages.clone().into_iter().chain(update.hugepages.clone()).collect(),
        unified: current.unified.clone().into_iter().chain(update.unified.clone()).collect(),
        oom_score_adj: current.oom_score_adj,
    }
}

/// Records the limits in force in the pod manifest (what ContainerStatus reports).
fn store_limits(t: &Target, limits: &Limits) -> Result<(), rkt::pod::PodError> {
    let _lock = t.pod.lock_manifest()?;
    let mut manifest = t.pod.read_manifest()?;
    let Some(section) = manifest.apps.iter_mut().find(|a| a.name == t.app.name).and_then(|a| a.app.as_mut()) else {
        return Ok(());
    };
    let json =
        serde_json::to_string(limits).map_err(|source| rkt::pod::PodError::Manifest { uuid: t.pod.uuid(), source })?;
    section.user_annotations.insert(meta::RESOURCES.into(), json);
    t.pod.write_manifest(&manifest).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage1::bus::testing::{Call, FakeBus};
    use crate::stage1::bus::{BusError, UnitBus};

    /// Cgroup files that record the limits written and refuse those with a memory limit of `refuse`.
    #[derive(Default)]
    struct FakeCgroup {
        written: std::sync::Mutex<Vec<Option<i64>>>,
        refuse: Option<i64>,
    }

    impl LimitsWriter for FakeCgroup {
        fn write_limits(&self, l: &Limits) -> std::io::Result<()> {
            self.written.lock().unwrap().push(l.memory_bytes);
            if l.memory_bytes.is_some() && l.memory_bytes == self.refuse {
                return Err(std::io::Error::from_raw_os_error(libc::EBUSY));
            }
            Ok(())
        }
    }

    fn memory(m: i64) -> Limits {
        Limits { memory_bytes: Some(m), ..Default::default() }
    }

    #[test]
    fn the_unit_is_told_before_the_cgroup_is_written() {
        let bus = FakeBus::default();
        let set_unit = |l: &Limits| Ok(bus.set_unit_properties("a.service", systemd_limits(l))?);
        let cg = FakeCgroup::default();
        // growing and shrinking take the same order: systemd, then the files
        for (old, new) in [(64 << 20, 128 << 20), (128 << 20, 64 << 20)] {
            change_limits(Some(&set_unit), &cg, "p:a", &memory(old), &memory(new)).expect("changed");
        }
        assert_eq!(
            bus.calls(),
            [
                Call::SetProperties("a.service".into(), vec![format!("MemoryMax=U64({})", 128 << 20)]),
                Call::SetProperties("a.service".into(), vec![format!("MemoryMax=U64({})", 64 << 20)]),
            ]
        );
        assert_eq!(*cg.written.lock().unwrap(), [Some(128 << 20), Some(64 << 20)]);
        // cgroup v1: the files only
        let cg = FakeCgroup::default();
        change_limits(None, &cg, "p:a", &memory(1 << 20), &memory(2 << 20)).expect("changed");
        assert_eq!(*cg.written.lock().unwrap(), [Some(2 << 20)]);
    }

    #[test]
    fn a_refused_write_puts_the_old_limits_back() {
        let bus = FakeBus::default();
        let set_unit = |l: &Limits| Ok(bus.set_unit_properties("a.service", systemd_limits(l))?);
        // memory below usage: v1 refuses the shrink with EBUSY
        let cg = FakeCgroup { refuse: Some(1 << 20), ..Default::default() };
        let e = change_limits(Some(&set_unit), &cg, "p:a", &memory(64 << 20), &memory(1 << 20)).unwrap_err();
        assert_eq!(e.kind(), crate::container::ErrorKind::Internal);
        assert!(e.to_string().starts_with("limits of p:a: "), "{e}");
        assert_eq!(
            bus.calls(),
            [
                Call::SetProperties("a.service".into(), vec![format!("MemoryMax=U64({})", 1 << 20)]),
                Call::SetProperties("a.service".into(), vec![format!("MemoryMax=U64({})", 64 << 20)]),
            ]
        );
        assert_eq!(*cg.written.lock().unwrap(), [Some(1 << 20), Some(64 << 20)]);
    }

    #[test]
    fn a_unit_that_refuses_leaves_the_cgroup_alone() {
        let bus = FakeBus::default();
        bus.fail_set(BusError::NoSuchUnit("a.service".into()));
        let set_unit = |l: &Limits| Ok(bus.set_unit_properties("a.service", systemd_limits(l))?);
        let cg = FakeCgroup::default();
        let e = change_limits(Some(&set_unit), &cg, "p:a", &memory(64 << 20), &memory(128 << 20)).unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert!(cg.written.lock().unwrap().is_empty());
    }

    #[test]
    fn an_update_keeps_what_it_does_not_name() {
        let current = Limits {
            memory_bytes: Some(64 << 20),
            cpu_shares: Some(512),
            pids: Some(10),
            oom_score_adj: Some(500),
            ..Default::default()
        };
        let update = Limits { memory_bytes: Some(128 << 20), cpu_quota_us: Some(25_000), ..Default::default() };
        let merged = merged_limits(&current, &update);
        assert_eq!(
            merged,
            Limits {
                memory_bytes: Some(128 << 20),
                cpu_shares: Some(512),
                cpu_quota_us: Some(25_000),
                cpu_period_us: None,
                pids: Some(10),
                oom_score_adj: Some(500),
                ..Default::default()
            }
        );
    }
}
