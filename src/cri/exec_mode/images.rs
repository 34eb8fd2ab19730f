//! Images the exec way: `fetch`, and `image list` plus one `image
//! cat-manifest` per image for every list or status.

use super::super::image::group_to_cri;
use super::ExecMode;
use crate::image::Image;
use crate::image::aci::ACI_PREFIX;
use crate::proto::v1 as cri;
use rkt::api_v1::ImageInfo;
use rkt::reference::Reference;
use rkt::schema::ImageManifest;
use tonic::Status;

fn spec_image(spec: Option<cri::ImageSpec>) -> String {
    spec.map(|s| s.image).unwrap_or_default()
}

/// Every image with its manifest: 1 + N calls.
async fn all(x: &ExecMode) -> Result<Vec<Image>, Status> {
    let rows: Vec<ImageInfo> = x.json(&["image", "list", "--format=json"]).await?;
    let mut images = Vec::with_capacity(rows.len());
    for row in rows {
        let manifest: ImageManifest = x.json(&["image", "cat-manifest", &row.id]).await?;
        images.push(Image {
            id: row.id,
            manifest,
            tags: row.tags,
            digests: row.digests,
            size: row.size,
            import_time: row.import_time,
            last_used: row.last_used_time,
        });
    }
    Ok(images)
}

/// The image `name` (id, id prefix, tag or digest, or `aci:` and the file,
/// URL or appc name an ACI was fetched by) among all images.
async fn find(x: &ExecMode, name: &str) -> Result<Option<Image>, Status> {
    let normalized = match name.strip_prefix(ACI_PREFIX) {
        Some(src) => format!("{ACI_PREFIX}{}", src.strip_prefix("file://").unwrap_or(src)),
        None => name.parse::<Reference>().map(|r| r.to_string()).unwrap_or_else(|_| name.to_string()),
    };
    Ok(all(x).await?.into_iter().find(|i| {
        i.id.starts_with(name)
            || i.content_id() == name
            || i.tags.contains(&normalized)
            || i.digests.contains(&normalized)
    }))
}

/// The image `name` names ([`find`]) and every other of the same content.
async fn find_content(x: &ExecMode, name: &str) -> Result<Vec<Image>, Status> {
    let Some(found) = find(x, name).await? else { return Ok(Vec::new()) };
    let content = found.content_id().to_string();
    Ok(all(x).await?.into_iter().filter(|i| i.content_id() == content).collect())
}

pub(crate) async fn pull_image(x: &ExecMode, req: cri::PullImageRequest) -> Result<cri::PullImageResponse, Status> {
    let name = spec_image(req.image);
    if name.is_empty() {
        return Err(Status::invalid_argument("PullImage: image spec is empty"));
    }
    let out = match fetch_args(&name, x.own_cli()) {
        // an ACI is checked against the trust store: no --insecure-options=image for it
        Fetch::Aci(source) => x.run_with(&x.aci_global, &["fetch", &source]).await?,
        Fetch::Docker(source) => x.run(&["fetch", &source]).await?,
    };
    let key = out.lines().last().unwrap_or_default().trim().to_string();
    // the CLI answers rkt's key; the CRI's id is the content's
    let store = x.rt.images.clone();
    let image_ref = tokio::task::spawn_blocking(move || store.resolve(&key).map(|i| i.content_id().to_string()))
        .await
        .map_err(|e| Status::internal(format!("image store task failed: {e}")))?
        .map_err(Status::from)?;
    // the tree the call rendered is synced here, after the answer
    let cas = x.rt.images.cas().clone();
    tokio::task::spawn_blocking(move || {
        rkt::tree::settle_unsynced(&cas);
        crate::image::layer_aci::convert_later(&cas);
    });
    Ok(cri::PullImageResponse { image_ref })
}

/// What PullImage of `name` has the CLI fetch.
#[derive(Debug, PartialEq, Eq)]
enum Fetch {
    /// An ACI: `aci:` and its file, URL or appc name for this binary's CLI
    /// (which records the image under that reference), the bare source for
    /// rkt (a bare name is an appc name there).
    Aci(String),
    /// A docker image: `docker://` and the reference, as rktlet ran rkt.
    Docker(String),
}

fn fetch_args(name: &str, own_cli: bool) -> Fetch {
    match name.strip_prefix(ACI_PREFIX) {
        Some(_) if own_cli => Fetch::Aci(name.to_string()),
        Some(source) => Fetch::Aci(source.to_string()),
        None => Fetch::Docker(format!("docker://{name}")),
    }
}

pub(crate) async fn list_images(x: &ExecMode, req: cri::ListImagesRequest) -> Result<cri::ListImagesResponse, Status> {
    let filter = spec_image(req.filter.and_then(|f| f.image));
    let images = if filter.is_empty() { all(x).await? } else { find_content(x, &filter).await? };
    let groups = crate::image::group_by_content(images);
    Ok(cri::ListImagesResponse { images: groups.iter().map(|g| group_to_cri(g)).collect() })
}

pub(crate) async fn image_status(
    x: &ExecMode,
    req: cri::ImageStatusRequest,
) -> Result<cri::ImageStatusResponse, Status> {
    let name = spec_image(req.image);
    let group = find_content(x, &name).await?;
    let image = (!group.is_empty()).then(|| group_to_cri(&group));
    Ok(cri::ImageStatusResponse { image, ..Default::default() })
}

pub(crate) async fn remove_image(
    x: &ExecMode,
    req: cri::RemoveImageRequest,
) -> Result<cri::RemoveImageResponse, Status> {
    let name = spec_image(req.image);
    if name.is_empty() {
        return Err(Status::invalid_argument("RemoveImage: image spec is empty"));
    }
    for image in find_content(x, &name).await? {
        x.run(&["image", "rm", &image.id]).await?;
    }
    Ok(cri::RemoveImageResponse {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acis_are_fetched_as_acis_and_the_rest_from_docker() {
        assert_eq!(fetch_args("aci:/srv/app.aci", true), Fetch::Aci("aci:/srv/app.aci".into()));
        assert_eq!(fetch_args("aci:example.com/app:1.0", true), Fetch::Aci("aci:example.com/app:1.0".into()));
        // rkt takes files, URLs and appc names bare
        assert_eq!(fetch_args("aci:https://e.com/app.aci", false), Fetch::Aci("https://e.com/app.aci".into()));
        assert_eq!(fetch_args("aci:example.com/app:1.0", false), Fetch::Aci("example.com/app:1.0".into()));
        assert_eq!(fetch_args("busybox:latest", true), Fetch::Docker("docker://busybox:latest".into()));
        assert_eq!(fetch_args("busybox:latest", false), Fetch::Docker("docker://busybox:latest".into()));
    }
}
