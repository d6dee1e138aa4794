//! Black-box tests of the file_ops group: paths that must not escape,
//! streaming transfers with ranges and validators, resumable and atomic
//! uploads (connections cut mid-body, the server killed), archives, search
//! and inotify watches.

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use nix::sys::signal::Signal;
use serde_json::{json, Value};

use common::TestServer;

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

async fn get(server: &TestServer, path: &str) -> (u16, Value) {
    let response =
        server.http().get(server.at(path)).header("authorization", server.bearer()).send().await.expect("send");
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn send(server: &TestServer, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = server.http().request(method, server.at(path)).header("authorization", server.bearer());
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("send");
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn put(server: &TestServer, query: &str, body: Vec<u8>) -> (u16, Value) {
    let response = server
        .http()
        .put(server.at(&format!("/files/content?{query}")))
        .header("authorization", server.bearer())
        .body(body)
        .send()
        .await
        .expect("send");
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

/// Sends a PUT whose body stops after `sent` of its announced `len` bytes, then drops the connection.
fn cut_upload(server: &TestServer, query: &str, len: usize, sent: &[u8]) {
    let address = server.url.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(address).expect("connect");
    let head = format!(
        "PUT /files/content?{query} HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Length: {len}\r\n\r\n",
        server.bearer()
    );
    tcp.write_all(head.as_bytes()).expect("head");
    tcp.write_all(sent).expect("body");
    tcp.flush().expect("flush");
    tcp.shutdown(std::net::Shutdown::Both).expect("shutdown");
}

fn temp_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".abx-upload-"))
        .collect()
}

#[tokio::test]
async fn paths_never_leave_the_base_directory() {
    let server = common::start();
    std::fs::create_dir(server.base.join("d")).expect("mkdir");
    std::os::unix::fs::symlink("/etc", server.base.join("out")).expect("symlink");
    std::os::unix::fs::symlink("d", server.base.join("in")).expect("symlink");
    for path in [
        "../x",
        "/etc/passwd",
        "d/../../x",
        "..%2Fetc",
        "%2e%2e/etc",
        "d%2F..%2F..%2Fetc",
        "out/passwd",
        "out",
        "/proc/self/environ",
    ] {
        let (status, body) = get(&server, &format!("/files/stat?path={path}")).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(["path_not_allowed", "path_denied"].contains(&body["code"].as_str().expect("code")), "{path}: {body}");
        assert_eq!(body["type"], "PolicyDenied");
        assert_eq!(body["endpoint"], "files_stat");
    }
    let (status, body) = get(&server, "/files/stat?path=a%00b").await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_path")));
    let (status, body) = get(&server, &format!("/files/stat?path={}", "a".repeat(5000))).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_path")));
    let (status, body) = get(&server, "/files/stat?path=in").await;
    assert_eq!((status, body["path"].as_str()), (200, Some(server.base.join("d").to_str().expect("utf-8"))));
    let (status, body) = put(&server, "path=out/evil", b"x".to_vec()).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("path_not_allowed")));
    let (status, body) = send(&server, reqwest::Method::DELETE, "/files?path=.", None).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("path_denied")));
    let (_, listing) = get(&server, "/files/list?path=.").await;
    let names: Vec<&str> =
        listing["entries"].as_array().expect("entries").iter().map(|e| e["name"].as_str().expect("name")).collect();
    assert!(names.contains(&"in") && names.contains(&"d") && !names.contains(&"out"), "{names:?}");
}

#[tokio::test]
async fn listing_and_stat_follow_the_reference() {
    let server = common::start();
    std::fs::create_dir_all(server.base.join("d/sub/deeper")).expect("mkdir");
    std::fs::write(server.base.join("d/a.txt"), b"abc").expect("write");
    std::fs::write(server.base.join("d/sub/b.txt"), b"b").expect("write");
    let (status, body) = get(&server, "/files/list?path=missing").await;
    assert_eq!((status, body), (404, json!({"error": "Directory not found: missing", "type": "FileNotFoundError"})));
    let (status, body) = get(&server, "/files/list?path=d/a.txt").await;
    assert_eq!((status, body["type"].as_str()), (404, Some("FileNotFoundError")));
    let (status, body) = get(&server, "/files/list").await;
    assert_eq!((status, body["error"].as_str()), (400, Some("Missing 'path' query parameter")));
    let (_, body) = get(&server, "/files/list?path=d&recursive=true").await;
    let mut paths: Vec<&str> =
        body["entries"].as_array().expect("entries").iter().map(|e| e["path"].as_str().expect("path")).collect();
    paths.sort();
    let base = server.base.display().to_string();
    let expected: Vec<String> =
        ["d/a.txt", "d/sub", "d/sub/b.txt", "d/sub/deeper"].iter().map(|p| format!("{base}/{p}")).collect();
    assert_eq!(paths, expected);
    let (_, body) = get(&server, "/files/list?path=d&recursive=true&max_entries=1").await;
    assert_eq!(body["entries"].as_array().map(Vec::len), Some(1));
    let (status, info) = get(&server, "/files/stat?path=d/a.txt").await;
    assert_eq!(status, 200);
    assert_eq!(
        (info["type"].as_str(), info["size"].as_u64(), info["exists"].as_bool()),
        (Some("file"), Some(3), Some(true))
    );
    assert_eq!(info["permissions"].as_str().map(str::len), Some(3));
    assert!(info["modified"].as_str().expect("modified").ends_with("+00:00"));
    let (status, info) = get(&server, "/files/stat?path=d/nope").await;
    assert_eq!((status, info["exists"].as_bool(), info["type"].as_str()), (200, Some(false), Some("unknown")));
}

#[tokio::test]
async fn mkdir_move_and_delete() {
    let server = common::start();
    let (status, body) = send(&server, reqwest::Method::POST, "/files/mkdir", Some(json!({"path": "a/b/c"}))).await;
    assert_eq!((status, body["created"].as_bool()), (200, Some(true)));
    assert!(server.base.join("a/b/c").is_dir());
    std::fs::write(server.base.join("a/f"), b"1").expect("write");
    let (status, body) = send(&server, reqwest::Method::POST, "/files/mkdir", Some(json!({"path": "a/f/x"}))).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("not_a_directory")));
    let (status, body) = send(&server, reqwest::Method::POST, "/files/mkdir", Some(json!({"path": 5}))).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("Missing or invalid 'path'")));
    let (status, body) =
        send(&server, reqwest::Method::POST, "/files/move", Some(json!({"source": "a/f", "destination": "a/b"}))).await;
    assert_eq!((status, body["destination"].as_str()), (200, Some(server.base.join("a/b/f").to_str().expect("utf-8"))));
    let (status, body) =
        send(&server, reqwest::Method::POST, "/files/move", Some(json!({"source": "zz", "destination": "y"}))).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("Source not found: zz")));
    let (status, body) =
        send(&server, reqwest::Method::POST, "/files/move", Some(json!({"source": "a", "destination": "/tmp/x"})))
            .await;
    assert_eq!((status, body["error"].as_str()), (403, Some("destination: Path is outside the allowed directories")));
    let (status, body) =
        send(&server, reqwest::Method::POST, "/files/move", Some(json!({"source": "a", "destination": "a/b/c"}))).await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = send(&server, reqwest::Method::DELETE, "/files?path=a", None).await;
    assert_eq!(status, 200);
    assert!(!server.base.join("a").exists());
    let (status, body) = send(&server, reqwest::Method::DELETE, "/files?path=a", None).await;
    assert_eq!((status, body["type"].as_str()), (404, Some("FileNotFoundError")));
}

#[tokio::test]
async fn streaming_transfers_support_validators_and_ranges() {
    let server = common::start();
    let content = data(3 * 1024 * 1024 + 17, 7);
    let (status, body) = put(&server, "path=big/file.bin", content.clone()).await;
    assert_eq!((status, body["bytes"].as_u64()), (201, Some(content.len() as u64)), "{body}");
    let first_etag = body["etag"].as_str().expect("etag").to_string();
    assert_eq!(std::fs::read(server.base.join("big/file.bin")).expect("read"), content);
    let (status, replaced) = put(&server, "path=big/file.bin", content.clone()).await;
    assert_eq!(status, 200, "replacing answers 200");
    assert_ne!(replaced["etag"].as_str(), Some(first_etag.as_str()), "a replaced file has a new ETag");

    let http = server.http();
    let get = |range: Option<&str>| {
        let mut request =
            http.get(server.at("/files/content?path=big/file.bin")).header("authorization", server.bearer());
        if let Some(range) = range {
            request = request.header("range", range);
        }
        request.send()
    };
    let response = get(None).await.expect("get");
    assert_eq!(response.status(), 200);
    assert_eq!(response.content_length(), Some(content.len() as u64));
    let etag = response.headers()["etag"].to_str().expect("etag").to_string();
    assert_eq!(replaced["etag"].as_str(), Some(etag.as_str()));
    assert_eq!(response.bytes().await.expect("bytes").as_ref(), content.as_slice());
    let response = get(Some("bytes=100-199")).await.expect("get");
    assert_eq!(response.status(), 206);
    assert_eq!(response.headers()["content-range"], format!("bytes 100-199/{}", content.len()).as_str());
    assert_eq!(response.bytes().await.expect("bytes").as_ref(), &content[100..200]);
    let response = get(Some("bytes=-10")).await.expect("get");
    assert_eq!(response.bytes().await.expect("bytes").as_ref(), &content[content.len() - 10..]);
    let response = get(Some(&format!("bytes={}-", content.len()))).await.expect("get");
    assert_eq!(response.status(), 416);
    assert_eq!(response.headers()["content-range"], format!("bytes */{}", content.len()).as_str());
    let response = http
        .get(server.at("/files/content?path=big/file.bin"))
        .header("authorization", server.bearer())
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), 304);
    let response = http
        .head(server.at("/files/content?path=big/file.bin"))
        .header("authorization", server.bearer())
        .send()
        .await
        .expect("head");
    let length = response.headers()["content-length"].to_str().expect("length").to_string();
    assert_eq!((response.status().as_u16(), length), (200, content.len().to_string()));
    let (status, body) = put(&server, "path=empty.txt", Vec::new()).await;
    assert_eq!((status, body["bytes"].as_u64()), (201, Some(0)));
    let (status, body) = put(&server, "path=big/file.bin&overwrite=false", b"new".to_vec()).await;
    assert_eq!(
        (status, body["code"].as_str(), body["type"].as_str()),
        (409, Some("file_exists"), Some("FileExistsError"))
    );
    let (status, body) = put(&server, "path=big", b"x".to_vec()).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("is_a_directory")));
    let (status, _) = get_status(&server, "/files/content?path=nope").await;
    assert_eq!(status, 404);
}

async fn get_status(server: &TestServer, path: &str) -> (u16, Value) {
    get(server, path).await
}

#[tokio::test]
async fn json_transfers_round_trip_and_accept_empty_files() {
    let server = common::start();
    let content = data(2 * 1024 * 1024, 3);
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &content);
    let (status, body) = send(
        &server,
        reqwest::Method::POST,
        "/files/upload-stream",
        Some(json!({"path": "j/a.bin", "content_base64": encoded})),
    )
    .await;
    assert_eq!((status, body["bytes"].as_u64()), (200, Some(content.len() as u64)));
    let (status, body) = get(&server, "/files/download-stream?path=j/a.bin").await;
    assert_eq!((status, body["bytes"].as_u64()), (200, Some(content.len() as u64)));
    assert_eq!(body["content_base64"].as_str(), Some(encoded.as_str()));
    let (status, body) = send(
        &server,
        reqwest::Method::POST,
        "/files/upload-stream",
        Some(json!({"path": "j/e", "content_base64": ""})),
    )
    .await;
    assert_eq!((status, body["bytes"].as_u64()), (200, Some(0)));
    let (status, body) = send(
        &server,
        reqwest::Method::POST,
        "/files/upload-stream",
        Some(json!({"path": "j/a.bin", "content_base64": "a!=="})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        std::fs::read(server.base.join("j/a.bin")).expect("read"),
        content,
        "a failed upload leaves the file alone"
    );
    let (status, body) =
        send(&server, reqwest::Method::POST, "/files/upload-stream", Some(json!({"path": "j/x"}))).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("Missing or invalid 'content_base64'")));
}

#[tokio::test]
async fn resumable_uploads_continue_where_they_stopped() {
    let server = common::start();
    let content = data(1024 * 1024, 11);
    let size = content.len();
    cut_upload(&server, &format!("path=r/file.bin&offset=0&size={size}"), size, &content[..300_000]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let offset = loop {
        let (status, body) = get(&server, "/files/uploads?path=r/file.bin").await;
        let offset = body["offset"].as_u64().unwrap_or(0);
        if status == 200 && offset == 300_000 {
            break offset;
        }
        assert!(Instant::now() < deadline, "the server never held the bytes sent: {status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!server.base.join("r/file.bin").exists(), "nothing is in place before the last byte");
    let (status, body) = put(&server, &format!("path=r/file.bin&offset=5&size={size}"), content[5..].to_vec()).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("offset_mismatch")));
    let half = size / 2;
    let (status, body) =
        put(&server, &format!("path=r/file.bin&offset={offset}&size={size}"), content[300_000..half].to_vec()).await;
    assert_eq!((status, body["offset"].as_u64(), body["complete"].as_bool()), (202, Some(half as u64), Some(false)));
    let (status, body) =
        put(&server, &format!("path=r/file.bin&offset={half}&size={size}"), content[half..].to_vec()).await;
    assert_eq!((status, body["bytes"].as_u64()), (201, Some(size as u64)), "{body}");
    assert_eq!(std::fs::read(server.base.join("r/file.bin")).expect("read"), content);
    let (status, body) = get(&server, "/files/uploads?path=r/file.bin").await;
    assert_eq!((status, body["code"].as_str()), (404, Some("upload_not_found")));
    let (status, _) = put(&server, &format!("path=r/other&offset=0&size={size}"), content[..10].to_vec()).await;
    assert_eq!(status, 202);
    let (status, _) = send(&server, reqwest::Method::DELETE, "/files/uploads?path=r/other", None).await;
    assert_eq!(status, 200);
    let (status, _) = send(&server, reqwest::Method::DELETE, "/files/uploads?path=r/other", None).await;
    assert_eq!(status, 404);
    let client = server.client();
    let local = server.dir().join("local.bin");
    std::fs::write(&local, data(3 * 1024 * 1024 + 1, 5)).expect("write");
    client.upload_file(&local, "r/client.bin", None).await.expect("upload");
    assert_eq!(client.download("r/client.bin").await.expect("download"), std::fs::read(&local).expect("read"));
}

#[tokio::test]
async fn a_cut_upload_or_a_killed_server_leaves_the_old_content() {
    let mut server = common::start();
    let target = server.base.join("keep.txt");
    std::fs::write(&target, b"old content").expect("write");
    let body = data(4 * 1024 * 1024, 1);
    cut_upload(&server, "path=keep.txt", body.len(), &body[..1024 * 1024]);
    // The server answers the next request only after it saw the cut: wait for a full upload elsewhere.
    let (status, _) = put(&server, "path=other.txt", b"x".to_vec()).await;
    assert_eq!(status, 201);
    assert_eq!(std::fs::read(&target).expect("read"), b"old content");
    assert!(temp_files(&server.base).is_empty());
    let address = server.url.trim_start_matches("http://").to_string();
    let mut tcp = TcpStream::connect(&address).expect("connect");
    let head = format!(
        "PUT /files/content?path=keep.txt HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Length: {}\r\n\r\n",
        server.bearer(),
        body.len()
    );
    tcp.write_all(head.as_bytes()).expect("head");
    tcp.write_all(&body[..2 * 1024 * 1024]).expect("body");
    tcp.flush().expect("flush");
    assert!(server.signal_and_wait(Signal::SIGKILL, Duration::from_secs(10)).is_some());
    assert_eq!(std::fs::read(&target).expect("read"), b"old content");
    assert!(temp_files(&server.base).is_empty(), "no debris after the server died");
    let mut rest = Vec::new();
    let _ = tcp.read_to_end(&mut rest);
    // Restarted on the same directory, the next upload succeeds.
    let restarted = common::server().base_dir(&server.base).start();
    let (status, _) = put(&restarted, "path=keep.txt", b"new content".to_vec()).await;
    assert_eq!(status, 200, "replaced");
    assert_eq!(std::fs::read(&target).expect("read"), b"new content");
}

#[tokio::test]
async fn a_full_disk_is_507_and_leaves_nothing() {
    let Some(disk) = common::SmallDisk::mount() else { return };
    let mount = disk.path.clone();
    std::fs::write(mount.join("old.bin"), b"old").expect("write");
    let server = common::server().base_dir(&mount).start();
    let (status, body) = put(&server, "path=old.bin", data(2 * 1024 * 1024, 2)).await;
    assert_eq!((status, body["code"].as_str()), (507, Some("insufficient_storage")), "{body}");
    assert!(body["error"].as_str().expect("error").contains("nothing was written"));
    assert_eq!(std::fs::read(mount.join("old.bin")).expect("read"), b"old");
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, data(2 * 1024 * 1024, 2));
    let (status, _) = send(
        &server,
        reqwest::Method::POST,
        "/files/upload-stream",
        Some(json!({"path": "new.bin", "content_base64": encoded})),
    )
    .await;
    assert_eq!(status, 507);
    let names: Vec<_> = std::fs::read_dir(&mount).expect("read_dir").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names, ["old.bin"]);
}

#[tokio::test]
async fn archives_hold_the_allowed_tree_only() {
    let server = common::start();
    std::fs::create_dir_all(server.base.join("t/sub")).expect("mkdir");
    std::fs::write(server.base.join("t/a.txt"), b"alpha").expect("write");
    std::fs::write(server.base.join("t/sub/b.txt"), b"beta").expect("write");
    std::os::unix::fs::symlink("/etc/passwd", server.base.join("t/leak")).expect("symlink");
    let client = server.client();
    let bytes = client.archive(&["t".to_string()], "tar.gz").await.expect("tar.gz");
    let mut names = Vec::new();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        let name = entry.path().expect("path").display().to_string();
        if name == "t/a.txt" {
            let mut text = String::new();
            entry.read_to_string(&mut text).expect("read");
            assert_eq!(text, "alpha");
        }
        names.push(name);
    }
    names.sort();
    assert_eq!(names, ["t/", "t/a.txt", "t/sub/", "t/sub/b.txt"]);
    let bytes = client.archive(&["t/sub".to_string(), "t/a.txt".to_string()], "zip").await.expect("zip");
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("zip");
    let mut names: Vec<String> = (0..zip.len()).map(|i| zip.by_index(i).expect("member").name().to_string()).collect();
    names.sort();
    assert_eq!(names, ["a.txt", "sub/", "sub/b.txt"]);
    let (status, body) =
        send(&server, reqwest::Method::POST, "/files/archive", Some(json!({"paths": ["t"], "format": "rar"}))).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("Unsupported format: rar")));
    let (status, _) = send(&server, reqwest::Method::POST, "/files/archive", Some(json!({"paths": ["nope"]}))).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn search_finds_names_and_contents() {
    let server = common::start();
    std::fs::create_dir_all(server.base.join("s/deep/deeper")).expect("mkdir");
    std::fs::write(server.base.join("s/one.py"), b"import os\nprint('needle')\n").expect("write");
    std::fs::write(server.base.join("s/deep/two.py"), b"nothing here\n").expect("write");
    std::fs::write(server.base.join("s/deep/deeper/three.py"), b"needle\n").expect("write");
    std::fs::write(server.base.join("s/bin.py"), b"needle\0binary").expect("write");
    let (_, body) =
        send(&server, reqwest::Method::POST, "/files/search", Some(json!({"path": "s", "pattern": "*.py"}))).await;
    assert_eq!(body["results"].as_array().map(Vec::len), Some(4));
    let (_, body) = send(
        &server,
        reqwest::Method::POST,
        "/files/search",
        Some(json!({"path": "s", "pattern": "*.py", "max_depth": 1})),
    )
    .await;
    assert_eq!(body["results"].as_array().map(Vec::len), Some(2));
    let (_, body) = send(
        &server,
        reqwest::Method::POST,
        "/files/search",
        Some(json!({"path": "s", "pattern": "*", "content": "need+le"})),
    )
    .await;
    let mut hits: Vec<(String, u64)> = body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|h| (h["name"].as_str().expect("name").to_string(), h["matches"][0]["line"].as_u64().expect("line")))
        .collect();
    hits.sort();
    assert_eq!(hits, [("one.py".to_string(), 2), ("three.py".to_string(), 1)]);
    let (status, body) = send(
        &server,
        reqwest::Method::POST,
        "/files/search",
        Some(json!({"path": "s", "pattern": "*", "max_depth": "x"})),
    )
    .await;
    assert_eq!((status, body["error"].as_str()), (400, Some("Invalid 'max_depth' or 'max_results': must be integers")));
}

/// Reads SSE events `(event, data)` from a watch until `stop` says so.
async fn watch_events(server: &TestServer, query: &str) -> impl futures_util::Stream<Item = (String, Value)> + Unpin {
    let response = server
        .http()
        .get(server.at(&format!("/files/watch?{query}")))
        .header("authorization", server.bearer())
        .send()
        .await
        .expect("watch");
    assert_eq!(response.status(), 200);
    let bytes = response.bytes_stream();
    Box::pin(futures_util::stream::unfold((Box::pin(bytes), String::new()), |(mut bytes, mut text)| async move {
        loop {
            if let Some(end) = text.find("\n\n") {
                let block: String = text.drain(..end + 2).collect();
                let event = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("message").to_string();
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
                let data = serde_json::from_str(data).expect("json data");
                return Some(((event, data), (bytes, text)));
            }
            let chunk = bytes.next().await?.ok()?;
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    }))
}

async fn next_change(events: &mut (impl futures_util::Stream<Item = (String, Value)> + Unpin)) -> Value {
    loop {
        let (event, data) = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event in time")
            .expect("stream open");
        if event == "change" {
            return data;
        }
        assert_ne!(event, "end", "the watch ended early: {data}");
    }
}

#[tokio::test]
async fn watch_reports_changes_from_inotify() {
    let server = common::start();
    std::fs::create_dir(server.base.join("w")).expect("mkdir");
    let mut events = watch_events(&server, "path=w&recursive=true&timeout=30").await;
    let (event, data) = events.next().await.expect("ready");
    assert_eq!(
        (event.as_str(), data["path"].as_str()),
        ("ready", Some(server.base.join("w").to_str().expect("utf-8")))
    );
    let file = server.base.join("w/f.txt");
    let started = Instant::now();
    std::fs::write(&file, b"1").expect("write");
    let created = next_change(&mut events).await;
    eprintln!("created reported after {:?}", started.elapsed());
    assert_eq!(created, json!({"type": "created", "path": file.to_str(), "is_dir": false}));
    std::fs::rename(&file, server.base.join("w/g.txt")).expect("rename");
    let deleted = next_change(&mut events).await;
    assert_eq!((deleted["type"].as_str(), deleted["path"].as_str()), (Some("deleted"), file.to_str()));
    let moved = next_change(&mut events).await;
    assert_eq!(moved["type"], "created");
    assert_eq!(moved["old_path"].as_str(), file.to_str());
    std::fs::create_dir_all(server.base.join("w/sub/inner")).expect("mkdir");
    assert_eq!(next_change(&mut events).await["path"].as_str(), server.base.join("w/sub").to_str());
    assert_eq!(next_change(&mut events).await["path"].as_str(), server.base.join("w/sub/inner").to_str());
    let (status, _) = put(&server, "path=w/g.txt", b"replaced".to_vec()).await;
    assert_eq!(status, 200);
    let modified = next_change(&mut events).await;
    assert_eq!(
        (modified["type"].as_str(), modified["path"].as_str()),
        (Some("modified"), server.base.join("w/g.txt").to_str())
    );
    drop(events);

    let mut events = watch_events(&server, "path=w&timeout=0.5").await;
    assert_eq!(events.next().await.expect("ready").0, "ready");
    std::fs::write(server.base.join("w/sub/ignored"), b"x").expect("write");
    let (event, data) = events.next().await.expect("end");
    assert_eq!(
        (event.as_str(), data),
        ("end", json!({"reason": "timeout"})),
        "a subdirectory is not watched without recursive"
    );
    let (status, body) = get(&server, "/files/watch?path=missing").await;
    assert_eq!((status, body["type"].as_str()), (404, Some("FileNotFoundError")));
}

#[tokio::test]
async fn a_watch_ends_when_the_server_shuts_down() {
    let mut server = common::start();
    let mut events = watch_events(&server, "path=.&timeout=300").await;
    assert_eq!(events.next().await.expect("ready").0, "ready");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.pid()).expect("pid"));
    nix::sys::signal::kill(pid, Signal::SIGTERM).expect("sigterm");
    let (event, data) =
        tokio::time::timeout(Duration::from_secs(10), events.next()).await.expect("in time").expect("end");
    assert_eq!((event.as_str(), data), ("end", json!({"reason": "shutdown"})));
    let status = server.signal_and_wait(Signal::SIGTERM, Duration::from_secs(10));
    assert!(matches!(status, Some(nix::sys::wait::WaitStatus::Exited(_, 0))), "{status:?}");
}

#[tokio::test]
async fn the_client_watch_yields_typed_change_events() {
    let server = common::start();
    std::fs::create_dir(server.base.join("w")).expect("mkdir");
    // The answer's head comes once the inotify watch is in place.
    let mut events = Box::pin(server.client().watch("w", false, Some(10.0)).await.expect("watch"));
    std::fs::write(server.base.join("w/new.txt"), b"x").expect("write");
    let event = events.next().await.expect("an event").expect("a change");
    assert_eq!((event.kind.as_str(), event.is_dir), ("created", false), "{event:?}");
    assert!(event.path.ends_with("/w/new.txt"), "{event:?}");
}
