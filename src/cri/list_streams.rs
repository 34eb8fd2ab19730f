//! The streaming forms of the List verbs (kubelet's CRIListStreaming): the
//! same answers as ListPodSandbox, ListContainers, ListContainerStats,
//! ListPodSandboxStats, ListPodSandboxMetrics and ListImages, sent in chunks
//! of about 1 MiB so that a node with many pods or big annotations never
//! meets gRPC's message size limit.

use super::{BoxStream, container_status, image, pod_metrics, sandbox_status, stats};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use prost::Message;
use tonic::Status;

/// Encoded bytes per chunk (items are never split; one bigger item is a chunk alone).
const CHUNK_BYTES: usize = 1 << 20;

/// Splits `items` into chunks of at most [`CHUNK_BYTES`] and wraps each.
pub(super) fn chunked<T: Message + 'static, R: Send + 'static>(items: Vec<T>, wrap: fn(Vec<T>) -> R) -> BoxStream<R> {
    let mut chunks = Vec::new();
    let (mut chunk, mut size) = (Vec::new(), 0);
    for item in items {
        let len = item.encoded_len();
        if !chunk.is_empty() && size + len > CHUNK_BYTES {
            chunks.push(Ok(wrap(std::mem::take(&mut chunk))));
            size = 0;
        }
        size += len;
        chunk.push(item);
    }
    if !chunk.is_empty() || chunks.is_empty() {
        chunks.push(Ok(wrap(chunk)));
    }
    Box::pin(tokio_stream::iter(chunks))
}

pub(super) async fn stream_pod_sandboxes(
    rt: &Runtime,
    req: cri::StreamPodSandboxesRequest,
) -> Result<BoxStream<cri::StreamPodSandboxesResponse>, Status> {
    let list = sandbox_status::list_pod_sandbox(rt, cri::ListPodSandboxRequest { filter: req.filter }).await?;
    Ok(chunked(list.items, |pod_sandboxes| cri::StreamPodSandboxesResponse { pod_sandboxes }))
}

pub(super) async fn stream_containers(
    rt: &Runtime,
    req: cri::StreamContainersRequest,
) -> Result<BoxStream<cri::StreamContainersResponse>, Status> {
    let list = container_status::list_containers(rt, cri::ListContainersRequest { filter: req.filter }).await?;
    Ok(chunked(list.containers, |containers| cri::StreamContainersResponse { containers }))
}

pub(super) async fn stream_container_stats(
    rt: &Runtime,
    req: cri::StreamContainerStatsRequest,
) -> Result<BoxStream<cri::StreamContainerStatsResponse>, Status> {
    let list = stats::list_container_stats(rt, cri::ListContainerStatsRequest { filter: req.filter }).await?;
    Ok(chunked(list.stats, |container_stats| cri::StreamContainerStatsResponse { container_stats }))
}

pub(super) async fn stream_pod_sandbox_stats(
    rt: &Runtime,
    req: cri::StreamPodSandboxStatsRequest,
) -> Result<BoxStream<cri::StreamPodSandboxStatsResponse>, Status> {
    let list = stats::list_pod_sandbox_stats(rt, cri::ListPodSandboxStatsRequest { filter: req.filter }).await?;
    Ok(chunked(list.stats, |pod_sandbox_stats| cri::StreamPodSandboxStatsResponse { pod_sandbox_stats }))
}

pub(super) async fn stream_pod_sandbox_metrics(
    rt: &Runtime,
    _req: cri::StreamPodSandboxMetricsRequest,
) -> Result<BoxStream<cri::StreamPodSandboxMetricsResponse>, Status> {
    let metrics = tokio::task::block_in_place(|| pod_metrics::collect(rt))?;
    Ok(chunked(metrics, |pod_sandbox_metrics| cri::StreamPodSandboxMetricsResponse { pod_sandbox_metrics }))
}

pub(super) async fn stream_images(
    rt: &Runtime,
    req: cri::StreamImagesRequest,
) -> Result<BoxStream<cri::StreamImagesResponse>, Status> {
    let list = image::list_images(rt, cri::ListImagesRequest { filter: req.filter }).await?;
    Ok(chunked(list.images, |images| cri::StreamImagesResponse { images }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt;

    #[tokio::test]
    async fn chunks_stay_under_the_limit_and_keep_everything() {
        let big = "x".repeat(300 << 10);
        let items: Vec<cri::Image> = (0..10)
            .map(|i| cri::Image { id: format!("{i}"), repo_tags: vec![big.clone()], ..Default::default() })
            .collect();
        let chunks: Vec<cri::StreamImagesResponse> =
            chunked(items, |images| cri::StreamImagesResponse { images }).map(|r| r.expect("chunk")).collect().await;
        assert_eq!(chunks.len(), 4, "3 items of 300 KiB fit in 1 MiB");
        assert!(chunks.iter().all(|c| c.encoded_len() <= CHUNK_BYTES + 16));
        let ids: Vec<String> = chunks.iter().flat_map(|c| c.images.iter().map(|i| i.id.clone())).collect();
        assert_eq!(ids, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
        let empty: Vec<_> =
            chunked(Vec::<cri::Image>::new(), |images| cri::StreamImagesResponse { images }).collect().await;
        assert_eq!(empty.len(), 1, "an empty list is one empty chunk");
    }
}
