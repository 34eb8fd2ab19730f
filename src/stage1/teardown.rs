//! Stop and remove of a whole pod, in the order that leaves nothing behind:
//! processes (stop), host mounts and cgroup (release), network (CNI DEL, then
//! the netns), and last the pod directory. Shared by the daemon and the CLI;
//! each step is idempotent, so an interrupted teardown is simply repeated.
//! The order is written once over [`Steps`]: the host's ([`Host`]), or a
//! test's recording double (the order of the calls, what a failure leaves).

use super::stop::{self, StopError};
use crate::net::pod::{self as podnet, PodNetError};
use rkt::pod::{self, DataDir, Pod, PodError};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub(crate) enum TeardownError {
    #[error(transparent)]
    Stop(#[from] StopError),
    #[error(transparent)]
    Net(#[from] PodNetError),
    #[error("teardown worker failed: {0}")]
    Worker(String),
}

impl TeardownError {
    /// The pod-directory error underneath, if that is what failed.
    pub(crate) fn pod_error(self) -> Result<PodError, Self> {
        match self {
            TeardownError::Stop(StopError::Pod(e)) => Ok(e),
            other => Err(other),
        }
    }
}

impl From<PodError> for TeardownError {
    fn from(e: PodError) -> Self {
        TeardownError::Stop(StopError::Pod(e))
    }
}

pub(crate) use crate::net::NetDirs;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, TeardownError> + Send + 'static,
) -> Result<T, TeardownError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| TeardownError::Worker(e.to_string()))?
}

/// When a removed pod's directory is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deletion {
    /// Before the removal returns (the CLI, whose process ends next).
    Now,
    /// Taken out of the pod tree before the removal returns, deleted after it
    /// (the daemon: see [`stop::delete_later`]).
    Later,
}

/// The steps of a teardown, each idempotent: on the host ([`Host`]), or
/// recorded by a test double (the order of the calls, what a failure stops).
pub(crate) trait Steps: Clone + Send + Sync + 'static {
    /// An open pod (its directory and lock).
    type Pod: Send + 'static;
    /// Opens pod `id` (a uuid or a prefix of one).
    fn open(&self, id: &str) -> Result<Self::Pod, TeardownError>;
    /// Its uuid.
    fn uuid(&self, pod: &Self::Pod) -> Uuid;
    /// The network namespace it recorded, if any.
    fn netns(&self, pod: &Self::Pod) -> Result<Option<PathBuf>, TeardownError>;
    /// Kills its processes and waits for the pod to read as exited.
    fn stop(&self, pod: &mut Self::Pod) -> Result<(), TeardownError>;
    /// Unmounts what is below its directory and removes its cgroup.
    fn release(&self, pod: &Self::Pod) -> Result<(), TeardownError>;
    /// CNI DEL of its network, while the namespace still exists.
    fn release_network(
        &self,
        uuid: Uuid,
        netns: Option<PathBuf>,
    ) -> impl Future<Output = Result<(), TeardownError>> + Send;
    /// Removes its network namespace and CNI cache (after the DEL).
    fn free_network(&self, uuid: Uuid, netns: Option<PathBuf>) -> Result<(), TeardownError>;
    /// Deletes its directory.
    fn delete(&self, pod: Self::Pod, deletion: Deletion) -> Result<(), TeardownError>;
    /// Unloads its sandbox unit, where PID 1 is systemd (a failed unit
    /// stays loaded while its pod exists).
    fn forget_unit(&self, uuid: Uuid) -> impl Future<Output = ()> + Send;
}

/// The host's teardown: the data dir, how long a pod's systemd gets to
/// power off, the CNI config.
#[derive(Clone)]
pub(crate) struct Host {
    pub data: DataDir,
    pub grace: Duration,
    pub net: NetDirs,
}

impl Steps for Host {
    type Pod = Pod;

    fn open(&self, id: &str) -> Result<Pod, TeardownError> {
        Ok(Pod::open(&self.data, id)?)
    }

    fn uuid(&self, pod: &Pod) -> Uuid {
        pod.uuid()
    }

    fn netns(&self, pod: &Pod) -> Result<Option<PathBuf>, TeardownError> {
        Ok(pod.read_file(pod::NETNS_FILE)?.map(PathBuf::from))
    }

    fn stop(&self, pod: &mut Pod) -> Result<(), TeardownError> {
        Ok(stop::stop(pod, self.grace)?)
    }

    fn release(&self, pod: &Pod) -> Result<(), TeardownError> {
        Ok(stop::release(pod)?)
    }

    async fn release_network(&self, uuid: Uuid, netns: Option<PathBuf>) -> Result<(), TeardownError> {
        Ok(podnet::release(&self.data, uuid, netns.as_deref(), &self.net.conf_dir, &self.net.bin_dirs).await?)
    }

    fn free_network(&self, uuid: Uuid, netns: Option<PathBuf>) -> Result<(), TeardownError> {
        Ok(podnet::free(&self.data, uuid, netns)?)
    }

    fn delete(&self, pod: Pod, deletion: Deletion) -> Result<(), TeardownError> {
        match deletion {
            Deletion::Now => stop::delete(pod)?,
            Deletion::Later => stop::delete_later(pod)?,
        }
        Ok(())
    }

    async fn forget_unit(&self, uuid: Uuid) {
        if super::host::pid1_is_systemd(std::path::Path::new("/")) {
            super::launch::forget_unit(&uuid.to_string()).await;
        }
    }
}

/// Stops a pod and releases what it holds on the host, network included.
/// The pod directory stays (an exited pod can still be inspected).
pub(crate) async fn stop_pod(data: &DataDir, id: &str, grace: Duration, net: &NetDirs) -> Result<(), TeardownError> {
    stop_pod_with(&Host { data: data.clone(), grace, net: net.clone() }, id).await
}

/// [`stop_pod`] over `steps`: the pod's processes stopped then its host
/// mounts and cgroup released, while its network's CNI DEL runs; the
/// namespace freed once both are done. A failure of either leaves the
/// namespace for the next stop (the DEL finds the pod's interface there).
pub(crate) async fn stop_pod_with<S: Steps>(steps: &S, id: &str) -> Result<(), TeardownError> {
    let t0 = Instant::now();
    let (s, id2) = (steps.clone(), id.to_string());
    let (mut pod, uuid, netns) = blocking(move || {
        let pod = s.open(&id2)?;
        let (uuid, netns) = (s.uuid(&pod), s.netns(&pod)?);
        Ok((pod, uuid, netns))
    })
    .await?;
    // CNI DEL while the pod is killed: a stopped pod is one whose processes
    // are gone and whose network is released, in either order
    let s = steps.clone();
    let processes = blocking(move || {
        s.stop(&mut pod)?;
        let t_stop = t0.elapsed();
        s.release(&pod)?;
        Ok((t_stop, t0.elapsed()))
    });
    let network = async {
        steps.release_network(uuid, netns.clone()).await?;
        Ok::<_, TeardownError>(t0.elapsed())
    };
    let (processes, network) = tokio::join!(processes, network);
    let ((t_stop, t_release), t_network) = (processes?, network?);
    steps.free_network(uuid, netns)?;
    tracing::debug!(
        pod = %uuid,
        stop_micros = t_stop.as_micros() as u64,
        release_micros = (t_release - t_stop).as_micros() as u64,
        network_micros = t_network.as_micros() as u64,
        total_micros = t0.elapsed().as_micros() as u64,
        "pod sandbox stopped"
    );
    Ok(())
}

/// Stops (if needed) and deletes a pod with its network.
pub(crate) async fn remove_pod(
    data: &DataDir,
    id: &str,
    grace: Duration,
    net: &NetDirs,
    deletion: Deletion,
) -> Result<(), TeardownError> {
    remove_pod_with(&Host { data: data.clone(), grace, net: net.clone() }, id, deletion).await
}

/// [`remove_pod`] over `steps`: the directory is deleted only once the
/// stop succeeded (a pod that failed to stop stays, to be removed again),
/// then the sandbox unit is let go.
pub(crate) async fn remove_pod_with<S: Steps>(steps: &S, id: &str, deletion: Deletion) -> Result<(), TeardownError> {
    let t0 = Instant::now();
    stop_pod_with(steps, id).await?;
    let t_stop = t0.elapsed();
    crate::base::fault::point("remove-after-stop");
    let (s, id2) = (steps.clone(), id.to_string());
    let uuid = blocking(move || {
        let pod = s.open(&id2)?;
        let uuid = s.uuid(&pod);
        s.delete(pod, deletion)?;
        Ok(uuid)
    })
    .await?;
    let t_delete = t0.elapsed();
    steps.forget_unit(uuid).await;
    tracing::debug!(
        pod = %uuid,
        stop_micros = t_stop.as_micros() as u64,
        delete_micros = (t_delete - t_stop).as_micros() as u64,
        unit_micros = (t0.elapsed() - t_delete).as_micros() as u64,
        "pod sandbox removed"
    );
    Ok(())
}

/// Removes whatever a pod start that failed left, even without a pod
/// directory (the network may exist before the sandbox made the pod).
pub(crate) async fn abort_start(data: &DataDir, uuid: Uuid, net: &NetDirs) -> Result<(), TeardownError> {
    abort_start_with(&Host { data: data.clone(), grace: Duration::from_secs(5), net: net.clone() }, uuid).await
}

/// [`abort_start`] over `steps`: the whole pod removed at once, or, where
/// the start made no pod directory, its network alone.
pub(crate) async fn abort_start_with<S: Steps>(steps: &S, uuid: Uuid) -> Result<(), TeardownError> {
    match remove_pod_with(steps, &uuid.to_string(), Deletion::Now).await {
        Ok(()) => Ok(()),
        Err(e) => match e.pod_error() {
            Ok(PodError::NotFound(_)) => {
                steps.release_network(uuid, None).await?;
                steps.free_network(uuid, None)
            }
            Ok(other) => Err(other.into()),
            Err(e) => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::{Arc, Mutex};

    /// A teardown that records its calls, over pods that are only names; one
    /// step may be made to fail.
    #[derive(Clone, Default)]
    struct Recorder {
        calls: Arc<Mutex<Vec<String>>>,
        pods: Arc<Mutex<BTreeMap<String, Uuid>>>,
        fail: Option<&'static str>,
        /// Set once the CNI DEL has begun (the kill waits for it: both run at once).
        del_started: Arc<AtomicBool>,
        /// Set once the kill has begun (the DEL of a pod waits for it).
        stop_started: Arc<AtomicBool>,
        /// The DEL saw the kill begun before it ended.
        del_saw_stop: Arc<AtomicBool>,
    }

    /// Waits until `flag` is set, at most 5 s; whether it was.
    async fn seen(flag: &AtomicBool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !flag.load(SeqCst) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        flag.load(SeqCst)
    }

    const NETNS: &str = "/run/netns/test";

    impl Recorder {
        fn with_pod() -> (Recorder, Uuid) {
            let r = Recorder::default();
            let uuid = Uuid::new_v4();
            r.pods.lock().expect("pods").insert(uuid.to_string(), uuid);
            (r, uuid)
        }
        fn failing(mut self, step: &'static str) -> Recorder {
            self.fail = Some(step);
            self
        }
        fn step(&self, name: &str) -> Result<(), TeardownError> {
            self.calls.lock().expect("calls").push(name.to_string());
            match self.fail {
                Some(f) if name.starts_with(f) => Err(TeardownError::Worker(format!("{name} failed"))),
                _ => Ok(()),
            }
        }
        fn calls(&self) -> Vec<String> {
            self.calls.lock().expect("calls").clone()
        }
        fn has_pod(&self, uuid: Uuid) -> bool {
            self.pods.lock().expect("pods").contains_key(&uuid.to_string())
        }
    }

    impl Steps for Recorder {
        type Pod = Uuid;

        fn open(&self, id: &str) -> Result<Uuid, TeardownError> {
            self.step("open")?;
            let pods = self.pods.lock().expect("pods");
            Ok(*pods.get(id).ok_or_else(|| PodError::NotFound(id.to_string()))?)
        }
        fn uuid(&self, pod: &Uuid) -> Uuid {
            *pod
        }
        fn netns(&self, _: &Uuid) -> Result<Option<PathBuf>, TeardownError> {
            Ok(Some(PathBuf::from(NETNS)))
        }
        fn stop(&self, _: &mut Uuid) -> Result<(), TeardownError> {
            // the pod is killed while its network is released: each half
            // waits for the other to begin (a teardown that ran them one after
            // the other would record `stop` alone, or a DEL that saw no kill)
            self.stop_started.store(true, SeqCst);
            let deadline = Instant::now() + Duration::from_secs(5);
            while !self.del_started.load(SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            let during = self.del_started.load(SeqCst);
            self.step(if during { "stop (during the DEL)" } else { "stop" })
        }
        fn release(&self, _: &Uuid) -> Result<(), TeardownError> {
            self.step("release")
        }
        async fn release_network(&self, uuid: Uuid, netns: Option<PathBuf>) -> Result<(), TeardownError> {
            self.del_started.store(true, SeqCst);
            // (a start aborted before it made a pod has no kill to wait for)
            if self.has_pod(uuid) && seen(&self.stop_started).await {
                self.del_saw_stop.store(true, SeqCst);
            }
            self.step(&format!("cni-del {}", netns.map_or("-".into(), |p| p.display().to_string())))
        }
        fn free_network(&self, _: Uuid, netns: Option<PathBuf>) -> Result<(), TeardownError> {
            self.step(&format!("free {}", netns.map_or("-".into(), |p| p.display().to_string())))
        }
        fn delete(&self, pod: Uuid, deletion: Deletion) -> Result<(), TeardownError> {
            self.step(&format!("delete {deletion:?}"))?;
            self.pods.lock().expect("pods").remove(&pod.to_string());
            Ok(())
        }
        async fn forget_unit(&self, _: Uuid) {
            let _ = self.step("forget-unit");
        }
    }

    /// Where `name` is in `calls` (a call missing fails the test).
    fn at(calls: &[String], name: &str) -> usize {
        calls.iter().position(|c| c == name).unwrap_or_else(|| panic!("no {name:?} in {calls:?}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_kills_while_it_deletes_the_network_and_frees_the_namespace_last() {
        let (r, uuid) = Recorder::with_pod();
        stop_pod_with(&r, &uuid.to_string()).await.expect("stop");
        let calls = r.calls();
        assert_eq!(calls.len(), 5, "{calls:?}");
        assert_eq!(calls[0], "open");
        let (stop, release) = (at(&calls, "stop (during the DEL)"), at(&calls, "release"));
        let (del, free) = (at(&calls, &format!("cni-del {NETNS}")), at(&calls, &format!("free {NETNS}")));
        assert!(stop < release && del < free && release < free && free == 4, "{calls:?}");
        assert!(r.del_saw_stop.load(SeqCst), "the DEL ran while the pod was killed");
        assert!(r.has_pod(uuid), "a stopped pod's directory stays");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_kill_or_del_keeps_the_namespace_for_the_next_stop() {
        for (fail, skipped) in [("stop", "release"), ("cni-del", "")] {
            let (r, uuid) = Recorder::with_pod();
            let r = r.failing(fail);
            let e = stop_pod_with(&r, &uuid.to_string()).await.expect_err("the stop fails");
            assert!(e.to_string().contains(fail), "the error names its cause: {e}");
            let calls = r.calls();
            assert!(!calls.iter().any(|c| c.starts_with("free")), "{fail}: {calls:?}");
            assert!(skipped.is_empty() || !calls.iter().any(|c| c == skipped), "{fail}: {calls:?}");
            // the other half ran to its end all the same
            let other = if fail == "stop" { "cni-del" } else { "release" };
            assert!(calls.iter().any(|c| c.starts_with(other)), "{fail}: {calls:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_removal_deletes_only_a_stopped_pod_then_lets_its_unit_go() {
        let (r, uuid) = Recorder::with_pod();
        remove_pod_with(&r, &uuid.to_string(), Deletion::Later).await.expect("remove");
        let calls = r.calls();
        let (free, delete, unit) =
            (at(&calls, &format!("free {NETNS}")), at(&calls, "delete Later"), at(&calls, "forget-unit"));
        assert!(free < delete && delete < unit && unit == calls.len() - 1, "{calls:?}");
        assert!(!r.has_pod(uuid));

        for fail in ["stop", "cni-del", "delete"] {
            let (r, uuid) = Recorder::with_pod();
            let r = r.failing(fail);
            remove_pod_with(&r, &uuid.to_string(), Deletion::Later).await.expect_err("the removal fails");
            let calls = r.calls();
            assert!(!calls.iter().any(|c| c == "forget-unit"), "{fail}: {calls:?}");
            if fail != "delete" {
                assert!(!calls.iter().any(|c| c.starts_with("delete")), "{fail}: {calls:?}");
            }
            assert!(r.has_pod(uuid), "{fail}: the pod is there to remove again");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_removal_of_no_pod_is_not_found_and_touches_nothing() {
        let r = Recorder::default();
        let e = remove_pod_with(&r, &Uuid::new_v4().to_string(), Deletion::Later).await.expect_err("no pod");
        assert!(matches!(e.pod_error(), Ok(PodError::NotFound(_))));
        assert_eq!(r.calls(), ["open"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_aborted_start_takes_the_pod_down_now_or_its_network_alone() {
        let (r, uuid) = Recorder::with_pod();
        abort_start_with(&r, uuid).await.expect("abort");
        let calls = r.calls();
        assert!(at(&calls, &format!("free {NETNS}")) < at(&calls, "delete Now"), "{calls:?}");
        assert!(!r.has_pod(uuid));

        // a start that failed before the sandbox made the pod: its namespace
        // (found by the pod's uuid) still has a network to delete
        let r = Recorder::default();
        abort_start_with(&r, Uuid::new_v4()).await.expect("abort");
        assert_eq!(r.calls(), ["open", "cni-del -", "free -"]);

        let r = Recorder::default().failing("cni-del");
        let e = abort_start_with(&r, Uuid::new_v4()).await.expect_err("the DEL fails");
        assert!(e.to_string().contains("cni-del"), "{e}");
        assert_eq!(r.calls(), ["open", "cni-del -"]);
    }
}
