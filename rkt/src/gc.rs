//! gc's rules, as rkt's `gc` and `image gc` apply them: which pods `gc`
//! marks and removes, and which images image gc removes. Decisions only,
//! over what was read of the data dir and the store; the locks, a pod's
//! network teardown and the removals are the caller's.

use crate::pod::{PodDir, PodState};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

/// What `gc` does with a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It stays.
    Keep,
    /// It is removed (its network released first).
    Remove,
}

/// Whether a pod listed in `dir` can be one `gc --mark-only` moves: exited
/// pods are in `run`, aborted prepares in `prepare`; pods listed elsewhere
/// need not be opened.
pub fn may_mark(dir: PodDir) -> bool {
    matches!(dir, PodDir::Run | PodDir::Prepare)
}

/// Where `gc --mark-only` moves a pod in `state`, as rkt's does: an exited
/// pod to `exited-garbage`, an aborted prepare to `garbage`. `None`: it
/// stays where it is.
pub fn pod_mark(state: PodState) -> Option<PodDir> {
    match state {
        PodState::Exited => Some(PodDir::ExitedGarbage),
        PodState::AbortedPrepare => Some(PodDir::Garbage),
        _ => None,
    }
}

/// What `gc` does with a pod listed in `dir` and found in `state`: an
/// exited pod created (`created_at`, the pod's creation time) at least
/// `grace` before `now` is removed, one of unknown age is kept; aborted
/// prepares and garbage (`garbage`, `exited-garbage`) are removed whatever
/// their age; nothing else is, and never a pod listed in `embryo`.
pub fn pod_verdict(
    dir: PodDir,
    state: PodState,
    created_at: Option<SystemTime>,
    now: SystemTime,
    grace: Duration,
) -> Verdict {
    let collect = match state {
        PodState::Exited => created_at.and_then(|t| now.duration_since(t).ok()).is_some_and(|age| age >= grace),
        PodState::AbortedPrepare | PodState::Garbage | PodState::ExitedGarbage => true,
        _ => false,
    };
    if collect && dir != PodDir::Embryo { Verdict::Remove } else { Verdict::Keep }
}

/// An image as image gc judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcImage {
    /// Its key (`sha512-...`).
    pub id: String,
    /// When it was last used, nanoseconds since the epoch (the index's
    /// `lastused`).
    pub last_used: i64,
    /// The keys of the images its manifest depends on (`dependencies`
    /// with an `imageID`).
    pub dependencies: Vec<String>,
}

/// Image gc over `images`, listed in the order they were imported (oldest
/// first). They are judged newest first: an image's dependencies were
/// imported before it and stay as long as an image that needs them does.
/// An image is removed when it was last used at least `grace` before `now`
/// (nanoseconds since the epoch), no pod uses it (`used`), it is not rkt's
/// own (`rkt_only`: those are left to `rkt image gc`; asked only of images
/// old and unused enough) and no image still kept depends on it.
///
/// `remove` removes one and says whether it was there to remove; one that
/// was not (removed meanwhile) keeps counting as a dependent, so its
/// dependencies stay this time. Returns the keys removed, in order; the
/// first error of `rkt_only` or `remove` stops it.
pub fn collect_images<E>(
    mut images: Vec<GcImage>,
    now: i64,
    grace: Duration,
    used: &HashSet<String>,
    mut rkt_only: impl FnMut(&str) -> Result<bool, E>,
    mut remove: impl FnMut(&str) -> Result<bool, E>,
) -> Result<Vec<String>, E> {
    let cutoff = now - grace.as_nanos() as i64;
    images.reverse();
    let mut dependents: HashMap<String, usize> = HashMap::new();
    for d in images.iter().flat_map(|i| i.dependencies.iter()) {
        *dependents.entry(d.clone()).or_default() += 1;
    }
    let mut removed = Vec::new();
    for image in images {
        let needed = dependents.get(&image.id).is_some_and(|n| *n > 0);
        if image.last_used < cutoff
            && !used.contains(&image.id)
            && !rkt_only(&image.id)?
            && !needed
            && remove(&image.id)?
        {
            for d in &image.dependencies {
                dependents.entry(d.clone()).and_modify(|n| *n -= 1);
            }
            removed.push(image.id);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn exited_pods_go_after_the_grace_period_garbage_at_once_embryos_never() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let v = |dir, state, created: Option<SystemTime>| pod_verdict(dir, state, created, now, HOUR);
        assert_eq!(v(PodDir::Run, PodState::Exited, Some(now - 2 * HOUR)), Verdict::Remove);
        assert_eq!(v(PodDir::Run, PodState::Exited, Some(now - HOUR)), Verdict::Remove, "grace is inclusive");
        assert_eq!(v(PodDir::Run, PodState::Exited, Some(now - HOUR / 2)), Verdict::Keep);
        assert_eq!(v(PodDir::Run, PodState::Exited, None), Verdict::Keep, "unknown age");
        assert_eq!(v(PodDir::Run, PodState::Exited, Some(now + HOUR)), Verdict::Keep, "created in the future");
        for (dir, state) in [
            (PodDir::Prepare, PodState::AbortedPrepare),
            (PodDir::Garbage, PodState::Garbage),
            (PodDir::ExitedGarbage, PodState::ExitedGarbage),
        ] {
            assert_eq!(v(dir, state, Some(now)), Verdict::Remove, "{state:?}");
            assert_eq!(v(dir, state, None), Verdict::Remove, "{state:?}");
        }
        // listed as an embryo, whatever it has become since
        assert_eq!(v(PodDir::Embryo, PodState::AbortedPrepare, None), Verdict::Keep);
        assert_eq!(v(PodDir::Embryo, PodState::Embryo, None), Verdict::Keep);
        for state in
            [PodState::Preparing, PodState::Prepared, PodState::Running, PodState::Deleting, PodState::ExitedDeleting]
        {
            assert_eq!(v(PodDir::Run, state, Some(now - 2 * HOUR)), Verdict::Keep, "{state:?}");
        }
        // no grace: an exited pod goes at once
        assert_eq!(pod_verdict(PodDir::Run, PodState::Exited, Some(now), now, Duration::ZERO), Verdict::Remove);
    }

    #[test]
    fn mark_only_moves_exited_pods_and_aborted_prepares() {
        assert_eq!(pod_mark(PodState::Exited), Some(PodDir::ExitedGarbage));
        assert_eq!(pod_mark(PodState::AbortedPrepare), Some(PodDir::Garbage));
        for state in [
            PodState::Embryo,
            PodState::Preparing,
            PodState::Prepared,
            PodState::Running,
            PodState::Deleting,
            PodState::ExitedDeleting,
            PodState::ExitedGarbage,
            PodState::Garbage,
        ] {
            assert_eq!(pod_mark(state), None, "{state:?}");
        }
        let dirs: Vec<PodDir> = PodDir::ALL.into_iter().filter(|d| may_mark(*d)).collect();
        assert_eq!(dirs, [PodDir::Prepare, PodDir::Run]);
    }

    fn image(id: &str, last_used: i64, deps: &[&str]) -> GcImage {
        GcImage { id: id.into(), last_used, dependencies: deps.iter().map(|d| d.to_string()).collect() }
    }

    /// An hour in nanoseconds, as the index's times are.
    const HOUR_NS: i64 = 3_600_000_000_000;
    const NOW: i64 = 10 * HOUR_NS;
    const OLD: i64 = NOW - 2 * HOUR_NS;

    /// Runs the rules with every removal succeeding; returns the removed
    /// keys and the keys `rkt_only` was asked about.
    fn run(images: Vec<GcImage>, used: &[&str], rkt: &[&str]) -> (Vec<String>, Vec<String>) {
        let used: HashSet<String> = used.iter().map(|s| s.to_string()).collect();
        let mut asked = Vec::new();
        let removed = collect_images::<()>(
            images,
            NOW,
            HOUR,
            &used,
            |id| {
                asked.push(id.to_string());
                Ok(rkt.contains(&id))
            },
            |_| Ok(true),
        )
        .expect("no error");
        (removed, asked)
    }

    #[test]
    fn old_unused_images_go_newest_first_and_their_dependencies_after_them() {
        // import order: base, then app on it, then a recent and a used one
        let images = vec![
            image("base", OLD, &[]),
            image("app", OLD, &["base"]),
            image("recent", NOW - HOUR_NS / 2, &[]),
            image("used", OLD, &[]),
            image("rkts", OLD, &[]),
        ];
        let (removed, asked) = run(images, &["used"], &["rkts"]);
        assert_eq!(removed, ["app", "base"]);
        // rkt's database is asked only about old, unused images
        assert_eq!(asked, ["rkts", "app", "base"]);
    }

    #[test]
    fn a_dependency_stays_while_an_image_kept_needs_it() {
        let images = vec![image("base", OLD, &[]), image("a", OLD, &["base"]), image("b", NOW, &["base"])];
        assert_eq!(run(images, &[], &[]).0, ["a"]);
        // a dependency imported after its dependent is judged before it: kept this time
        let images = vec![image("app", OLD, &["late"]), image("late", OLD, &[])];
        assert_eq!(run(images, &[], &[]).0, ["app"]);
        // an image used by a pod keeps its dependencies
        let images = vec![image("base", OLD, &[]), image("app", OLD, &["base"])];
        assert_eq!(run(images, &["app"], &[]).0, Vec::<String>::new());
        // the grace period is exclusive for images: last used exactly then stays
        let images = vec![image("edge", NOW - HOUR_NS, &[])];
        assert_eq!(run(images, &[], &[]).0, Vec::<String>::new());
    }

    #[test]
    fn an_image_gone_meanwhile_keeps_its_dependencies_and_errors_stop() {
        let images = || vec![image("base", OLD, &[]), image("app", OLD, &["base"])];
        let none = HashSet::new();
        let removed = collect_images::<()>(images(), NOW, HOUR, &none, |_| Ok(false), |id| Ok(id != "app"));
        assert_eq!(removed, Ok(Vec::new()));
        let mut tried = Vec::new();
        let err = collect_images(
            images(),
            NOW,
            HOUR,
            &none,
            |_| Ok(false),
            |id| {
                tried.push(id.to_string());
                Err("busy")
            },
        );
        assert_eq!(err, Err("busy"));
        assert_eq!(tried, ["app"]);
        assert_eq!(collect_images(images(), NOW, HOUR, &none, |_| Err("no db"), |_| Ok(true)), Err("no db"));
    }
}
