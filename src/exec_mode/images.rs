//! Images the exec way: `fetch`, and `image list` plus one `image
//! cat-manifest` per image for every list or status.

use super::ExecMode;
use crate::api_v1::ImageInfo;
use crate::cri::image::to_cri;
use crate::image::Image;
use crate::image::reference::Reference;
use crate::pod::manifest::ImageManifest;
use crate::proto::v1 as cri;
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

/// The image `name` (id, id prefix, tag or digest) among all images.
async fn find(x: &ExecMode, name: &str) -> Result<Option<Image>, Status> {
    let normalized = name.parse::<Reference>().map(|r| r.to_string()).unwrap_or_else(|_| name.to_string());
    Ok(all(x)
        .await?
        .into_iter()
        .find(|i| i.id.starts_with(name) || i.tags.contains(&normalized) || i.digests.contains(&normalized)))
}

pub async fn pull_image(x: &ExecMode, req: cri::PullImageRequest) -> Result<cri::PullImageResponse, Status> {
    let name = spec_image(req.image);
    if name.is_empty() {
        return Err(Status::invalid_argument("PullImage: image spec is empty"));
    }
    let out = x.run(&["fetch", &format!("docker://{name}")]).await?;
    let image_ref = out.lines().last().unwrap_or_default().trim().to_string();
    Ok(cri::PullImageResponse { image_ref })
}

pub async fn list_images(x: &ExecMode, req: cri::ListImagesRequest) -> Result<cri::ListImagesResponse, Status> {
    let filter = spec_image(req.filter.and_then(|f| f.image));
    let images = if filter.is_empty() { all(x).await? } else { find(x, &filter).await?.into_iter().collect() };
    Ok(cri::ListImagesResponse { images: images.iter().map(to_cri).collect() })
}

pub async fn image_status(x: &ExecMode, req: cri::ImageStatusRequest) -> Result<cri::ImageStatusResponse, Status> {
    let name = spec_image(req.image);
    let image = find(x, &name).await?;
    Ok(cri::ImageStatusResponse { image: image.as_ref().map(to_cri), ..Default::default() })
}

pub async fn remove_image(x: &ExecMode, req: cri::RemoveImageRequest) -> Result<cri::RemoveImageResponse, Status> {
    let name = spec_image(req.image);
    if name.is_empty() {
        return Err(Status::invalid_argument("RemoveImage: image spec is empty"));
    }
    if let Some(image) = find(x, &name).await? {
        x.run(&["image", "rm", &image.id]).await?;
    }
    Ok(cri::RemoveImageResponse {})
}
