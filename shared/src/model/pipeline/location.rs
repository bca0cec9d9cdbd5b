//! Where a pipeline file comes from: a local path, or `s3://bucket/dir/file.toml`. An S3 file
//! and everything beside it under `dir/` (the schema files its relative paths name, as the
//! Terraform module uploads them) is copied once per cold start into a local directory, so
//! the rest of the code reads plain files.

use std::path::{Path, PathBuf};

use crate::base::error::{Error, Result};

/// What fetching an s3:// pipeline file calls: the objects under its directory, listed with
/// that directory as the prefix (`crate::services::deployment` gathers these per function).
pub const PIPELINE_FETCH_ACTIONS: &[&str] = &["s3:GetObject"];
pub const PIPELINE_LIST_ACTIONS: &[&str] = &["s3:ListBucket"];

/// Most objects copied from beside an S3 pipeline file: a pipeline directory, not a bucket.
#[cfg(feature = "aws")]
const MAX_OBJECTS: usize = 1000;
/// Most bytes copied (schemas are small; a wrong prefix should fail, not fill /tmp).
#[cfg(feature = "aws")]
const MAX_BYTES: u64 = 64 * 1024 * 1024;

/// A local path to read the pipeline file named `name` from.
pub async fn fetch(name: &str) -> Result<PathBuf> {
    match name.strip_prefix("s3://") {
        None => Ok(PathBuf::from(name)),
        Some(rest) => {
            let (bucket, key) = rest
                .split_once('/')
                .filter(|(b, k)| !b.is_empty() && !k.is_empty() && !k.ends_with('/'))
                .ok_or_else(|| Error::Config(format!("pipelines: {name:?} is not s3://bucket/key of a file")))?;
            let dir = std::env::temp_dir().join(format!("icestream-pipelines-{}", uuid::Uuid::new_v4()));
            copy_prefix(bucket, key, &dir).await
        }
    }
}

#[cfg(not(feature = "aws"))]
async fn copy_prefix(bucket: &str, key: &str, _dir: &Path) -> Result<PathBuf> {
    Err(Error::not_built(&format!("pipelines=s3://{bucket}/{key}"), "aws"))
}

/// Copy every object under `key`'s directory into `dir`; the local path of `key`.
#[cfg(feature = "aws")]
async fn copy_prefix(bucket: &str, key: &str, dir: &Path) -> Result<PathBuf> {
    let prefix = match key.rfind('/') {
        Some(i) => &key[..=i],
        None => "",
    };
    let sdk = crate::base::aws::sdk_config().await;
    let s3 = aws_sdk_s3::Client::from_conf(crate::base::aws::s3_config(&sdk, None));
    let resource = format!("s3://{bucket}/{prefix}");
    let mut pages = s3.list_objects_v2().bucket(bucket).prefix(prefix).into_paginator().send();
    let (mut count, mut bytes, mut read) = (0usize, 0u64, 0u64);
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| crate::base::aws::error("s3:ListBucket", &resource, e))?;
        for object in page.contents() {
            let Some(object_key) = object.key() else { continue };
            let relative = &object_key[prefix.len()..];
            // Keys are names, not paths: refuse anything that would leave `dir`.
            if relative.is_empty()
                || relative.ends_with('/')
                || relative.split('/').any(|part| part.is_empty() || part == "." || part == "..")
            {
                continue;
            }
            count += 1;
            bytes += object.size().unwrap_or(0).max(0) as u64;
            if count > MAX_OBJECTS || bytes > MAX_BYTES {
                return Err(Error::Config(format!(
                    "pipelines: more than {MAX_OBJECTS} objects or {} MiB under {resource}: put the pipeline file in a directory of its own",
                    MAX_BYTES >> 20
                )));
            }
            let body = s3
                .get_object()
                .bucket(bucket)
                .key(object_key)
                .send()
                .await
                .map_err(|e| crate::base::aws::error("s3:GetObject", &format!("s3://{bucket}/{object_key}"), e))?
                .body;
            // The listing's sizes are what the objects were; the bytes read are what counts.
            let body = read_bounded(body, MAX_BYTES - read, &format!("s3://{bucket}/{object_key}"), &resource).await?;
            read += body.len() as u64;
            let local = dir.join(relative);
            if let Some(parent) = local.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&local, &body)?;
        }
    }
    let file = dir.join(&key[prefix.len()..]);
    if !file.exists() {
        return Err(Error::Config(format!("pipelines: s3://{bucket}/{key} does not exist")));
    }
    tracing::info!(pipelines = %format!("s3://{bucket}/{key}"), objects = count, bytes = read, "pipeline file fetched");
    Ok(file)
}

/// An object's body, refused once more than `budget` bytes have been read.
#[cfg(feature = "aws")]
async fn read_bounded(mut body: aws_sdk_s3::primitives::ByteStream, budget: u64, object: &str, resource: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(chunk) = body
        .try_next()
        .await
        .map_err(|e| Error::Aws { message: format!("s3:GetObject {object}: reading the body: {e}"), retryable: true })?
    {
        if (out.len() + chunk.len()) as u64 > budget {
            return Err(Error::Config(format!(
                "pipelines: more than {} MiB read under {resource} ({object} is larger than its listing said or the rest): put the pipeline file in a directory of its own",
                MAX_BYTES >> 20
            )));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

#[cfg(all(test, feature = "aws"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_is_bounded_by_the_bytes_read_not_the_listing() {
        let body = |n: usize| aws_sdk_s3::primitives::ByteStream::from(vec![b'x'; n]);
        assert_eq!(read_bounded(body(10), 10, "s3://b/d/a", "s3://b/d/").await.unwrap().len(), 10);
        let err = read_bounded(body(11), 10, "s3://b/d/a", "s3://b/d/").await.unwrap_err().to_string();
        assert!(err.contains("s3://b/d/a") && err.contains("MiB read under s3://b/d/"), "{err}");
    }
}
