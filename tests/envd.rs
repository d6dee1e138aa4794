//! Black-box tests of the envd port: the Connect framing (unary, server
//! streams, keepalives, deadlines, errors), the tokens (server, `/init`,
//! signed URLs), and `/files` (ranges, gzip, multipart, full disks).

#![allow(clippy::disallowed_methods)] // tests drive the binary from outside; no reaper here

mod common;

use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use common::envd::{call, envd, Frames};

#[tokio::test]
async fn the_envd_listener_is_announced_before_the_api_and_can_be_off() {
    let server = common::start();
    let names: Vec<&str> = server.listeners.iter().map(|(name, _)| name.as_str()).collect();
    let envd_at = names.iter().position(|n| *n == "envd").expect("envd announced");
    assert!(envd_at < names.iter().position(|n| *n == "api").expect("api"), "{names:?}");
    let health = reqwest::get(format!("{}/health", envd(&server))).await.expect("health");
    assert_eq!(health.status().as_u16(), 204);
    let off = common::server().args(["--envd-port", "off"]).start();
    assert!(off.listeners.iter().all(|(name, _)| name != "envd"));
}

#[tokio::test]
async fn unary_calls_answer_messages_and_connect_errors() {
    let server = common::start();
    let token = Some(common::TOKEN);
    std::fs::create_dir_all(server.base.join("d/e")).expect("mkdir");
    std::fs::write(server.base.join("d/f.txt"), b"12345").expect("write");
    let (status, body) = call(&server, "filesystem.Filesystem/Stat", json!({"path": "d/f.txt"}), token).await;
    assert_eq!(status, 200, "{body}");
    let entry = &body["entry"];
    assert_eq!((entry["name"].as_str(), entry["type"].as_str()), (Some("f.txt"), Some("FILE_TYPE_FILE")));
    assert_eq!((entry["size"].as_str(), entry["permissions"].as_str().map(|p| p.len())), (Some("5"), Some(10)));
    assert!(entry["modifiedTime"].as_str().expect("time").ends_with('Z'));
    let (status, body) = call(&server, "filesystem.Filesystem/Stat", json!({"path": "d/none"}), token).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
    let (status, body) =
        call(&server, "filesystem.Filesystem/ListDir", json!({"path": "d", "depth": "2"}), token).await;
    let mut names: Vec<&str> =
        body["entries"].as_array().expect("entries").iter().filter_map(|e| e["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!((status, names), (200, vec!["e", "f.txt"]));
    let (status, body) = call(&server, "filesystem.Filesystem/MakeDir", json!({"path": "d/e"}), token).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("already_exists")));
    let (status, body) =
        call(&server, "filesystem.Filesystem/Move", json!({"source": "d/f.txt", "destination": "n/m/g"}), token).await;
    assert_eq!((status, body["entry"]["name"].as_str()), (200, Some("g")), "{body}");
    assert_eq!(std::fs::read(server.base.join("n/m/g")).expect("moved"), b"12345");
    let (status, body) = call(&server, "filesystem.Filesystem/Remove", json!({"path": "n"}), token).await;
    assert_eq!((status, body), (200, json!({})));
    let (status, body) = call(&server, "filesystem.Filesystem/Stat", json!({"path": "/etc/passwd"}), token).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("permission_denied")),
        "paths stay under the policy: {body}"
    );
    let (status, body) = call(&server, "filesystem.Filesystem/Stat", json!({"path": 5}), token).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_argument")));
    let (status, body) = call(&server, "filesystem.Filesystem/Nope", json!({}), token).await;
    assert_eq!((status, body["code"].as_str()), (501, Some("unimplemented")));
    let proto = reqwest::Client::new()
        .post(format!("{}/filesystem.Filesystem/Stat", envd(&server)))
        .header("content-type", "application/proto")
        .header("x-access-token", common::TOKEN)
        .body(vec![0x0a, 0x01, 0x61])
        .send()
        .await
        .expect("send");
    assert_eq!(proto.status().as_u16(), 501);
}

#[tokio::test]
async fn streams_start_send_events_keepalives_and_end_with_the_deadline() {
    let server = common::start();
    let token = ("x-access-token", common::TOKEN);
    std::fs::create_dir(server.base.join("w")).expect("mkdir");
    let headers = [token, ("keepalive-ping-interval", "1"), ("connect-timeout-ms", "2500")];
    let (status, kind, mut frames) =
        Frames::open(&server, "filesystem.Filesystem/WatchDir", json!({"path": "w", "recursive": true}), &headers)
            .await;
    assert_eq!((status, kind.as_str()), (200, "application/connect+json"));
    assert_eq!(frames.next().await, Some((0, json!({"start": {}}))));
    std::fs::write(server.base.join("w/new.txt"), b"x").expect("write");
    let (flags, event) = frames.next().await.expect("event");
    assert_eq!(
        (flags, &event["filesystem"]["name"], &event["filesystem"]["type"]),
        (0, &json!("new.txt"), &json!("EVENT_TYPE_CREATE"))
    );
    let mut keepalive = false;
    let end = loop {
        let (flags, message) = frames.next().await.expect("frame");
        if flags == 2 {
            break message;
        }
        keepalive |= message == json!({"keepalive": {}});
    };
    assert!(keepalive, "a keepalive within the quiet second");
    assert_eq!(end["error"]["code"], "deadline_exceeded", "{end}");
    assert_eq!(frames.next().await, None);

    let (status, _, mut frames) =
        Frames::open(&server, "filesystem.Filesystem/WatchDir", json!({"path": "missing"}), &[token]).await;
    let (flags, end) = frames.next().await.expect("end");
    assert_eq!((status, flags, end["error"]["code"].as_str()), (200, 2, Some("not_found")), "{end}");
    // A streaming call refused at the door ends the stream with the error, as the protocol says.
    let (status, _, mut frames) =
        Frames::open(&server, "filesystem.Filesystem/WatchDir", json!({"path": "w"}), &[]).await;
    let (flags, end) = frames.next().await.expect("end");
    assert_eq!((status, flags, end["error"]["code"].as_str()), (200, 2, Some("unauthenticated")), "{end}");
}

#[tokio::test]
async fn a_subscriber_that_leaves_ends_its_watch() {
    let server = common::start();
    std::fs::create_dir(server.base.join("w")).expect("mkdir");
    let Some((_, before)) = common::inotify_usage(server.pid()) else {
        eprintln!("skipped: the daemon's descriptors are not visible to this user");
        return;
    };
    let headers = [("x-access-token", common::TOKEN), ("keepalive-ping-interval", "1")];
    let (_, _, mut frames) =
        Frames::open(&server, "filesystem.Filesystem/WatchDir", json!({"path": "w"}), &headers).await;
    assert_eq!(frames.next().await, Some((0, json!({"start": {}}))));
    let watching = common::inotify_usage(server.pid());
    assert_eq!(watching, Some((1, before + 1)), "one shared instance, one more watched directory");
    drop(frames);
    // Nothing to await: the server learns of the departure at its next keepalive write, and the
    // watch stops once its 5 s resume grace (abx-watch-resume) passed without a client.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while common::inotify_usage(server.pid()).is_some_and(|(_, watches)| watches > before) {
        assert!(std::time::Instant::now() < deadline, "the directory stayed watched after its subscriber left");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_watch_holds_its_concurrency_slot_while_it_streams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.json");
    let rules = json!({"endpoints": {"files_watch": {"limits": {"max_concurrency": 1}}}});
    std::fs::write(&policy, rules.to_string()).expect("policy");
    let server = common::server().args(["--policy".into(), policy.display().to_string()]).start();
    std::fs::create_dir(server.base.join("w")).expect("mkdir");
    let token = [("x-access-token", common::TOKEN)];
    let (_, _, mut first) = Frames::open(&server, "filesystem.Filesystem/WatchDir", json!({"path": "w"}), &token).await;
    assert_eq!(first.next().await, Some((0, json!({"start": {}}))));
    let (_, _, mut second) =
        Frames::open(&server, "filesystem.Filesystem/WatchDir", json!({"path": "w"}), &token).await;
    let (flags, end) = second.next().await.expect("end");
    assert_eq!((flags, end["error"]["code"].as_str()), (2, Some("resource_exhausted")), "{end}");
}

#[tokio::test]
async fn polled_watchers_queue_events_until_asked() {
    let server = common::start();
    let token = Some(common::TOKEN);
    let (status, body) = call(&server, "filesystem.Filesystem/CreateWatcher", json!({"path": ""}), token).await;
    assert_eq!(status, 200, "{body}");
    let id = body["watcherId"].as_str().expect("id").to_string();
    std::fs::write(server.base.join("polled"), b"").expect("write");
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.iter().any(|e: &Value| e["name"] == "polled" && e["type"] == "EVENT_TYPE_CREATE") {
        assert!(tokio::time::Instant::now() < deadline, "no event: {seen:?}");
        let (_, body) = call(&server, "filesystem.Filesystem/GetWatcherEvents", json!({"watcher_id": id}), token).await;
        seen.extend(body["events"].as_array().cloned().unwrap_or_default());
    }
    let (status, _) = call(&server, "filesystem.Filesystem/RemoveWatcher", json!({"watcherId": id}), token).await;
    assert_eq!(status, 200);
    let (status, body) = call(&server, "filesystem.Filesystem/GetWatcherEvents", json!({"watcherId": id}), token).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
}

#[tokio::test]
async fn tokens_the_server_s_and_init_s_open_the_plane() {
    let server = common::start();
    let url = envd(&server);
    let (status, body) = call(&server, "filesystem.Filesystem/Stat", json!({"path": ""}), None).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthenticated")));
    let http = reqwest::Client::new();
    let refused =
        http.post(format!("{url}/init")).json(&json!({"accessToken": "init-tok"})).send().await.expect("init");
    assert_eq!(refused.status().as_u16(), 401, "a token is in force: /init needs it");
    let init = http
        .post(format!("{url}/init"))
        .header("x-access-token", common::TOKEN)
        .json(&json!({"accessToken": "init-tok", "envVars": {"FROM_INIT": "1"}}))
        .send()
        .await
        .expect("init");
    assert_eq!(init.status().as_u16(), 204);
    for token in [common::TOKEN, "init-tok"] {
        let (status, _) = call(&server, "filesystem.Filesystem/Stat", json!({"path": ""}), Some(token)).await;
        assert_eq!(status, 200, "{token}");
    }
    let envs: Value = http
        .get(format!("{url}/envs"))
        .header("x-access-token", "init-tok")
        .send()
        .await
        .expect("envs")
        .json()
        .await
        .expect("json");
    assert_eq!(envs, json!({"FROM_INIT": "1"}));
    let metrics = http.get(format!("{url}/metrics")).send().await.expect("metrics");
    assert_eq!(metrics.status().as_u16(), 401);
    let metrics: Value = http
        .get(format!("{url}/metrics"))
        .header("x-access-token", "init-tok")
        .send()
        .await
        .expect("metrics")
        .json()
        .await
        .expect("json");
    assert!(
        metrics["mem_total"].as_u64().is_some_and(|m| m > 0) && metrics["cpu_count"].as_u64() >= Some(1),
        "{metrics}"
    );

    let open = common::server().token(None).start();
    let (status, _) = call(&open, "filesystem.Filesystem/Stat", json!({"path": ""}), None).await;
    assert_eq!(status, 200, "no token: open, as the API port");
    let first =
        http.post(format!("{}/init", envd(&open))).json(&json!({"accessToken": "first"})).send().await.expect("init");
    assert_eq!(first.status().as_u16(), 204, "first setup needs nothing");
    let (status, _) = call(&open, "filesystem.Filesystem/Stat", json!({"path": ""}), None).await;
    assert_eq!(status, 401, "the /init token closes the plane");
}

fn signature(path: &str, operation: &str, user: &str, token: &str, expiration: Option<i64>) -> String {
    use sha2::Digest;
    let text = match expiration {
        Some(exp) => format!("{path}:{operation}:{user}:{token}:{exp}"),
        None => format!("{path}:{operation}:{user}:{token}"),
    };
    let signature = format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha2::Sha256::digest(text.as_bytes()))
    );
    form_urlencoded::byte_serialize(signature.as_bytes()).collect()
}

#[tokio::test]
async fn files_stream_ranges_gzip_multipart_and_signed_urls() {
    let server = common::start();
    let url = envd(&server);
    let http = reqwest::Client::new();
    let auth = ("x-access-token", common::TOKEN);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let written: Value = http
        .post(format!("{url}/files?path=deep/dir/data.bin"))
        .header(auth.0, auth.1)
        .header("content-type", "application/octet-stream")
        .body(data.clone())
        .send()
        .await
        .expect("upload")
        .json()
        .await
        .expect("json");
    let path = server.base.join("deep/dir/data.bin");
    assert_eq!(written, json!([{"path": path.display().to_string(), "name": "data.bin", "type": "file"}]));
    let get = |query: String| http.get(format!("{url}/files?{query}"));
    let whole = get("path=deep/dir/data.bin".into()).header(auth.0, auth.1).send().await.expect("get");
    assert_eq!(whole.headers()["content-length"], "300000");
    assert_eq!(whole.bytes().await.expect("bytes"), data);
    let part = get("path=deep/dir/data.bin".into())
        .header(auth.0, auth.1)
        .header("range", "bytes=10-19")
        .send()
        .await
        .expect("get");
    assert_eq!(
        (part.status().as_u16(), part.headers()["content-range"].to_str().ok()),
        (206, Some("bytes 10-19/300000"))
    );
    assert_eq!(part.bytes().await.expect("bytes"), data[10..20]);
    let past = get("path=deep/dir/data.bin".into())
        .header(auth.0, auth.1)
        .header("range", "bytes=400000-")
        .send()
        .await
        .expect("get");
    assert_eq!(past.status().as_u16(), 416);
    let zipped = get("path=deep/dir/data.bin".into())
        .header(auth.0, auth.1)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .expect("get");
    assert_eq!(zipped.headers()["content-encoding"], "gzip");
    let mut plain = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&zipped.bytes().await.expect("bytes")[..]),
        &mut plain,
    )
    .expect("gunzip");
    assert_eq!(plain, data);
    let missing: Value =
        get("path=nope".into()).header(auth.0, auth.1).send().await.expect("get").json().await.expect("json");
    assert_eq!(missing["code"], 404);
    let directory = get("path=deep".into()).header(auth.0, auth.1).send().await.expect("get");
    assert_eq!(directory.status().as_u16(), 400);

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, b"compressed upload").expect("gzip");
    let gz = http
        .post(format!("{url}/files?path=gz.txt"))
        .header(auth.0, auth.1)
        .header("content-type", "application/octet-stream")
        .header("content-encoding", "gzip")
        .body(gz.finish().expect("gzip"))
        .send()
        .await
        .expect("upload");
    assert_eq!(gz.status().as_u16(), 200);
    assert_eq!(std::fs::read(server.base.join("gz.txt")).expect("read"), b"compressed upload");

    let boundary = "XyZ";
    let part = |name: &str, body: &str| {
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\r\n{body}\r\n")
    };
    let form = format!("{}{}--{boundary}--\r\n", part("m/one.txt", "1"), part("m/two.txt", "22"));
    let multi: Value = http
        .post(format!("{url}/files"))
        .header(auth.0, auth.1)
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .body(form)
        .send()
        .await
        .expect("multipart")
        .json()
        .await
        .expect("json");
    assert_eq!(multi.as_array().map(Vec::len), Some(2), "{multi}");
    assert_eq!(std::fs::read(server.base.join("m/two.txt")).expect("read"), b"22");
    let twice = format!("{}{}--{boundary}--\r\n", part("same", "1"), part("same", "2"));
    let twice = http
        .post(format!("{url}/files"))
        .header(auth.0, auth.1)
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .body(twice)
        .send()
        .await
        .expect("multipart");
    assert_eq!(twice.status().as_u16(), 400);
    assert_eq!(std::fs::read(server.base.join("same")).expect("read"), b"1", "only the first was written");
    let no_path = http
        .post(format!("{url}/files"))
        .header(auth.0, auth.1)
        .header("content-type", "application/octet-stream")
        .body("x")
        .send()
        .await
        .expect("post");
    assert_eq!(no_path.status().as_u16(), 400);

    let unsigned = get("path=gz.txt".into()).send().await.expect("get");
    assert_eq!(unsigned.status().as_u16(), 401);
    let sig = signature("gz.txt", "read", "", common::TOKEN, None);
    let signed = get(format!("path=gz.txt&signature={sig}")).send().await.expect("get");
    assert_eq!(signed.status().as_u16(), 200);
    let wrong_op = signature("gz.txt", "write", "", common::TOKEN, None);
    assert_eq!(get(format!("path=gz.txt&signature={wrong_op}")).send().await.expect("get").status().as_u16(), 401);
    let expired = signature("gz.txt", "read", "", common::TOKEN, Some(1));
    let expired = get(format!("path=gz.txt&signature={expired}&signature_expiration=1")).send().await.expect("get");
    assert_eq!(expired.status().as_u16(), 401);
    let write_sig = signature("signed.txt", "write", "", common::TOKEN, Some(4_000_000_000));
    let signed_upload = http
        .post(format!("{url}/files?path=signed.txt&signature={write_sig}&signature_expiration=4000000000"))
        .header("content-type", "application/octet-stream")
        .body("by url")
        .send()
        .await
        .expect("post");
    assert_eq!(signed_upload.status().as_u16(), 200);
    assert_eq!(std::fs::read(server.base.join("signed.txt")).expect("read"), b"by url");
}

#[tokio::test]
async fn a_full_disk_is_507_and_leaves_the_old_file() {
    let Some(disk) = common::SmallDisk::mount() else { return };
    let mount = disk.path.clone();
    std::fs::write(mount.join("old.bin"), b"old").expect("write");
    let server = common::server().base_dir(&mount).start();
    let response = reqwest::Client::new()
        .post(format!("{}/files?path=old.bin", envd(&server)))
        .header("x-access-token", common::TOKEN)
        .header("content-type", "application/octet-stream")
        .body(vec![7u8; 2 * 1024 * 1024])
        .send()
        .await
        .expect("upload");
    assert_eq!(response.status().as_u16(), 507);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["code"], 507);
    assert_eq!(std::fs::read(mount.join("old.bin")).expect("read"), b"old");
    let names: Vec<_> = std::fs::read_dir(&mount).expect("read_dir").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names, ["old.bin"]);
}
