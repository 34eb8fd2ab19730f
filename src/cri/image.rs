//! ImageService: PullImage, ListImages, ImageStatus, RemoveImage, ImageFsInfo.
//! Translates CRI messages to `image::Store` calls.

use crate::image::{Credentials, Image, ImageError, Store};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use std::collections::HashMap;
use tonic::Status;

/// One CRI image for the images of one content (`Store::resolve_content`):
/// its content id, the tags and digests of them all.
pub(crate) fn group_to_cri(group: &[Image]) -> cri::Image {
    let Some(first) = group.first() else { return cri::Image::default() };
    let (uid, username) = first.user();
    let mut repo_tags: Vec<String> = group.iter().flat_map(|i| i.tags.iter().cloned()).collect();
    let mut repo_digests: Vec<String> = group.iter().flat_map(|i| i.digests.iter().cloned()).collect();
    repo_tags.sort();
    repo_tags.dedup();
    repo_digests.sort();
    repo_digests.dedup();
    let id = first.content_id().to_string();
    cri::Image {
        id: id.clone(),
        repo_tags,
        repo_digests,
        size: first.size,
        uid: uid.map(|value| cri::Int64Value { value }),
        username,
        spec: Some(cri::ImageSpec { image: id, ..Default::default() }),
        pinned: false,
    }
}

fn spec_image(spec: Option<cri::ImageSpec>) -> String {
    spec.map(|s| s.image).unwrap_or_default()
}

/// Runs blocking store work off the async threads.
async fn blocking<T: Send + 'static>(
    store: &Store,
    f: impl FnOnce(Store) -> Result<T, ImageError> + Send + 'static,
) -> Result<T, Status> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || f(store))
        .await
        .map_err(|e| Status::internal(format!("image store task failed: {e}")))?
        .map_err(Status::from)
}

pub(crate) async fn pull_image(rt: &Runtime, req: cri::PullImageRequest) -> Result<cri::PullImageResponse, Status> {
    let name = spec_image(req.image);
    if name.is_empty() {
        return Err(Status::invalid_argument("PullImage: image spec is empty"));
    }
    let creds = req
        .auth
        .map(|a| Credentials::from_cri(&a.username, &a.password, &a.auth, &a.identity_token, &a.registry_token))
        .unwrap_or_default();
    let image = if name.starts_with(crate::image::aci::ACI_PREFIX) {
        // rkt's own image format, always checked against the trust store
        let trust = crate::trust::TrustStore::new(&rt.config.trust_dir, crate::trust::SYSTEM_CONFIG);
        crate::image::aci::Fetcher::new(&rt.images, Some(&trust)).fetch(&name).await
    } else {
        rt.images.pull(&name, creds, None).await
    }
    .map_err(|e| Status::new(code_of(&e), format!("pulling image {name:?}: {e}")))?;
    crate::metrics::global().record_pull(image.size);
    Ok(cri::PullImageResponse { image_ref: image.content_id().to_string() })
}

pub(crate) async fn list_images(rt: &Runtime, req: cri::ListImagesRequest) -> Result<cri::ListImagesResponse, Status> {
    let filter = spec_image(req.filter.and_then(|f| f.image));
    let groups = blocking(&rt.images, move |store| {
        if filter.is_empty() {
            return store.list_by_content();
        }
        let group = store.resolve_content(&filter)?;
        Ok(if group.is_empty() { vec![] } else { vec![group] })
    })
    .await?;
    Ok(cri::ListImagesResponse { images: groups.iter().map(|g| group_to_cri(g)).collect() })
}

pub(crate) async fn image_status(
    rt: &Runtime,
    req: cri::ImageStatusRequest,
) -> Result<cri::ImageStatusResponse, Status> {
    let name = spec_image(req.image);
    let verbose = req.verbose;
    let found = blocking(&rt.images, move |store| {
        let group = store.resolve_content(&name)?;
        let tree_id = group.first().map(|i| store.tree_id(i).unwrap_or_default()).unwrap_or_default();
        Ok((group, tree_id))
    })
    .await?;
    let (group, tree_id) = found;
    let Some(image) = group.first() else {
        // CRI: an image that is not present is an empty answer, not an error
        return Ok(cri::ImageStatusResponse::default());
    };
    let mut info = HashMap::new();
    if verbose {
        let v = serde_json::json!({
            "id": image.id,
            "keys": group.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            "treeStoreID": tree_id,
            "importTime": image.import_time,
            "lastUsed": image.last_used,
            "manifest": image.manifest,
        });
        info.insert("info".to_string(), v.to_string());
    }
    Ok(cri::ImageStatusResponse { image: Some(group_to_cri(&group)), info })
}

pub(crate) async fn remove_image(
    rt: &Runtime,
    req: cri::RemoveImageRequest,
) -> Result<cri::RemoveImageResponse, Status> {
    let name = spec_image(req.image);
    if name.is_empty() {
        return Err(Status::invalid_argument("RemoveImage: image spec is empty"));
    }
    // every image of the same content goes, from every registry (as containerd removes every reference)
    let removed = blocking(&rt.images, move |store| store.remove_content(&name)).await?;
    for id in removed {
        tracing::info!(image = %id, "image removed");
    }
    Ok(cri::RemoveImageResponse {})
}

pub(crate) async fn image_fs_info(
    rt: &Runtime,
    _req: cri::ImageFsInfoRequest,
) -> Result<cri::ImageFsInfoResponse, Status> {
    let (bytes, inodes) = blocking(&rt.images, |store| Ok(store.usage())).await?;
    let timestamp = crate::base::time::now_nanos();
    let usage = cri::FilesystemUsage {
        timestamp,
        fs_id: Some(cri::FilesystemIdentifier { mountpoint: rt.images.cas().root().display().to_string() }),
        used_bytes: Some(cri::UInt64Value { value: bytes }),
        inodes_used: Some(cri::UInt64Value { value: inodes }),
    };
    // the containers' writable layers live in the pod directories, beside the store
    let containers = tokio::task::block_in_place(|| {
        let pods = rt.data.list_pods().unwrap_or_default();
        pods.into_iter().fold((0, 0), |(b, i), (uuid, dir)| {
            let (pb, pi) = crate::stage1::app::pod_writable_usage(&rkt::pod::Pod::at(&rt.data, uuid, dir));
            (b + pb, i + pi)
        })
    });
    let container_usage = cri::FilesystemUsage {
        timestamp,
        fs_id: Some(cri::FilesystemIdentifier { mountpoint: rt.data.root().join("pods").display().to_string() }),
        used_bytes: Some(cri::UInt64Value { value: containers.0 }),
        inodes_used: Some(cri::UInt64Value { value: containers.1 }),
    };
    Ok(cri::ImageFsInfoResponse { image_filesystems: vec![usage], container_filesystems: vec![container_usage] })
}

/// The gRPC code a CRI client expects for an image error.
pub fn code_of(e: &ImageError) -> tonic::Code {
    use tonic::Code;
    match e {
        ImageError::Reference(_) | ImageError::Ambiguous(_) | ImageError::InvalidVolume(_) => Code::InvalidArgument,
        ImageError::NotFound(_) => Code::NotFound,
        ImageError::Registry(e) => match e {
            crate::image::registry::RegistryError::Unauthorized { .. } => Code::Unauthenticated,
            crate::image::registry::RegistryError::Denied { .. } => Code::PermissionDenied,
            crate::image::registry::RegistryError::NotFound { .. } => Code::NotFound,
            crate::image::registry::RegistryError::Http { .. }
            | crate::image::registry::RegistryError::Status { .. } => Code::Unavailable,
            crate::image::registry::RegistryError::Invalid(_) => Code::FailedPrecondition,
            crate::image::registry::RegistryError::Client(_) => Code::Internal,
        },
        ImageError::Verify { .. } => Code::DataLoss,
        ImageError::Network(_) => Code::Unavailable,
        ImageError::Policy(_) => Code::PermissionDenied,
        ImageError::InUse(_) => Code::FailedPrecondition,
        ImageError::Discovery(
            crate::image::discovery::DiscoveryError::InvalidName { .. }
            | crate::image::discovery::DiscoveryError::InvalidLabel { .. },
        ) => Code::InvalidArgument,
        ImageError::Discovery(crate::image::discovery::DiscoveryError::NotFound { .. }) => Code::NotFound,
        ImageError::PolicyFile(_) => Code::FailedPrecondition,
        ImageError::Unsupported(_) => Code::FailedPrecondition,
        ImageError::Extract(rkt::extract::ExtractError::Unsafe { .. }) => Code::FailedPrecondition,
        ImageError::Extract(_) | ImageError::Io { .. } | ImageError::Task(_) => Code::Internal,
    }
}

impl From<ImageError> for tonic::Status {
    fn from(e: ImageError) -> Self {
        tonic::Status::new(code_of(&e), e.to_string())
    }
}
