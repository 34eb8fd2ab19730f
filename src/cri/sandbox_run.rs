//! RunPodSandbox: the request checked and translated
//! (`sandbox::from_cri::run_request`), its confinement checked, then
//! `sandbox::start::run`.

use super::sandbox_error;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub async fn run_pod_sandbox(
    rt: &Runtime,
    req: cri::RunPodSandboxRequest,
) -> Result<cri::RunPodSandboxResponse, Status> {
    let sc = req.config.as_ref().and_then(|c| c.linux.as_ref()).and_then(|l| l.security_context.as_ref());
    if let Some(sc) = sc {
        let prefix = "config.linux.security_context";
        // the pod has no process of the user's to confine (no pause
        // container): a named profile must still exist, as containerd's pause needs it
        let apparmor = super::apparmor_asked(&format!("{prefix}.apparmor"), sc.apparmor.as_ref(), "")?;
        let confinement = super::check_lsm(rt, prefix, apparmor, sc.privileged, sc.selinux_options.as_ref())?;
        if matches!(confinement, crate::stage1::lsm::Confinement::Profile(_)) {
            super::apparmor_profile(rt, &format!("{prefix}.apparmor"), &confinement)?;
        }
    }
    let req = crate::sandbox::from_cri::run_request(req, rt.cgroup_driver == crate::cgroup::Driver::Systemd)
        .map_err(sandbox_error)?;
    let uuid = crate::sandbox::start::run(rt, &req).await.map_err(sandbox_error)?;
    Ok(cri::RunPodSandboxResponse { pod_sandbox_id: uuid.to_string() })
}
