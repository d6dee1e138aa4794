//! File operations of the companion client: listing, metadata, moving,
//! searching, archives and watches. Transfers (uploads and downloads,
//! resumable and streamed) are in the `transfer` module, on the same [`Client`].

use std::sync::Arc;

use abx_wire::api::files::{
    ArchiveResponse, DeleteResponse, FileEntry, FileInfo, ListResponse, MkdirResponse, MoveResponse, SearchRequest,
    SearchResponse, WatchEvent,
};
use abx_wire::codec::base64;
use futures_util::{Stream, StreamExt, TryStreamExt};

use super::{sse, Client, ClientError};

/// Uploads larger than this stream to `PUT /files/content` (resumable);
/// smaller ones use the reference's JSON endpoint.
///
/// ```
/// assert_eq!(abx_client::files::STREAMING_THRESHOLD, 1 << 20);
/// ```
pub const STREAMING_THRESHOLD: u64 = 1024 * 1024;

/// Times a broken resumable upload is continued before giving up.
///
/// ```
/// assert!(abx_client::files::RESUME_ATTEMPTS >= 1);
/// ```
pub const RESUME_ATTEMPTS: u32 = 5;

/// Called with the bytes transferred so far.
///
/// ```
/// use std::sync::Arc;
/// use abx_client::files::ProgressFn;
///
/// let progress: ProgressFn = Arc::new(|sent| eprintln!("{sent} bytes sent"));
/// progress(1024);
/// ```
pub type ProgressFn = Arc<dyn Fn(u64) + Send + Sync>;

impl Client {
    /// `GET /files/list`: a directory's entries (its subdirectories' too when `recursive`).
    ///
    /// # Errors
    /// Transport errors and error answers (404 for a missing directory).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// for entry in client.list("project", true, Some(500)).await? {
    ///     println!("{} {} {}", entry.kind, entry.size, entry.path);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(
        &self,
        path: &str,
        recursive: bool,
        max_entries: Option<u64>,
    ) -> Result<Vec<FileEntry>, ClientError> {
        let mut query = vec![("path", path.to_string()), ("recursive", recursive.to_string())];
        if let Some(max) = max_entries {
            query.push(("max_entries", max.to_string()));
        }
        let answer: ListResponse = self.call("files_list", &[], &query, None::<&()>).await?;
        Ok(answer.entries)
    }

    /// `GET /files/stat`: a path's metadata (`exists: false` for a missing path).
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let info = client.stat("project/Cargo.toml").await?;
    /// if info.exists {
    ///     println!("{} bytes", info.size);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn stat(&self, path: &str) -> Result<FileInfo, ClientError> {
        self.call("files_stat", &[], &[("path", path.to_string())], None::<&()>).await
    }

    /// Whether `path` exists (policy denials are errors, never `false`).
    ///
    /// # Errors
    /// As [`Client::stat`].
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// if !client.exists("project").await? {
    ///     client.mkdir("project").await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn exists(&self, path: &str) -> Result<bool, ClientError> {
        Ok(self.stat(path).await?.exists)
    }

    /// `POST /files/mkdir`: a directory and its missing parents.
    ///
    /// # Errors
    /// Transport errors and error answers (409 `not_a_directory` when a file is in the way).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let made = client.mkdir("project/src").await?;
    /// println!("{}", made.path);
    /// # Ok(()) }
    /// ```
    pub async fn mkdir(&self, path: &str) -> Result<MkdirResponse, ClientError> {
        self.call("files_mkdir", &[], &[], Some(&serde_json::json!({ "path": path }))).await
    }

    /// `DELETE /files`: a file, or a directory and everything in it.
    ///
    /// # Errors
    /// Transport errors and error answers (404 for a missing path).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// client.delete("project/target").await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self, path: &str) -> Result<DeleteResponse, ClientError> {
        self.call("files_delete", &[], &[("path", path.to_string())], None::<&()>).await
    }

    /// `POST /files/move`: moves or renames (into `destination` when it is a directory).
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let moved = client.rename("report.tmp", "report.txt").await?;
    /// println!("now at {}", moved.destination);
    /// # Ok(()) }
    /// ```
    pub async fn rename(&self, source: &str, destination: &str) -> Result<MoveResponse, ClientError> {
        let body = serde_json::json!({ "source": source, "destination": destination });
        self.call("files_move", &[], &[], Some(&body)).await
    }

    /// `POST /files/search`: files by name glob, optionally by content (a regular expression).
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// use abx_wire::api::files::SearchRequest;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let request = SearchRequest {
    ///     path: Some("project".into()),
    ///     pattern: Some("*.rs".into()),
    ///     content: Some("TODO".into()),
    ///     ..Default::default()
    /// };
    /// for hit in client.search(&request).await?.results {
    ///     println!("{}", hit.path);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn search(&self, request: &SearchRequest) -> Result<SearchResponse, ClientError> {
        self.call("files_search", &[], &[], Some(request)).await
    }

    /// `POST /files/archive`: `paths` packed as `tar.gz` or `zip`; the archive's bytes.
    ///
    /// # Errors
    /// Transport errors, error answers, and an invalid body.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let bytes = client.archive(&["project/out".to_string()], "tar.gz").await?;
    /// std::fs::write("out.tar.gz", bytes).expect("written");
    /// # Ok(()) }
    /// ```
    pub async fn archive(&self, paths: &[String], format: &str) -> Result<Vec<u8>, ClientError> {
        let body = serde_json::json!({ "paths": paths, "format": format });
        let answer: ArchiveResponse = self.call("files_archive", &[], &[], Some(&body)).await?;
        base64::decode(answer.content_base64).map_err(|e| ClientError::Protocol(format!("invalid base64: {e}")))
    }

    /// `GET /files/watch`: change events as they happen, until the watch
    /// ends (after `timeout` seconds at most) or the stream is dropped,
    /// which ends the server's watch.
    ///
    /// # Errors
    /// Transport errors and error answers (before the first event).
    ///
    /// ```no_run
    /// use futures_util::StreamExt;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let mut events = client.watch("project", true, Some(60.0)).await?;
    /// while let Some(event) = events.next().await {
    ///     let event = event?;
    ///     println!("{} {}", event.kind, event.path);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn watch(
        &self,
        path: &str,
        recursive: bool,
        timeout: Option<f64>,
    ) -> Result<impl Stream<Item = Result<WatchEvent, ClientError>> + Send + Unpin + use<>, ClientError> {
        let mut query = vec![("path", path.to_string()), ("recursive", recursive.to_string())];
        if let Some(timeout) = timeout {
            query.push(("timeout", timeout.to_string()));
        }
        let response = self.open("files_watch", &[], &query, None).await?;
        let events = sse::events(response).filter_map(|item| async move {
            match item {
                Ok(event) if event.event == "change" => Some(
                    serde_json::from_str::<WatchEvent>(&event.data).map_err(|e| ClientError::Protocol(e.to_string())),
                ),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            }
        });
        Ok(self.transport.until_deadline(events))
    }

    /// The events of a watch of `seconds`.
    ///
    /// # Errors
    /// As [`Client::watch`].
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let events = client.watch_for("project", 5.0, true).await?;
    /// println!("{} changes in 5 s", events.len());
    /// # Ok(()) }
    /// ```
    pub async fn watch_for(&self, path: &str, seconds: f64, recursive: bool) -> Result<Vec<WatchEvent>, ClientError> {
        let stream = self.watch(path, recursive, Some(seconds)).await?;
        stream.try_collect().await
    }
}
