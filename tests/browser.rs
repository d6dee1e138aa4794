//! Black-box tests of the browser group: the real binary drives Debian's
//! Chromium against pages a small HTTP server on loopback serves.
//!
//! Every test policy allows loopback (`block_private_networks: false`) and
//! denies the metadata address by pattern, so the browser never sends a
//! packet beyond loopback: blocked requests are refused before they leave.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Pages served to the browser; `/hang` never answers.
fn page_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut request = String::new();
                if reader.read_line(&mut request).is_err() {
                    return;
                }
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
                let (status, headers, body) = route(&path);
                if status == 0 {
                    std::thread::sleep(Duration::from_secs(60));
                    return;
                }
                let mut stream = stream;
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body.as_bytes());
            });
        }
    });
    format!("http://{addr}")
}

fn route(path: &str) -> (u16, String, String) {
    let html = |s: &str| (200, "Content-Type: text/html\r\n".to_string(), s.to_string());
    match path {
        "/" => html(
            "<!DOCTYPE html><html><head><title>Test page</title></head><body><h1>Hello</h1>\
             <input id=q><button id=b onclick=\"document.title='clicked'\">Go</button>\
             <script>console.log('ready', 42); console.error('bad thing')</script></body></html>",
        ),
        "/subresource" => html(
            "<html><head><title>Sub</title></head><body>\
             <img src=\"http://169.254.169.254/latest/meta-data/x.png\"></body></html>",
        ),
        "/redirect" => (302, "Location: http://169.254.169.254/latest/meta-data/\r\n".into(), String::new()),
        "/missing" => (404, String::new(), "no".into()),
        "/hang" => (0, String::new(), String::new()),
        _ => html("<html><head><title>Other</title></head><body>other</body></html>"),
    }
}

const POLICY: &str = r#"{"groups": {"browser": true}, "endpoints": {"browser_navigate": {"params":
    {"block_private_networks": false, "url_deny": ["http://169.254.169.254/*"]}}}}"#;

fn browser_server(args: &[&str]) -> common::TestServer {
    common::server().env("ABX_SERVER_POLICY", POLICY).args(args.iter().copied()).start()
}

async fn call(server: &common::TestServer, method: &str, path: &str, body: Value) -> (u16, Value) {
    let request = match method {
        "GET" => server.http().get(server.at(path)),
        _ => server.http().post(server.at(path)).json(&body),
    };
    let response = request.header("Authorization", server.bearer()).send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

/// Pids of the server's browsers: its children whose command line sets a
/// browser profile (not Chromium's crash handlers, reparented to the server).
fn browser_pids(server: &common::TestServer) -> Vec<i32> {
    let server_pid = server.pid().to_string();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let parent = status.lines().find_map(|l| l.strip_prefix("PPid:")).map(str::trim).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if parent == server_pid && cmdline.contains("--user-data-dir=") && cmdline.contains("abx-browser-") {
            pids.push(pid);
        }
    }
    pids
}

fn profile_of(pid: i32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text = String::from_utf8_lossy(&cmdline).into_owned();
    let arg = text.split('\0').find_map(|a| a.strip_prefix("--user-data-dir=")).expect("profile flag");
    arg.to_string()
}

fn processes_naming(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .expect("proc")
        .flatten()
        .filter(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .count()
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn the_eight_calls_drive_a_real_page() {
    let site = page_server();
    let server = browser_server(&[]);
    assert!(browser_pids(&server).is_empty(), "no browser before the first call");
    let (status, logs) = call(&server, "GET", "/browser/console", Value::Null).await;
    assert_eq!((status, logs), (200, json!({"logs": []})));
    assert!(browser_pids(&server).is_empty(), "reading the console starts nothing");

    let (status, page) = call(&server, "POST", "/browser/navigate", json!({"url": format!("{site}/")})).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page, json!({"url": format!("{site}/"), "title": "Test page", "status": 200}));
    assert_eq!(browser_pids(&server).len(), 1, "one browser, started by the first call");

    let (_, logs) = call(&server, "GET", "/browser/console", Value::Null).await;
    let logs = logs["logs"].as_array().expect("logs").clone();
    let kinds: Vec<_> = logs.iter().map(|l| (l["type"].as_str(), l["text"].as_str())).collect();
    assert_eq!(kinds, [(Some("log"), Some("ready 42")), (Some("error"), Some("bad thing"))]);
    assert!(logs[0]["timestamp"].as_f64().expect("timestamp") > 1.7e9);

    let (_, content) = call(&server, "GET", "/browser/content?type=text", Value::Null).await;
    assert_eq!(content["content"], "Hello\nGo");
    let (_, html) = call(&server, "GET", "/browser/content", Value::Null).await;
    let html = html["content"].as_str().expect("html");
    assert!(html.starts_with("<!DOCTYPE html><html><head><title>Test page</title>"), "{html}");

    let (status, typed) =
        call(&server, "POST", "/browser/type", json!({"selector": "#q", "text": "hé\u{1F600}", "delay": 0})).await;
    assert_eq!((status, typed), (200, json!({"typed": true, "selector": "#q", "text": "hé\u{1F600}"})));
    let (status, clicked) = call(&server, "POST", "/browser/click", json!({"selector": "#b"})).await;
    assert_eq!((status, clicked), (200, json!({"clicked": true, "selector": "#b"})));
    let script = "[document.title, document.querySelector('#q').value]";
    let (_, evaluated) = call(&server, "POST", "/browser/evaluate", json!({"script": script})).await;
    assert_eq!(evaluated, json!({"result": ["clicked", "hé\u{1F600}"]}));
    let (_, evaluated) =
        call(&server, "POST", "/browser/evaluate", json!({"script": "async () => ({a: 1, b: [true, null]})"})).await;
    assert_eq!(evaluated, json!({"result": {"a": 1, "b": [true, null]}}));

    let (status, shot) = call(&server, "POST", "/browser/screenshot", json!({})).await;
    assert_eq!((status, &shot["width"], &shot["height"]), (200, &json!(1280), &json!(720)));
    let png = base64_decode(&shot["image_base64"]);
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let (_, shot) = call(&server, "POST", "/browser/screenshot", json!({"selector": "h1", "format": "jpeg"})).await;
    assert_eq!(&base64_decode(&shot["image_base64"])[..3], b"\xff\xd8\xff", "a JPEG");
    assert!(shot["height"].as_u64().expect("height") > 10 && shot["height"].as_u64().expect("height") < 100);

    let (status, pdf) = call(&server, "POST", "/browser/pdf", json!({"format": "Letter", "landscape": true})).await;
    assert_eq!((status, &pdf["pages"]), (200, &json!(1)));
    assert!(base64_decode(&pdf["pdf_base64"]).starts_with(b"%PDF-"));
}

fn base64_decode(value: &Value) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(value.as_str().expect("base64 text")).expect("base64")
}

#[tokio::test]
async fn every_request_is_held_to_the_url_policy_and_faults_answer_clearly() {
    let site = page_server();
    let server = browser_server(&[]);
    // A redirect to a blocked address: navigate names the URL and the rule.
    let (status, err) = call(&server, "POST", "/browser/navigate", json!({"url": format!("{site}/redirect")})).await;
    assert_eq!(status, 403, "{err}");
    assert_eq!(
        (err["code"].as_str(), err["rule"].as_str()),
        (Some("url_not_allowed"), Some("url_deny:http://169.254.169.254/*"))
    );
    assert_eq!(err["endpoint"], "browser_navigate");
    assert!(err["error"].as_str().expect("message").contains("http://169.254.169.254/latest/meta-data/"), "{err}");

    // A blocked sub-resource fails in the page; the page itself loads.
    let (status, page) =
        call(&server, "POST", "/browser/navigate", json!({"url": format!("{site}/subresource"), "wait_until": "load"}))
            .await;
    assert_eq!((status, &page["title"]), (200, &json!("Sub")), "{page}");
    assert_eq!(page["blocked"][0]["url"], "http://169.254.169.254/latest/meta-data/x.png");
    assert_eq!(page["blocked"][0]["resource_type"], "Image");
    let fetch = "fetch('http://169.254.169.254/latest/').then(r => 'loaded ' + r.status, e => String(e))";
    let (_, evaluated) = call(&server, "POST", "/browser/evaluate", json!({"script": fetch})).await;
    assert_eq!(evaluated["result"], "TypeError: Failed to fetch", "a fetch() from evaluate is filtered too");
    let (_, width) =
        call(&server, "POST", "/browser/evaluate", json!({"script": "document.images[0].naturalWidth"})).await;
    assert_eq!(width["result"], 0, "the image never loaded");

    // A page that never finishes loading times out; the next call works.
    let started = Instant::now();
    let (status, err) =
        call(&server, "POST", "/browser/navigate", json!({"url": format!("{site}/hang"), "timeout": 1000})).await;
    assert_eq!(
        (status, err["type"].as_str(), err["code"].as_str()),
        (504, Some("TimeoutError"), Some("timeout")),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let (status, page) = call(
        &server,
        "POST",
        "/browser/navigate",
        json!({"url": format!("{site}/missing"), "wait_until": "domcontentloaded"}),
    )
    .await;
    assert_eq!((status, &page["status"]), (200, &json!(404)), "{page}");

    // Errors of the caller's making.
    let (status, err) = call(&server, "POST", "/browser/screenshot", json!({"selector": "#nope"})).await;
    assert_eq!(
        (status, err["code"].as_str(), err["error"].as_str()),
        (404, Some("selector_not_found"), Some("Selector not found: #nope"))
    );
    let (status, err) = call(&server, "POST", "/browser/click", json!({"selector": "#nope", "timeout": 200})).await;
    assert_eq!((status, err["type"].as_str()), (404, Some("TimeoutError")), "{err}");
    let (status, err) = call(&server, "POST", "/browser/evaluate", json!({"script": "throw new Error('boom')"})).await;
    assert_eq!((status, err["error"].as_str(), err["code"].as_str()), (400, Some("Error: boom"), Some("script_error")));
    let (status, err) =
        call(&server, "POST", "/browser/evaluate", json!({"script": "while (true) {}", "timeout": 300})).await;
    assert_eq!((status, err["type"].as_str()), (504, Some("TimeoutError")), "{err}");
    let (_, evaluated) = call(&server, "POST", "/browser/evaluate", json!({"script": "1 + 1"})).await;
    assert_eq!(evaluated["result"], 2, "a runaway script was stopped");
    for (body, message) in [
        (json!({}), "Missing or invalid 'url'"),
        (json!({"url": "ftp://x"}), "Only http(s) URLs are allowed"),
        (
            json!({"url": format!("{site}/"), "wait_until": "soon"}),
            "wait_until: expected one of (load|domcontentloaded|networkidle|commit), got 'soon'",
        ),
    ] {
        let (status, err) = call(&server, "POST", "/browser/navigate", body).await;
        assert_eq!(err["error"], message);
        assert!(status == 400 || status == 403, "{status}");
    }
}

#[tokio::test]
async fn a_killed_browser_is_reported_once_then_started_again_and_nothing_outlives_the_server() {
    let site = page_server();
    let mut server = browser_server(&[]);
    let url = json!({"url": format!("{site}/")});
    assert_eq!(call(&server, "POST", "/browser/navigate", url.clone()).await.0, 200);
    let first = browser_pids(&server);
    assert_eq!(first.len(), 1);
    let profile = profile_of(first[0]);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first[0]), nix::sys::signal::Signal::SIGKILL).expect("kill");
    wait_until("the browser's processes are gone", Duration::from_secs(10), || processes_naming(&profile) == 0);

    let (status, err) = call(&server, "GET", "/browser/content", Value::Null).await;
    assert_eq!((status, err["code"].as_str()), (503, Some("browser_crashed")), "{err}");
    assert!(err["error"].as_str().expect("message").contains("killed by signal 9"), "{err}");
    let (status, page) = call(&server, "POST", "/browser/navigate", url).await;
    assert_eq!((status, &page["title"]), (200, &json!("Test page")), "{page}");
    let second = browser_pids(&server);
    assert_eq!(second.len(), 1);
    assert_ne!(second, first, "a new browser");
    let profile = profile_of(second[0]);
    assert!(processes_naming(&profile) >= 3, "zygote and renderers run in the browser's group");

    let status = server.signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(20));
    assert!(status.is_some(), "the server stopped");
    assert_eq!(processes_naming(&profile), 0, "no browser process outlives the server");
    assert!(!std::path::Path::new(&profile).exists(), "the profile is removed");
}

#[tokio::test]
async fn an_idle_browser_is_closed_and_a_missing_one_is_named() {
    let site = page_server();
    let server = browser_server(&["--browser-idle-timeout-seconds", "1"]);
    assert_eq!(call(&server, "POST", "/browser/navigate", json!({"url": format!("{site}/")})).await.0, 200);
    let pid = browser_pids(&server)[0];
    let profile = profile_of(pid);
    wait_until("the idle browser is closed", Duration::from_secs(10), || processes_naming(&profile) == 0);
    server.wait_for_log("closing the idle browser", Duration::from_secs(5));

    let missing = browser_server(&["--browser-path", "/nonexistent/chromium"]);
    let (status, err) = call(&missing, "POST", "/browser/navigate", json!({"url": format!("{site}/")})).await;
    assert_eq!(
        (status, err["code"].as_str(), err["type"].as_str()),
        (503, Some("browser_unavailable"), Some("RuntimeError"))
    );
    assert!(err["error"].as_str().expect("message").contains("apt-get install -y chromium"), "{err}");
}

#[tokio::test]
async fn without_a_policy_loopback_and_private_names_are_refused_before_the_browser_starts() {
    let site = page_server();
    let server = common::server().env("ABX_SERVER_ENABLED_GROUPS", "browser").start();
    let (status, err) = call(&server, "POST", "/browser/navigate", json!({"url": format!("{site}/")})).await;
    assert_eq!(
        (status, err["code"].as_str(), err["rule"].as_str()),
        (403, Some("url_denied"), Some("private_address"))
    );
    assert_eq!(err["error"], "Loopback, link-local and private addresses are not allowed");
    let (status, err) = call(&server, "POST", "/browser/navigate", json!({"url": "ftp://x"})).await;
    assert_eq!((status, err["code"].as_str()), (400, Some("url_invalid")));
    // A host name is decided by the addresses it resolves to.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname").trim().to_string();
    let private = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), 80))
        .map(|mut a| a.any(|a| a.ip().is_loopback() || matches!(a.ip(), std::net::IpAddr::V4(v4) if v4.is_private())))
        .unwrap_or(false);
    if private {
        let (status, err) = call(&server, "POST", "/browser/navigate", json!({"url": format!("http://{host}/")})).await;
        assert_eq!((status, err["code"].as_str()), (403, Some("url_denied")), "{err}");
        assert!(err["error"].as_str().expect("message").starts_with(&format!("{} resolves to", host.to_lowercase())));
    }
    assert!(browser_pids(&server).is_empty(), "refused before any browser started");
}

#[tokio::test]
async fn the_companion_client_drives_the_page_with_typed_answers_and_errors() {
    use abx_wire::api::ErrorCode;
    use abx_wire::codec::base64;

    let site = page_server();
    let server = browser_server(&[]);
    let client = server.client();
    let page = client.browser_navigate(&format!("{site}/"), Some("load")).await.expect("navigate");
    assert_eq!((page.title.as_str(), page.status), ("Test page", 200));
    client.browser_type("#q", "typed text", true).await.expect("type");
    assert_eq!(client.browser_evaluate("document.querySelector('#q').value").await.expect("evaluate"), "typed text");
    client.browser_click("#b").await.expect("click");
    assert_eq!(client.browser_content(false).await.expect("content").title, "clicked");
    assert!(client.browser_content(true).await.expect("text").content.contains("Hello"));
    let logs = client.browser_console().await.expect("console");
    assert!(logs.iter().any(|l| l.kind == "error" && l.text == "bad thing"), "{logs:?}");
    let shot = client.browser_screenshot(Some("h1"), false).await.expect("screenshot");
    assert!(base64::decode(&shot.image_base64).expect("base64").starts_with(b"\x89PNG"));
    let pdf = client.browser_pdf(None, false).await.expect("pdf");
    assert!(base64::decode(&pdf.pdf_base64).expect("base64").starts_with(b"%PDF"));
    let missing = client.browser_click("#nope").await.expect_err("no such element");
    assert_eq!(missing.code(), Some(&ErrorCode::SelectorNotFound));
    let denied = client.browser_navigate("http://169.254.169.254/latest/", None).await.expect_err("url policy");
    assert_eq!((denied.status(), denied.code()), (Some(403), Some(&ErrorCode::UrlNotAllowed)));
}
