//! File operations of the companion client.
//!
//! Small uploads (up to [`STREAMING_THRESHOLD`]) use the reference's JSON
//! endpoint; larger ones stream the raw bytes to `PUT /files/content` as a
//! resumable upload that continues where it stopped when the connection
//! breaks. Downloads always stream from `GET /files/content`, so no file is
//! ever held whole in memory except by the `download`/`read_text` helpers
//! that return it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use super::{decode, sse, Client, ClientError};
use crate::api::files::{
    ArchiveResponse, DeleteResponse, FileEntry, FileInfo, ListResponse, MkdirResponse, MoveResponse, SearchRequest,
    SearchResponse, TransferResponse, UploadCancelled, UploadRequest, UploadStatus, WatchEvent,
};
use crate::fs::b64::BASE64;

/// Uploads larger than this stream to `PUT /files/content`.
pub const STREAMING_THRESHOLD: u64 = 1024 * 1024;
/// Times a broken resumable upload is continued before giving up.
pub const RESUME_ATTEMPTS: u32 = 5;

/// Called with the bytes transferred so far.
pub type ProgressFn = Arc<dyn Fn(u64) + Send + Sync>;

impl Client {
    /// `GET /files/list`.
    ///
    /// # Errors
    /// Transport errors and error answers (404 for a missing directory).
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

    /// `GET /files/stat` (`exists: false` for a missing path).
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn stat(&self, path: &str) -> Result<FileInfo, ClientError> {
        self.call("files_stat", &[], &[("path", path.to_string())], None::<&()>).await
    }

    /// Whether `path` exists (policy denials are errors, never `false`).
    ///
    /// # Errors
    /// As [`Client::stat`].
    pub async fn exists(&self, path: &str) -> Result<bool, ClientError> {
        Ok(self.stat(path).await?.exists)
    }

    /// `POST /files/mkdir`.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn mkdir(&self, path: &str) -> Result<MkdirResponse, ClientError> {
        self.call("files_mkdir", &[], &[], Some(&serde_json::json!({ "path": path }))).await
    }

    /// `DELETE /files`.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn delete(&self, path: &str) -> Result<DeleteResponse, ClientError> {
        self.call("files_delete", &[], &[("path", path.to_string())], None::<&()>).await
    }

    /// `POST /files/move`.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn rename(&self, source: &str, destination: &str) -> Result<MoveResponse, ClientError> {
        let body = serde_json::json!({ "source": source, "destination": destination });
        self.call("files_move", &[], &[], Some(&body)).await
    }

    /// `POST /files/search`.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn search(&self, request: &SearchRequest) -> Result<SearchResponse, ClientError> {
        self.call("files_search", &[], &[], Some(request)).await
    }

    /// Writes `data` to `path` (JSON up to [`STREAMING_THRESHOLD`], streamed above).
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn upload(&self, path: &str, data: Bytes) -> Result<TransferResponse, ClientError> {
        if data.len() as u64 <= STREAMING_THRESHOLD {
            let body = UploadRequest { path: path.to_string(), content_base64: BASE64.encode(&data) };
            return self.call("files_upload_stream", &[], &[], Some(&body)).await;
        }
        let len = data.len() as u64;
        let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(data) });
        self.put_content(path, &[], len, reqwest::Body::wrap_stream(stream)).await.and_then(finished)
    }

    /// Uploads the local file `local` to `remote`, resuming after broken
    /// connections; `progress` hears the bytes sent so far.
    ///
    /// # Errors
    /// Local I/O errors, transport errors that persist, and error answers.
    pub async fn upload_file(
        &self,
        local: &Path,
        remote: &str,
        progress: Option<ProgressFn>,
    ) -> Result<TransferResponse, ClientError> {
        let io = |e: std::io::Error| ClientError::Protocol(format!("cannot read {}: {e}", local.display()));
        let size = tokio::fs::metadata(local).await.map_err(io)?.len();
        if size <= STREAMING_THRESHOLD {
            let data = tokio::fs::read(local).await.map_err(io)?;
            let answer = self.upload(remote, Bytes::from(data)).await?;
            if let Some(report) = &progress {
                report(size);
            }
            return Ok(answer);
        }
        let mut offset = 0u64;
        let mut attempts = 0;
        loop {
            let mut file = tokio::fs::File::open(local).await.map_err(io)?;
            file.seek(std::io::SeekFrom::Start(offset)).await.map_err(io)?;
            let start = offset;
            let report = progress.clone();
            let stream =
                tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024).scan(start, move |sent, chunk| {
                    if let (Ok(bytes), Some(report)) = (&chunk, &report) {
                        *sent += bytes.len() as u64;
                        report(*sent);
                    }
                    std::future::ready(Some(chunk))
                });
            let query = [("offset", offset.to_string()), ("size", size.to_string())];
            match self.put_content(remote, &query, size - offset, reqwest::Body::wrap_stream(stream)).await {
                Ok(answer) => match finished(answer) {
                    Ok(done) => return Ok(done),
                    Err(_) if attempts < RESUME_ATTEMPTS => {}
                    Err(e) => return Err(e),
                },
                Err(ClientError::Transport(_)) if attempts < RESUME_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
            attempts += 1;
            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempts))).await;
            offset = self.upload_status(remote).await?.offset;
        }
    }

    /// `GET /files/uploads`: bytes a resumable upload holds.
    ///
    /// # Errors
    /// 404 `upload_not_found` when none is in progress.
    pub async fn upload_status(&self, path: &str) -> Result<UploadStatus, ClientError> {
        self.call("files_upload_status", &[], &[("path", path.to_string())], None::<&()>).await
    }

    /// `DELETE /files/uploads`: abandon a resumable upload.
    ///
    /// # Errors
    /// 404 `upload_not_found` when none is in progress.
    pub async fn upload_cancel(&self, path: &str) -> Result<UploadCancelled, ClientError> {
        self.call("files_upload_cancel", &[], &[("path", path.to_string())], None::<&()>).await
    }

    async fn put_content(
        &self,
        path: &str,
        extra: &[(&str, String)],
        len: u64,
        body: reqwest::Body,
    ) -> Result<PutAnswer, ClientError> {
        let mut query = vec![("path", path.to_string())];
        query.extend(extra.iter().cloned());
        let response = self
            .request("files_content_write", &[], &query)?
            .header(reqwest::header::CONTENT_LENGTH, len)
            .body(body)
            .send()
            .await
            .map_err(ClientError::Transport)?;
        if response.status() == reqwest::StatusCode::ACCEPTED {
            return decode::<UploadStatus>(response).await.map(PutAnswer::Partial);
        }
        decode::<TransferResponse>(response).await.map(PutAnswer::Done)
    }

    /// `GET /files/content` as a stream of chunks, with the file's size.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn download_stream(
        &self,
        path: &str,
    ) -> Result<(u64, impl Stream<Item = Result<Bytes, ClientError>>), ClientError> {
        let response = self
            .request("files_content_read", &[], &[("path", path.to_string())])?
            .send()
            .await
            .map_err(ClientError::Transport)?;
        if !response.status().is_success() {
            return Err(decode::<serde_json::Value>(response)
                .await
                .err()
                .unwrap_or(ClientError::Protocol("unexpected answer".into())));
        }
        let size = response.content_length().unwrap_or(0);
        Ok((size, response.bytes_stream().map_err(ClientError::Transport)))
    }

    /// The whole content of `path` (streamed from `GET /files/content`).
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn download(&self, path: &str) -> Result<Vec<u8>, ClientError> {
        let (size, mut stream) = self.download_stream(path).await?;
        let mut data = Vec::with_capacity(usize::try_from(size.min(64 << 20)).unwrap_or(0));
        while let Some(chunk) = stream.next().await {
            data.extend_from_slice(&chunk?);
        }
        Ok(data)
    }

    /// The content of `path` as UTF-8 text (invalid sequences replaced).
    ///
    /// # Errors
    /// As [`Client::download`].
    pub async fn read_text(&self, path: &str) -> Result<String, ClientError> {
        Ok(String::from_utf8_lossy(&self.download(path).await?).into_owned())
    }

    /// The base64 JSON download (`GET /files/download-stream`), decoded.
    ///
    /// # Errors
    /// Transport errors, error answers, and an invalid body.
    pub async fn download_json(&self, path: &str) -> Result<Vec<u8>, ClientError> {
        let answer: crate::api::files::DownloadResponse =
            self.call("files_download_stream", &[], &[("path", path.to_string())], None::<&()>).await?;
        BASE64.decode(answer.content_base64).map_err(|e| ClientError::Protocol(format!("invalid base64: {e}")))
    }

    /// Streams `remote` into the local file `local` (written next to it, then renamed); returns the bytes written.
    ///
    /// # Errors
    /// Local I/O errors, transport errors and error answers.
    pub async fn download_file(
        &self,
        remote: &str,
        local: &Path,
        progress: Option<ProgressFn>,
    ) -> Result<u64, ClientError> {
        let io = |e: std::io::Error| ClientError::Protocol(format!("cannot write {}: {e}", local.display()));
        let (_, mut stream) = self.download_stream(remote).await?;
        let name = local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "download".into());
        let partial = local.with_file_name(format!(".{name}.part"));
        let mut file = tokio::fs::File::create(&partial).await.map_err(io)?;
        let mut written = 0u64;
        let result = async {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk?;
                file.write_all(&chunk).await.map_err(io)?;
                written += chunk.len() as u64;
                if let Some(report) = &progress {
                    report(written);
                }
            }
            file.flush().await.map_err(io)?;
            tokio::fs::rename(&partial, local).await.map_err(io)
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&partial).await;
        }
        result.map(|()| written)
    }

    /// `POST /files/archive`: the archive's bytes.
    ///
    /// # Errors
    /// Transport errors, error answers, and an invalid body.
    pub async fn archive(&self, paths: &[String], format: &str) -> Result<Vec<u8>, ClientError> {
        let body = serde_json::json!({ "paths": paths, "format": format });
        let answer: ArchiveResponse = self.call("files_archive", &[], &[], Some(&body)).await?;
        BASE64.decode(answer.content_base64).map_err(|e| ClientError::Protocol(format!("invalid base64: {e}")))
    }

    /// `GET /files/watch`: change events until the watch ends (after `timeout` seconds at most).
    ///
    /// # Errors
    /// Transport errors and error answers (before the first event).
    pub async fn watch(
        &self,
        path: &str,
        recursive: bool,
        timeout: Option<f64>,
    ) -> Result<impl Stream<Item = Result<WatchEvent, ClientError>>, ClientError> {
        let mut query = vec![("path", path.to_string()), ("recursive", recursive.to_string())];
        if let Some(timeout) = timeout {
            query.push(("timeout", timeout.to_string()));
        }
        let response = self.request("files_watch", &[], &query)?.send().await.map_err(ClientError::Transport)?;
        if !response.status().is_success() {
            return Err(decode::<serde_json::Value>(response)
                .await
                .err()
                .unwrap_or(ClientError::Protocol("unexpected answer".into())));
        }
        Ok(sse::events(response).filter_map(|item| async move {
            match item {
                Ok(event) if event.event == "change" => Some(
                    serde_json::from_str::<WatchEvent>(&event.data).map_err(|e| ClientError::Protocol(e.to_string())),
                ),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            }
        }))
    }

    /// The events of a watch of `seconds`.
    ///
    /// # Errors
    /// As [`Client::watch`].
    pub async fn watch_for(&self, path: &str, seconds: f64, recursive: bool) -> Result<Vec<WatchEvent>, ClientError> {
        let stream = self.watch(path, recursive, Some(seconds)).await?;
        stream.try_collect().await
    }
}

enum PutAnswer {
    Done(TransferResponse),
    Partial(UploadStatus),
}

fn finished(answer: PutAnswer) -> Result<TransferResponse, ClientError> {
    match answer {
        PutAnswer::Done(done) => Ok(done),
        PutAnswer::Partial(status) => {
            Err(ClientError::Protocol(format!("the upload stopped at {} of {} bytes", status.offset, status.size)))
        }
    }
}
