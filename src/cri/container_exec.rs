//! ExecSync, Exec and Attach: a command run inside a running container,
//! in-process, or the container's own output.
//! The command is the only program started (`stage1::exec`). Exec answers
//! with a single-use URL of the streaming server (`crate::stream`), which
//! runs the command when the client connects.

use crate::container::exec::running_app;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

/// The streams a streaming call asks for must make sense together.
fn check_streams(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> Result<(), Status> {
    if !(stdin || stdout || stderr) {
        return Err(Status::invalid_argument("one of stdin, stdout and stderr must be set"));
    }
    if tty && stderr {
        return Err(Status::invalid_argument("tty and stderr cannot both be set: a terminal has one output"));
    }
    Ok(())
}

/// Exec: checks the request and the container, then hands out a URL.
pub(crate) async fn exec(rt: &Runtime, req: cri::ExecRequest) -> Result<cri::ExecResponse, Status> {
    if req.cmd.is_empty() {
        return Err(Status::invalid_argument("cmd is required"));
    }
    check_streams(req.stdin, req.stdout, req.stderr, req.tty)?;
    tokio::task::block_in_place(|| running_app(rt, &req.container_id))?;
    let url = rt
        .streams
        .url(crate::stream::token::StreamRequest::Exec {
            container_id: req.container_id,
            cmd: req.cmd,
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        })
        .map_err(Status::unavailable)?;
    Ok(cri::ExecResponse { url })
}

/// Attach: checks the request and the container, then hands out a URL.
pub(crate) async fn attach(rt: &Runtime, req: cri::AttachRequest) -> Result<cri::AttachResponse, Status> {
    check_streams(req.stdin, req.stdout, req.stderr, req.tty)?;
    // checked now; the stdin pipe is fetched when the client connects
    tokio::task::block_in_place(|| crate::container::attach::attachable(rt, &req.container_id, req.stdin))?;
    let url = rt
        .streams
        .url(crate::stream::token::StreamRequest::Attach {
            container_id: req.container_id,
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        })
        .map_err(Status::unavailable)?;
    Ok(cri::AttachResponse { url })
}

pub(crate) async fn exec_sync(rt: &Runtime, req: cri::ExecSyncRequest) -> Result<cri::ExecSyncResponse, Status> {
    let out = crate::container::exec::exec_sync(rt, &req.container_id, req.cmd, req.timeout).await?;
    Ok(cri::ExecSyncResponse { stdout: out.stdout, stderr: out.stderr, exit_code: out.exit_code })
}

/// The streaming server's lookups: a URL handed out here leads to these
/// when the client connects (the server is `stream::server`, which knows
/// nothing of the CRI side).
impl crate::stream::server::Lookup for Runtime {
    fn streams(&self) -> &crate::stream::server::StreamServer {
        &self.streams
    }

    fn app_process(&self, container_id: &str) -> Result<crate::stage1::exec::AppProcess, String> {
        running_app(self, container_id).map_err(|e| e.to_string())
    }

    fn attach_source(&self, container_id: &str, stdin: bool) -> Result<crate::stream::attach::Source, String> {
        crate::container::attach::source(self, container_id, stdin).map_err(|e| e.to_string())
    }

    fn netns(&self, pod_id: &str) -> Result<Option<std::path::PathBuf>, String> {
        crate::sandbox::status::running_netns(self, pod_id).map_err(|e| e.to_string())
    }
}
