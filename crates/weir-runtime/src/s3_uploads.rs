//! Lists the multipart uploads in progress under a prefix of an S3 bucket (S3's
//! `ListMultipartUploads`, which `object_store` does not offer), so that a sink can abort
//! uploads an earlier attempt started and no checkpoint recorded — including one started
//! just before a crash, before anything could remember it.
//!
//! Requests are signed with `object_store`'s own SigV4 signer and credentials and sent
//! with its HTTP client, so they go where the store goes, with the same settings.

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, AwsAuthorizer};
use object_store::client::{ClientOptions, HttpClient, HttpConnector, HttpRequestBody};
use object_store::path::Path;
use weir_common::{Error, Result};

/// An upload in progress: its object key and upload id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub key: Path,
    pub upload_id: String,
}

/// Lists the uploads in progress of one bucket.
pub struct UploadLister {
    client: HttpClient,
    store: AmazonS3,
    region: String,
    /// `https://host/bucket` (path style) or `https://bucket.host` (virtual hosted).
    bucket_url: String,
}

impl std::fmt::Debug for UploadLister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UploadLister({})", self.bucket_url)
    }
}

impl UploadLister {
    /// For the store `builder` built (the builder still holds its settings).
    pub(crate) fn new(builder: &AmazonS3Builder, store: AmazonS3, bucket: &str) -> Result<Self> {
        let region = builder
            .get_config_value(&AmazonS3ConfigKey::Region)
            .unwrap_or_else(|| "us-east-1".into());
        let virtual_hosted = builder
            .get_config_value(&AmazonS3ConfigKey::VirtualHostedStyleRequest)
            .is_some_and(|v| v == "true");
        let bucket_url = match builder.get_config_value(&AmazonS3ConfigKey::Endpoint) {
            Some(endpoint) if virtual_hosted => endpoint.trim_end_matches('/').to_string(),
            Some(endpoint) => format!("{}/{bucket}", endpoint.trim_end_matches('/')),
            None => format!("https://{bucket}.s3.{region}.amazonaws.com"),
        };
        let mut options = ClientOptions::new();
        if bucket_url.starts_with("http://") {
            options = options.with_allow_http(true);
        }
        let client = object_store::client::ReqwestConnector::default().connect(&options)?;
        Ok(Self {
            client,
            store,
            region,
            bucket_url,
        })
    }

    /// Every upload in progress whose key starts with `prefix`.
    pub async fn list(&self, prefix: &Path) -> Result<Vec<Upload>> {
        let mut uploads = Vec::new();
        let mut markers: Option<(String, String)> = None;
        let prefix = if prefix.as_ref().is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        loop {
            let mut url = url::Url::parse(&format!("{}/", self.bucket_url))
                .map_err(|e| Error::internal(format!("S3 URL '{}': {e}", self.bucket_url)))?;
            {
                let mut q = url.query_pairs_mut();
                q.append_pair("prefix", &prefix);
                q.append_pair("uploads", "");
                if let Some((key, id)) = &markers {
                    q.append_pair("key-marker", key);
                    q.append_pair("upload-id-marker", id);
                }
            }
            let mut request = http::Request::builder()
                .method("GET")
                .uri(url.as_str())
                .body(HttpRequestBody::empty())
                .map_err(|e| Error::internal(format!("S3 request: {e}")))?;
            let credential = self.store.credentials().get_credential().await?;
            AwsAuthorizer::new(&credential, "s3", &self.region).authorize(&mut request, None);
            let response = self
                .client
                .execute(request)
                .await
                .map_err(|e| Error::external(format!("cannot list uploads: {e}")))?;
            let status = response.status();
            let body = response
                .into_body()
                .bytes()
                .await
                .map_err(|e| Error::external(format!("cannot list uploads: {e}")))?;
            let text = String::from_utf8_lossy(&body);
            if !status.is_success() {
                return Err(Error::external(format!(
                    "cannot list uploads under '{}/{prefix}': {status}: {text}",
                    self.bucket_url
                )));
            }
            for upload in elements(&text, "Upload") {
                if let (Some(key), Some(upload_id)) =
                    (element(upload, "Key"), element(upload, "UploadId"))
                {
                    uploads.push(Upload {
                        key: Path::from(key.as_str()),
                        upload_id,
                    });
                }
            }
            let truncated = element(&text, "IsTruncated").is_some_and(|t| t == "true");
            match (
                truncated,
                element(&text, "NextKeyMarker"),
                element(&text, "NextUploadIdMarker"),
            ) {
                (true, Some(k), Some(u)) => markers = Some((k, u)),
                _ => return Ok(uploads),
            }
        }
    }
}

/// The contents of every `<tag>…</tag>` in `xml`.
fn elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let body = &rest[start + open.len()..];
        let Some(end) = body.find(&close) else { break };
        out.push(&body[..end]);
        rest = &body[end + close.len()..];
    }
    out
}

/// The text of the first `<tag>…</tag>` in `xml`, with XML's entities decoded.
fn element(xml: &str, tag: &str) -> Option<String> {
    elements(xml, tag).first().map(|t| {
        t.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_uploads_from_a_list_response() {
        let xml = "<ListMultipartUploadsResult><Bucket>b</Bucket><IsTruncated>false</IsTruncated>\
            <Upload><Key>out/part-a&amp;b.json</Key><UploadId>u1</UploadId></Upload>\
            <Upload><Key>out/x</Key><UploadId>u2</UploadId></Upload></ListMultipartUploadsResult>";
        let uploads: Vec<_> = elements(xml, "Upload")
            .into_iter()
            .map(|u| (element(u, "Key").unwrap(), element(u, "UploadId").unwrap()))
            .collect();
        assert_eq!(
            uploads,
            [
                ("out/part-a&b.json".to_string(), "u1".to_string()),
                ("out/x".to_string(), "u2".to_string())
            ]
        );
        assert_eq!(element(xml, "IsTruncated").as_deref(), Some("false"));
    }
}
