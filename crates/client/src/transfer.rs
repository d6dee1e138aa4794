//! File transfers of the companion client.
//!
//! Small uploads (up to [`STREAMING_THRESHOLD`]) use the reference's JSON
//! endpoint; larger ones stream the raw bytes to `PUT /files/content` as a
//! resumable upload that continues where it stopped when the connection
//! breaks. Downloads always stream from `GET /files/content`, so no file is
//! ever held whole in memory except by the `download`/`read_text` helpers
//! that return it. [`Client::upload_dir`] sends a local tree, a few files
//! at a time over the shared pool.

use std::path::{Path, PathBuf};
use std::time::Duration;

use abx_wire::api::files::{DownloadResponse, TransferResponse, UploadCancelled, UploadRequest, UploadStatus};
use abx_wire::codec::base64;
use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use super::files::{ProgressFn, RESUME_ATTEMPTS, STREAMING_THRESHOLD};
use super::transport::{checked, decode};
use super::{Client, ClientError};

/// Files [`Client::upload_dir`] sends at once.
const DIR_UPLOAD_CONCURRENCY: usize = 8;

impl Client {
    /// Writes `data` to `path` (JSON up to [`STREAMING_THRESHOLD`], streamed above).
    ///
    /// # Errors
    /// Transport errors and error answers (409 `file_exists` when overwriting is off).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let written = client.upload("project/config.json", r#"{"debug": true}"#.into()).await?;
    /// assert_eq!(written.bytes, 15);
    /// # Ok(()) }
    /// ```
    pub async fn upload(&self, path: &str, data: Bytes) -> Result<TransferResponse, ClientError> {
        if data.len() as u64 <= STREAMING_THRESHOLD {
            let body = UploadRequest { path: path.to_string(), content_base64: base64::encode(&data) };
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
    /// [`ClientError::Local`] when `local` cannot be read, transport errors that persist, and error answers.
    ///
    /// ```no_run
    /// use std::path::Path;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let done = client.upload_file(Path::new("dataset.parquet"), "data/dataset.parquet", None).await?;
    /// println!("{} bytes at {}", done.bytes, done.path);
    /// # Ok(()) }
    /// ```
    pub async fn upload_file(
        &self,
        local: &Path,
        remote: &str,
        progress: Option<ProgressFn>,
    ) -> Result<TransferResponse, ClientError> {
        let io = |source| ClientError::Local { path: local.to_path_buf(), source };
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
            let report = progress.clone();
            let stream =
                tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024).scan(offset, move |sent, chunk| {
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

    /// Uploads every file under the local directory `local` to `remote`,
    /// keeping the tree (directories are made as needed; symlinks and
    /// special files are left out), a few files at a time; returns the
    /// uploads in no particular order.
    ///
    /// # Errors
    /// The first failure: [`ClientError::Local`] for a local directory or
    /// file that cannot be read, transport errors and error answers.
    ///
    /// ```no_run
    /// use std::path::Path;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let sent = client.upload_dir(Path::new("./my-project"), "project").await?;
    /// println!("{} files uploaded", sent.len());
    /// # Ok(()) }
    /// ```
    pub async fn upload_dir(&self, local: &Path, remote: &str) -> Result<Vec<TransferResponse>, ClientError> {
        let files = local_files(local).await?;
        let remote = remote.trim_end_matches('/');
        self.mkdir(remote).await?;
        futures_util::stream::iter(files)
            .map(|relative| async move {
                let target = format!("{remote}/{}", relative.to_string_lossy());
                self.upload_file(&local.join(&relative), &target, None).await
            })
            .buffer_unordered(DIR_UPLOAD_CONCURRENCY)
            .try_collect()
            .await
    }

    /// `GET /files/uploads`: bytes a resumable upload holds.
    ///
    /// # Errors
    /// 404 `upload_not_found` when none is in progress.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let status = client.upload_status("data/big.bin").await?;
    /// println!("{} of {} bytes received", status.offset, status.size);
    /// # Ok(()) }
    /// ```
    pub async fn upload_status(&self, path: &str) -> Result<UploadStatus, ClientError> {
        self.call("files_upload_status", &[], &[("path", path.to_string())], None::<&()>).await
    }

    /// `DELETE /files/uploads`: abandons a resumable upload.
    ///
    /// # Errors
    /// 404 `upload_not_found` when none is in progress.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// client.upload_cancel("data/big.bin").await?;
    /// # Ok(()) }
    /// ```
    pub async fn upload_cancel(&self, path: &str) -> Result<UploadCancelled, ClientError> {
        self.call("files_upload_cancel", &[], &[("path", path.to_string())], None::<&()>).await
    }

    /// One `PUT /files/content` (a body stream cannot be sent twice: not retried).
    async fn put_content(
        &self,
        path: &str,
        extra: &[(&str, String)],
        len: u64,
        body: reqwest::Body,
    ) -> Result<PutAnswer, ClientError> {
        let mut query = vec![("path", path.to_string())];
        query.extend(extra.iter().cloned());
        let request =
            self.request("files_content_write", &[], &query)?.header(reqwest::header::CONTENT_LENGTH, len).body(body);
        self.transport
            .bounded(async {
                let response = checked(request.send().await.map_err(ClientError::Transport)?).await?;
                if response.status() == reqwest::StatusCode::ACCEPTED {
                    return decode::<UploadStatus>(response).await.map(PutAnswer::Partial);
                }
                decode::<TransferResponse>(response).await.map(PutAnswer::Done)
            })
            .await
    }

    /// `GET /files/content` as a stream of chunks, with the file's size.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// use futures_util::StreamExt;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let (size, mut chunks) = client.download_stream("logs/build.log").await?;
    /// let mut seen = 0;
    /// while let Some(chunk) = chunks.next().await {
    ///     seen += chunk?.len() as u64;
    /// }
    /// assert_eq!(seen, size);
    /// # Ok(()) }
    /// ```
    pub async fn download_stream(
        &self,
        path: &str,
    ) -> Result<(u64, impl Stream<Item = Result<Bytes, ClientError>> + Send + Unpin + use<>), ClientError> {
        let response = self.open("files_content_read", &[], &[("path", path.to_string())], None).await?;
        let size = response.content_length().unwrap_or(0);
        Ok((size, self.transport.until_deadline(response.bytes_stream().map_err(ClientError::Transport))))
    }

    /// The whole content of `path` (streamed from `GET /files/content`).
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let png = client.download("out/chart.png").await?;
    /// assert!(png.starts_with(b"\x89PNG"));
    /// # Ok(()) }
    /// ```
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
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let log = client.read_text("project/test.log").await?;
    /// println!("{}", log.lines().last().unwrap_or(""));
    /// # Ok(()) }
    /// ```
    pub async fn read_text(&self, path: &str) -> Result<String, ClientError> {
        Ok(String::from_utf8_lossy(&self.download(path).await?).into_owned())
    }

    /// The base64 JSON download (`GET /files/download-stream`, the reference's), decoded.
    ///
    /// # Errors
    /// Transport errors, error answers, and an invalid body.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let bytes = client.download_json("notes.txt").await?;
    /// # let _ = bytes; Ok(()) }
    /// ```
    pub async fn download_json(&self, path: &str) -> Result<Vec<u8>, ClientError> {
        let answer: DownloadResponse =
            self.call("files_download_stream", &[], &[("path", path.to_string())], None::<&()>).await?;
        base64::decode(answer.content_base64).map_err(|e| ClientError::Protocol(format!("invalid base64: {e}")))
    }

    /// Streams `remote` into the local file `local` (written next to it,
    /// then renamed, so `local` is never half written); returns the bytes written.
    ///
    /// # Errors
    /// [`ClientError::Local`] when `local` cannot be written, transport errors and error answers.
    ///
    /// ```no_run
    /// use std::path::Path;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let written = client.download_file("out/report.pdf", Path::new("report.pdf"), None).await?;
    /// println!("{written} bytes");
    /// # Ok(()) }
    /// ```
    pub async fn download_file(
        &self,
        remote: &str,
        local: &Path,
        progress: Option<ProgressFn>,
    ) -> Result<u64, ClientError> {
        let io = |source| ClientError::Local { path: local.to_path_buf(), source };
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

/// The regular files under `root`, relative to it, walked without following symlinks.
async fn local_files(root: &Path) -> Result<Vec<PathBuf>, ClientError> {
    let mut files = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(dir) = dirs.pop() {
        let io = |source| ClientError::Local { path: root.join(&dir), source };
        let mut entries = tokio::fs::read_dir(root.join(&dir)).await.map_err(io)?;
        while let Some(entry) = entries.next_entry().await.map_err(io)? {
            let kind = entry.file_type().await.map_err(io)?;
            let relative = dir.join(entry.file_name());
            if kind.is_dir() {
                dirs.push(relative);
            } else if kind.is_file() {
                files.push(relative);
            }
        }
    }
    files.sort();
    Ok(files)
}
