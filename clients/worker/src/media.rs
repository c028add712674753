//! Reading a row's media: the bytes behind a reference, checked against
//! the SHA-256 the row was enrolled with (`tally_core::media`).
//!
//! Where a file may come from is the worker's configuration, never the
//! row's: a path (or `file://`) only under `--media-root` (resolved, so
//! neither `..` nor a symbolic link leads out of it), `https://` only from
//! a host of `--media-allow-host` (no redirects followed), `gs://` and
//! `s3://` only from a bucket of `--media-allow-bucket`, through the object
//! store client with the environment's credentials
//! (`GOOGLE_APPLICATION_CREDENTIALS`, `AWS_*`). A file larger than
//! `--media-max-bytes` is not read. A failure never says the hash of bytes
//! the row did not enroll (a row must not learn what a file it may not
//! name holds).
//!
//! A failure is permanent when no retry reads another file (missing, out of
//! the root, too large, other bytes than enrolled), the worker's own when its
//! flags keep it from the file (no `--media-root`, a host or bucket not
//! allowed: the
//! row goes back and the worker stops), and transient otherwise (a network
//! error, a 5xx of the store).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt as _};
use sha2::Digest as _;
use tally_core::media::MediaRef;

/// Why a reference could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaFail {
    /// No retry will read it: the message names the file.
    #[error("{0}")]
    Permanent(String),
    /// It may read next time.
    #[error("{0}")]
    Transient(String),
    /// This worker is not set up to read it (no `--media-root`, a host
    /// not in `--media-allow-host`, a bucket not in `--media-allow-bucket`):
    /// the row is not at fault, the worker's flags are.
    #[error("{0}")]
    NotHere(String),
}

/// Where media may be read from.
#[derive(Debug, Clone, Default)]
pub struct MediaPlaces {
    pub root: Option<PathBuf>,
    pub allowed_hosts: Vec<String>,
    /// `gs://bucket` and `s3://bucket` whose objects may be read.
    pub allowed_buckets: Vec<String>,
    pub max_bytes: u64,
}

/// Reads media from the places its configuration allows.
pub struct MediaReader {
    places: MediaPlaces,
    /// The root, resolved once.
    root: Option<PathBuf>,
    http: reqwest::Client,
    stores: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
}

impl MediaReader {
    pub fn new(places: MediaPlaces, timeout: Duration) -> Result<Self, String> {
        let root = match &places.root {
            None => None,
            Some(r) => Some(
                std::fs::canonicalize(r)
                    .map_err(|e| format!("--media-root {}: {e}", r.display()))?,
            ),
        };
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("media http client: {e}"))?;
        Ok(Self {
            places,
            root,
            http,
            stores: Mutex::new(HashMap::new()),
        })
    }

    /// The bytes of `r`, checked against its SHA-256.
    pub async fn read(&self, r: &MediaRef) -> Result<Bytes, MediaFail> {
        let bytes = match r.uri.split_once("://") {
            Some(("https", _)) => self.https(&r.uri).await?,
            Some((scheme @ ("gs" | "s3"), rest)) => self.object(scheme, rest, &r.uri).await?,
            Some(("file", path)) => self.local(path, &r.uri).await?,
            Some((scheme, _)) => {
                return Err(MediaFail::Permanent(format!(
                    "{}: the {scheme} scheme is not read by this worker",
                    r.uri
                )));
            }
            None => self.local(&r.uri, &r.uri).await?,
        };
        let got = hex::encode(sha2::Sha256::digest(&bytes));
        if got != r.sha256 {
            return Err(MediaFail::Permanent(format!(
                "{}: the file changed since the row was enrolled (its bytes are not those of sha256 {})",
                r.uri, r.sha256
            )));
        }
        Ok(bytes)
    }

    fn too_large(&self, uri: &str, size: u64) -> MediaFail {
        MediaFail::Permanent(format!(
            "{uri}: {size} bytes, more than this worker reads (--media-max-bytes {})",
            self.places.max_bytes
        ))
    }

    async fn local(&self, path: &str, uri: &str) -> Result<Bytes, MediaFail> {
        let Some(root) = &self.root else {
            return Err(MediaFail::NotHere(format!(
                "{uri}: a local file, and this worker has no --media-root"
            )));
        };
        let joined = root.join(Path::new(path.trim_start_matches('/')));
        let joined = if Path::new(path).is_absolute() {
            PathBuf::from(path)
        } else {
            joined
        };
        let resolved = match tokio::fs::canonicalize(&joined).await {
            Ok(p) => p,
            Err(e) => return Err(self.root_fail(root, uri, &e).await),
        };
        if !resolved.starts_with(root) {
            return Err(MediaFail::Permanent(format!(
                "{uri}: outside --media-root {}",
                root.display()
            )));
        }
        let meta = match tokio::fs::metadata(&resolved).await {
            Ok(m) => m,
            Err(e) => return Err(self.root_fail(root, uri, &e).await),
        };
        if !meta.is_file() {
            return Err(MediaFail::Permanent(format!("{uri}: not a file")));
        }
        if meta.len() > self.places.max_bytes {
            return Err(self.too_large(uri, meta.len()));
        }
        match tokio::fs::read(&resolved).await {
            Ok(b) => Ok(Bytes::from(b)),
            Err(e) => Err(self.root_fail(root, uri, &e).await),
        }
    }

    /// Why a file under `root` could not be read: when the root itself
    /// cannot be read (removed, unmounted, its permissions changed since
    /// the worker started) every row would fail the same way for the
    /// worker's reason, so it is NotHere (the rows go back, the worker
    /// stops naming the flag); otherwise the file's own failure.
    async fn root_fail(&self, root: &Path, uri: &str, e: &std::io::Error) -> MediaFail {
        if let Err(why) = tokio::fs::read_dir(root).await {
            return MediaFail::NotHere(format!(
                "{uri}: --media-root {} cannot be read ({why}): fix the flag or the directory",
                root.display()
            ));
        }
        io_fail(uri, e)
    }

    async fn https(&self, uri: &str) -> Result<Bytes, MediaFail> {
        let host = url::Url::parse(uri)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
            .ok_or_else(|| MediaFail::Permanent(format!("{uri}: not a URL")))?;
        if !self.places.allowed_hosts.iter().any(|h| h == &host) {
            return Err(MediaFail::NotHere(format!(
                "{uri}: host {host} is not in --media-allow-host"
            )));
        }
        let mut resp = self
            .http
            .get(uri)
            .send()
            .await
            .map_err(|e| MediaFail::Transient(format!("{uri}: {}", e.without_url())))?;
        let status = resp.status().as_u16();
        match status {
            200..=299 => {}
            408 | 429 | 500..=599 => {
                return Err(MediaFail::Transient(format!("{uri}: answered {status}")));
            }
            _ => return Err(MediaFail::Permanent(format!("{uri}: answered {status}"))),
        }
        if let Some(len) = resp.content_length()
            && len > self.places.max_bytes
        {
            return Err(self.too_large(uri, len));
        }
        let mut out = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| MediaFail::Transient(format!("{uri}: {}", e.without_url())))?
        {
            out.extend_from_slice(&chunk);
            if out.len() as u64 > self.places.max_bytes {
                return Err(self.too_large(uri, out.len() as u64));
            }
        }
        Ok(Bytes::from(out))
    }

    async fn object(&self, scheme: &str, rest: &str, uri: &str) -> Result<Bytes, MediaFail> {
        let (bucket, key) = rest
            .split_once('/')
            .filter(|(b, k)| !b.is_empty() && !k.is_empty())
            .ok_or_else(|| MediaFail::Permanent(format!("{uri}: needs {scheme}://bucket/key")))?;
        let id = format!("{scheme}://{bucket}");
        if !self.places.allowed_buckets.iter().any(|b| b == &id) {
            return Err(MediaFail::NotHere(format!(
                "{uri}: bucket {id} is not in --media-allow-bucket"
            )));
        }
        let store = self.store(scheme, bucket)?;
        let path = object_store::path::Path::from(key);
        let got = store.get(&path).await.map_err(|e| object_fail(uri, e))?;
        if got.meta.size > self.places.max_bytes {
            return Err(self.too_large(uri, got.meta.size));
        }
        got.bytes().await.map_err(|e| object_fail(uri, e))
    }

    /// The client of one bucket, made once from the environment.
    fn store(&self, scheme: &str, bucket: &str) -> Result<Arc<dyn ObjectStore>, MediaFail> {
        let id = format!("{scheme}://{bucket}");
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = stores.get(&id) {
            return Ok(Arc::clone(s));
        }
        let built: Result<Arc<dyn ObjectStore>, object_store::Error> = match scheme {
            "gs" => object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket)
                .build()
                .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
            _ => object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .build()
                .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
        };
        let store = built.map_err(|e| {
            MediaFail::Transient(format!("{id}: the object store cannot be reached: {e}"))
        })?;
        stores.insert(id, Arc::clone(&store));
        Ok(store)
    }
}

fn io_fail(uri: &str, e: &std::io::Error) -> MediaFail {
    use std::io::ErrorKind::{IsADirectory, NotADirectory, NotFound, PermissionDenied};
    match e.kind() {
        NotFound | PermissionDenied | IsADirectory | NotADirectory => {
            MediaFail::Permanent(format!("{uri}: {e}"))
        }
        _ => MediaFail::Transient(format!("{uri}: {e}")),
    }
}

fn object_fail(uri: &str, e: object_store::Error) -> MediaFail {
    match e {
        object_store::Error::NotFound { .. } | object_store::Error::PermissionDenied { .. } => {
            MediaFail::Permanent(format!("{uri}: {e}"))
        }
        other => MediaFail::Transient(format!("{uri}: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(uri: &str, bytes: &[u8]) -> MediaRef {
        MediaRef {
            uri: uri.into(),
            sha256: hex::encode(sha2::Sha256::digest(bytes)),
            mime_type: "image/png".into(),
        }
    }

    fn reader(root: Option<&Path>, max: u64) -> MediaReader {
        MediaReader::new(
            MediaPlaces {
                root: root.map(Path::to_path_buf),
                allowed_hosts: vec!["media.example".into()],
                allowed_buckets: vec!["gs://pages".into()],
                max_bytes: max,
            },
            Duration::from_secs(5),
        )
        .unwrap()
    }

    // Invariants: a file under the root is read when its bytes are the
    // enrolled ones; other bytes, a missing file, a path out of the root
    // (by `..`, by an absolute path, by a symbolic link), a file over the
    // size bound are permanent, each naming the file; no root at all and
    // a host or bucket not allowed are the worker's settings, naming the
    // flag; no failure says the hash of the bytes it read.
    #[tokio::test]
    async fn only_the_enrolled_bytes_from_allowed_places_are_read() {
        let dir = std::env::temp_dir().join(format!("tally-media-{}", std::process::id()));
        let root = dir.join("root");
        std::fs::create_dir_all(root.join("book")).unwrap();
        std::fs::write(root.join("book/p1.png"), b"page one").unwrap();
        std::fs::write(dir.join("secret.png"), b"secret").unwrap();
        #[cfg(unix)]
        let _ = std::os::unix::fs::symlink(dir.join("secret.png"), root.join("link.png"));
        let r = reader(Some(&root), 100);

        let ok = r
            .read(&reference("book/p1.png", b"page one"))
            .await
            .unwrap();
        assert_eq!(&ok[..], b"page one");
        let abs = root.join("book/p1.png").display().to_string();
        assert!(
            r.read(&reference(&format!("file://{abs}"), b"page one"))
                .await
                .is_ok()
        );

        let permanent = |got: Result<Bytes, MediaFail>, says: &str| match got {
            Err(MediaFail::Permanent(m)) => assert!(m.contains(says), "{m}"),
            other => panic!("expected a permanent failure naming {says:?}, got {other:?}"),
        };
        permanent(
            r.read(&reference("book/p1.png", b"other bytes")).await,
            "changed since",
        );
        let read_hash = hex::encode(sha2::Sha256::digest(b"page one"));
        match r.read(&reference("book/p1.png", b"other bytes")).await {
            Err(MediaFail::Permanent(m)) => assert!(!m.contains(&read_hash), "{m}"),
            other => panic!("expected a permanent failure, got {other:?}"),
        }
        permanent(
            r.read(&reference("book/missing.png", b"x")).await,
            "book/missing.png",
        );
        permanent(
            r.read(&reference("../secret.png", b"secret")).await,
            "outside --media-root",
        );
        let outside = dir.join("secret.png").display().to_string();
        permanent(
            r.read(&reference(&outside, b"secret")).await,
            "outside --media-root",
        );
        #[cfg(unix)]
        permanent(
            r.read(&reference("link.png", b"secret")).await,
            "outside --media-root",
        );
        let small = reader(Some(&root), 4);
        permanent(
            small.read(&reference("book/p1.png", b"page one")).await,
            "--media-max-bytes",
        );
        // The worker's flags, not the row: not this worker's to read.
        let not_here = |got: Result<Bytes, MediaFail>, says: &str| match got {
            Err(MediaFail::NotHere(m)) => assert!(m.contains(says), "{m}"),
            other => panic!("expected a settings failure naming {says:?}, got {other:?}"),
        };
        let rootless = reader(None, 100);
        not_here(
            rootless.read(&reference("book/p1.png", b"page one")).await,
            "--media-root",
        );
        not_here(
            r.read(&reference("https://elsewhere.example/p.png", b"x"))
                .await,
            "--media-allow-host",
        );
        not_here(
            r.read(&reference("gs://other-team/p.png", b"x")).await,
            "--media-allow-bucket",
        );
        not_here(
            r.read(&reference("s3://pages/p.png", b"x")).await,
            "--media-allow-bucket",
        );
        // A root that goes away while the worker runs (unmounted, removed)
        // is the worker's problem, not each row's.
        std::fs::remove_dir_all(&dir).unwrap();
        not_here(
            r.read(&reference("book/p1.png", b"page one")).await,
            "cannot be read",
        );
    }
}
