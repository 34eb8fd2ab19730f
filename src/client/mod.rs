//! The CRI's clients in the crate, where gRPC is spoken from the client's
//! side (as `cri` and `server` speak it from the server's): a client over
//! the daemon's unix socket (here, for `rktlet info` and the tests), the
//! benchmark harness (`bench`: `rktlet bench`, its reports) and the
//! walk-through (`demo`: `rktlet demo`).

pub(crate) mod bench;
pub mod demo;

use crate::proto::v1 as cri;
use crate::proto::v1::image_service_client::ImageServiceClient;
use crate::proto::v1::runtime_service_client::RuntimeServiceClient;
use hyper_util::rt::TokioIo;
use std::path::Path;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// Opens a gRPC channel to a CRI server listening on `socket`.
pub async fn channel(socket: &Path) -> Result<Channel, tonic::transport::Error> {
    let socket = socket.to_path_buf();
    // the URI is required by the API but unused: the connector dials the socket
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?)) }
        }))
        .await
}

pub(crate) async fn runtime(socket: &Path) -> Result<RuntimeServiceClient<Channel>, tonic::transport::Error> {
    Ok(RuntimeServiceClient::new(channel(socket).await?))
}

pub(crate) async fn images(socket: &Path) -> Result<ImageServiceClient<Channel>, tonic::transport::Error> {
    Ok(ImageServiceClient::new(channel(socket).await?))
}

/// Why nobody answers on `socket`, in an operator's words: no such file, not
/// a socket, or a socket nobody listens on (no daemon running there); `None`
/// when a connection succeeds.
pub(crate) fn why_unreachable(socket: &Path) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    let path = socket.display();
    let meta = match std::fs::metadata(socket) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(format!(
                "{path}: no such file: no daemon is serving there (start `rktlet serve`, or give --socket)"
            ));
        }
        Err(e) => return Some(format!("{path}: {e}")),
    };
    let kind = meta.file_type();
    if !kind.is_socket() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_file() {
            "a regular file"
        } else {
            "not a file"
        };
        return Some(format!("{path} is not a socket ({what}): is --socket right?"));
    }
    match std::os::unix::net::UnixStream::connect(socket) {
        Ok(_) => None,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(format!(
            "{path}: connection refused: the socket is there but no daemon listens on it \
             (the daemon is not running; a daemon that crashed leaves its socket)"
        )),
        Err(e) => Some(format!("{path}: cannot connect: {e}")),
    }
}

/// `rktlet info`: the server's Version and verbose Status as one JSON object.
pub(crate) async fn info(socket: &Path) -> Result<serde_json::Value, String> {
    if let Some(why) = why_unreachable(socket) {
        return Err(why);
    }
    let mut rt = runtime(socket).await.map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
    let v = rt
        .version(cri::VersionRequest { version: "v1".into() })
        .await
        .map_err(|e| format!("Version: {}", e.message()))?
        .into_inner();
    let s = rt
        .status(cri::StatusRequest { verbose: true })
        .await
        .map_err(|e| format!("Status: {}", e.message()))?
        .into_inner();
    let conditions: Vec<_> = s
        .status
        .map(|st| st.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| serde_json::json!({"type": c.r#type, "status": c.status, "reason": c.reason, "message": c.message}))
        .collect();
    let entry = |k: &str| s.info.get(k).and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok());
    let (config, pod_pool) = (entry("config"), entry("podPool"));
    Ok(serde_json::json!({
        "version": {
            "version": v.version,
            "runtimeName": v.runtime_name,
            "runtimeVersion": v.runtime_version,
            "runtimeApiVersion": v.runtime_api_version,
        },
        "conditions": conditions,
        "config": config,
        "podPool": pod_pool,
    }))
}
