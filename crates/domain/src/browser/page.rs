//! What the eight endpoints do to the shared page, over CDP: navigate and
//! wait, screenshot, content, click, type, evaluate, print to PDF.

use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use super::instance::Instance;
use super::launch::VIEWPORT;
use super::protocol as p;
use super::shared::Blocked;
use super::BrowserError;

/// The tallest full-page screenshot, in CSS pixels (Chromium's own texture limit).
pub const MAX_SCREENSHOT_HEIGHT: f64 = 16384.0;
/// The largest PDF read back from the browser.
pub const MAX_PDF_BYTES: usize = 64 << 20;
/// How often a selector is looked for while waiting for it.
const POLL: Duration = Duration::from_millis(50);
/// The object group evaluation handles are kept in until released.
const GROUP: &str = "abx";

/// Which lifecycle point `navigate` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitUntil {
    /// The navigation committed.
    Commit,
    /// `DOMContentLoaded`.
    DomContentLoaded,
    /// `load`.
    Load,
    /// No network activity for 500 ms.
    NetworkIdle,
}

impl WaitUntil {
    /// Parses Playwright's names.
    ///
    /// # Errors
    /// [`BrowserError::Invalid`] for another name.
    pub fn parse(name: &str) -> Result<Self, BrowserError> {
        match name {
            "commit" => Ok(WaitUntil::Commit),
            "domcontentloaded" => Ok(WaitUntil::DomContentLoaded),
            "load" => Ok(WaitUntil::Load),
            "networkidle" => Ok(WaitUntil::NetworkIdle),
            other => Err(BrowserError::Invalid(format!(
                "wait_until: expected one of (load|domcontentloaded|networkidle|commit), got '{other}'"
            ))),
        }
    }

    fn event(self) -> Option<&'static str> {
        match self {
            WaitUntil::Commit => None,
            WaitUntil::DomContentLoaded => Some("DOMContentLoaded"),
            WaitUntil::Load => Some("load"),
            WaitUntil::NetworkIdle => Some("networkIdle"),
        }
    }
}

/// Where the page is.
#[derive(Debug, Clone, PartialEq)]
pub struct Location {
    /// `location.href`.
    pub url: String,
    /// `document.title`.
    pub title: String,
}

/// Opens `url` and waits for `wait`; the main document's HTTP status (0
/// for a same-document navigation).
///
/// # Errors
/// [`BrowserError::Blocked`] when the policy refused the document or a
/// redirect, [`BrowserError::Navigation`] for a network error,
/// [`BrowserError::Timeout`] (the page is stopped, so the next call works).
pub async fn navigate(page: &Instance, url: &str, wait: WaitUntil, timeout: Duration) -> Result<u16, BrowserError> {
    page.shared.lock().blocked.clear();
    let session = Some(page.session.as_str());
    let go = async {
        let navigated = page.cdp.call(session, &p::Navigate { url: url.to_string() }).await?;
        if let Some(error) = navigated.error_text.filter(|e| !e.is_empty()) {
            let blocked = page.shared.lock().blocked.iter().find(|b| b.resource_type == "Document").cloned();
            return Err(match blocked {
                Some(blocked) => BrowserError::Blocked(Box::new(blocked)),
                None => BrowserError::Navigation(format!("{error} at {url}")),
            });
        }
        let Some(loader) = navigated.loader_id else { return Ok(0) };
        if let Some(event) = wait.event() {
            wait_for(page, &loader, event).await?;
        }
        Ok(page.shared.lock().status.get(&loader).copied().unwrap_or(0))
    };
    match tokio::time::timeout(timeout, go).await {
        Ok(result) => result,
        Err(_) => {
            let _ = page.cdp.call(session, &p::StopLoading {}).await;
            Err(BrowserError::Timeout(format!("Navigation timeout of {} ms exceeded", timeout.as_millis())))
        }
    }
}

async fn wait_for(page: &Instance, loader: &str, event: &str) -> Result<(), BrowserError> {
    loop {
        let notified = page.shared.changed.notified();
        if page.shared.lock().lifecycle.get(loader).is_some_and(|seen| seen.contains(event)) {
            return Ok(());
        }
        if page.gone() {
            return Err(BrowserError::Crashed(page.death().await.unwrap_or_default()));
        }
        notified.await;
    }
}

/// The URLs the policy refused during the last navigation, with their rules.
pub fn blocked(page: &Instance) -> Vec<Blocked> {
    page.shared.lock().blocked.clone()
}

/// `location.href` and `document.title`.
///
/// # Errors
/// Protocol errors.
pub async fn location(page: &Instance) -> Result<Location, BrowserError> {
    let value = evaluate_value(page, "[location.href, document.title]").await?;
    let text = |i: usize| value.get(i).and_then(Value::as_str).unwrap_or_default().to_string();
    Ok(Location { url: text(0), title: text(1) })
}

/// The page's HTML (doctype included), or its body's text.
///
/// # Errors
/// Protocol errors.
pub async fn content(page: &Instance, text: bool) -> Result<String, BrowserError> {
    let script = if text {
        "document.body ? document.body.innerText : ''"
    } else {
        "(document.doctype ? new XMLSerializer().serializeToString(document.doctype) : '') + \
         (document.documentElement ? document.documentElement.outerHTML : '')"
    };
    Ok(evaluate_value(page, script).await?.as_str().unwrap_or_default().to_string())
}

/// A screenshot: the element `selector`, the full page, or the viewport;
/// with the reported width and height.
///
/// # Errors
/// [`BrowserError::SelectorNotFound`], protocol errors.
pub async fn screenshot(
    page: &Instance,
    selector: Option<&str>,
    full_page: bool,
    jpeg: bool,
) -> Result<(Vec<u8>, u64, u64), BrowserError> {
    let format = if jpeg { "jpeg" } else { "png" };
    let (clip, width, height) = match selector {
        Some(selector) => {
            let rect = element_box(page, selector, false).await?;
            let rect = rect.ok_or_else(|| BrowserError::SelectorNotFound(selector.to_string()))?;
            if rect.width < 1.0 || rect.height < 1.0 {
                return Err(BrowserError::Invalid(format!("Element is not visible: {selector}")));
            }
            (Some(p::Clip { rect, scale: 1.0 }), rect.width as u64, rect.height as u64)
        }
        None => {
            let metrics = page.cdp.call(Some(&page.session), &p::GetLayoutMetrics {}).await?;
            let viewport = &metrics.css_layout_viewport;
            let (width, height) = (viewport.client_width as u64, viewport.client_height as u64);
            let clip = full_page.then(|| {
                let size = metrics.css_content_size;
                let rect = p::Rect {
                    x: 0.0,
                    y: 0.0,
                    width: size.width.max(1.0),
                    height: size.height.clamp(1.0, MAX_SCREENSHOT_HEIGHT),
                };
                p::Clip { rect, scale: 1.0 }
            });
            (clip, width, height)
        }
    };
    let capture_beyond_viewport = clip.is_some();
    let shot = p::CaptureScreenshot { format, clip, capture_beyond_viewport };
    let data = page.cdp.call(Some(&page.session), &shot).await?.data;
    Ok((decode(&data)?, width, height))
}

/// Clicks the centre of `selector` once it is visible (waiting up to `timeout`).
///
/// # Errors
/// [`BrowserError::SelectorNotFound`] after `timeout`, protocol errors.
pub async fn click(page: &Instance, selector: &str, timeout: Duration) -> Result<(), BrowserError> {
    let rect = wait_for_element(page, selector, timeout).await?;
    let (x, y) = (rect.x + rect.width / 2.0, rect.y + rect.height / 2.0);
    for (kind, button, click_count) in
        [("mouseMoved", "none", 0), ("mousePressed", "left", 1), ("mouseReleased", "left", 1)]
    {
        page.cdp.call(Some(&page.session), &p::MouseEvent { kind, x, y, button, click_count }).await?;
    }
    Ok(())
}

/// Focuses `selector` (emptying it first if `clear`) and types `text`, one
/// key at a time with `delay` between keys.
///
/// # Errors
/// [`BrowserError::SelectorNotFound`] after `timeout`, protocol errors.
pub async fn type_text(
    page: &Instance,
    selector: &str,
    text: &str,
    delay: Duration,
    clear: bool,
    timeout: Duration,
) -> Result<(), BrowserError> {
    wait_for_element(page, selector, timeout).await?;
    let focus = format!(
        "(() => {{ const e = document.querySelector({sel}); if (!e) return false; e.focus(); \
         if ({clear}) {{ if ('value' in e) {{ e.value = ''; e.dispatchEvent(new Event('input', {{bubbles: true}})); }} \
         else if (e.isContentEditable) {{ e.textContent = ''; }} }} return true; }})()",
        sel = js_string(selector),
    );
    if evaluate_value(page, &focus).await? != Value::Bool(true) {
        return Err(BrowserError::SelectorNotFound(selector.to_string()));
    }
    for (i, ch) in text.chars().enumerate() {
        if i > 0 && !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let (key, typed, code) = match ch {
            '\n' | '\r' => ("Enter".to_string(), "\r".to_string(), Some(13)),
            '\t' => ("Tab".to_string(), String::new(), Some(9)),
            c => (c.to_string(), c.to_string(), None),
        };
        let down = p::KeyEvent { kind: "keyDown", key: key.clone(), text: Some(typed), windows_virtual_key_code: code };
        page.cdp.call(Some(&page.session), &down).await?;
        let up = p::KeyEvent { kind: "keyUp", key, text: None, windows_virtual_key_code: code };
        page.cdp.call(Some(&page.session), &up).await?;
    }
    Ok(())
}

/// Evaluates `script` as Playwright's `page.evaluate` does: a promise is
/// awaited, a function is called (and its promise awaited); the JSON value.
///
/// A script still running after `timeout` is terminated.
///
/// # Errors
/// [`BrowserError::Script`] when it throws or its value cannot be sent as
/// JSON, [`BrowserError::Timeout`].
pub async fn evaluate(page: &Instance, script: &str, timeout: Duration) -> Result<Value, BrowserError> {
    match tokio::time::timeout(timeout, evaluate_script(page, script)).await {
        Ok(result) => result,
        Err(_) => {
            let _ = page.cdp.call(Some(&page.session), &p::TerminateExecution {}).await;
            let _ = page.cdp.call(Some(&page.session), &p::ReleaseObjectGroup { object_group: GROUP }).await;
            Err(BrowserError::Timeout(format!("Evaluation timeout of {} ms exceeded", timeout.as_millis())))
        }
    }
}

async fn evaluate_script(page: &Instance, script: &str) -> Result<Value, BrowserError> {
    let session = Some(page.session.as_str());
    let command = p::Evaluate {
        expression: script.to_string(),
        return_by_value: false,
        await_promise: true,
        user_gesture: true,
        object_group: Some(GROUP),
    };
    let result = async {
        let evaluated = page.cdp.call(session, &command).await?;
        let evaluated = match (&evaluated.exception_details, evaluated.result.object_id.clone()) {
            (Some(_), _) | (None, None) => evaluated,
            (None, Some(object_id)) => {
                let function_declaration = if evaluated.result.kind == "function" {
                    "async function() { return await this(); }"
                } else {
                    "function() { return this; }"
                };
                let call = p::CallFunctionOn {
                    function_declaration,
                    object_id,
                    return_by_value: true,
                    await_promise: true,
                    user_gesture: true,
                };
                page.cdp.call(session, &call).await?
            }
        };
        if let Some(details) = evaluated.exception_details {
            return Err(BrowserError::Script(details.message()));
        }
        Ok(evaluated.result.value.unwrap_or(Value::Null))
    }
    .await;
    let _ = page.cdp.call(session, &p::ReleaseObjectGroup { object_group: GROUP }).await;
    result.map_err(|e| match e {
        BrowserError::Protocol(message)
            if message.contains("could not be cloned") || message.contains("reference chain") =>
        {
            BrowserError::Script(format!("The result cannot be returned as JSON: {message}"))
        }
        other => other,
    })
}

/// Prints the page to PDF, read back in chunks up to [`MAX_PDF_BYTES`].
///
/// # Errors
/// [`BrowserError::Invalid`] for an unknown paper format,
/// [`BrowserError::TooLarge`], protocol errors.
pub async fn pdf(page: &Instance, format: &str, landscape: bool) -> Result<Vec<u8>, BrowserError> {
    let (paper_width, paper_height) =
        paper(format).ok_or_else(|| BrowserError::Invalid(format!("Unknown paper format: {format}")))?;
    let print = p::PrintToPdf {
        landscape,
        paper_width,
        paper_height,
        print_background: false,
        transfer_mode: "ReturnAsStream",
    };
    let session = Some(page.session.as_str());
    let handle =
        page.cdp.call(session, &print).await?.stream.ok_or_else(|| BrowserError::Protocol("no PDF stream".into()))?;
    let mut pdf = Vec::new();
    let read = async {
        loop {
            let chunk = page.cdp.call(session, &p::IoRead { handle: handle.clone(), size: 1 << 20 }).await?;
            let bytes = if chunk.base64_encoded { decode(&chunk.data)? } else { chunk.data.into_bytes() };
            if pdf.len() + bytes.len() > MAX_PDF_BYTES {
                return Err(BrowserError::TooLarge { limit: MAX_PDF_BYTES as u64 });
            }
            pdf.extend_from_slice(&bytes);
            if chunk.eof {
                return Ok(());
            }
        }
    }
    .await;
    let _ = page.cdp.call(session, &p::IoClose { handle }).await;
    read.map(|()| pdf)
}

/// Pages in a PDF: `/Type /Page` dictionaries (not `/Pages`), at least 1.
pub fn count_pages(pdf: &[u8]) -> usize {
    let mut count = 0;
    for pattern in [&b"/Type /Page"[..], &b"/Type/Page"[..]] {
        let mut at = 0;
        while let Some(found) = memchr::memmem::find(&pdf[at..], pattern) {
            let end = at + found + pattern.len();
            if pdf.get(end) != Some(&b's') {
                count += 1;
            }
            at = end;
        }
    }
    count.max(1)
}

/// Paper sizes in inches, as Playwright's `format`.
fn paper(format: &str) -> Option<(f64, f64)> {
    Some(match format.to_ascii_lowercase().as_str() {
        "letter" => (8.5, 11.0),
        "legal" => (8.5, 14.0),
        "tabloid" => (11.0, 17.0),
        "ledger" => (17.0, 11.0),
        "a0" => (33.1, 46.8),
        "a1" => (23.4, 33.1),
        "a2" => (16.54, 23.4),
        "a3" => (11.7, 16.54),
        "a4" => (8.27, 11.7),
        "a5" => (5.83, 8.27),
        "a6" => (4.13, 5.83),
        _ => return None,
    })
}

/// The viewport size the browser starts with.
pub fn viewport() -> (u64, u64) {
    (u64::from(VIEWPORT.0), u64::from(VIEWPORT.1))
}

async fn evaluate_value(page: &Instance, expression: &str) -> Result<Value, BrowserError> {
    let command = p::Evaluate {
        expression: expression.to_string(),
        return_by_value: true,
        await_promise: true,
        user_gesture: false,
        object_group: None,
    };
    let evaluated = page.cdp.call(Some(&page.session), &command).await?;
    if let Some(details) = evaluated.exception_details {
        return Err(BrowserError::Script(details.message()));
    }
    Ok(evaluated.result.value.unwrap_or(Value::Null))
}

/// The element's box: in document coordinates for a screenshot clip, or
/// scrolled into view in viewport coordinates for input (`scroll`).
async fn element_box(page: &Instance, selector: &str, scroll: bool) -> Result<Option<p::Rect>, BrowserError> {
    let script = format!(
        "(() => {{ let e; try {{ e = document.querySelector({sel}); }} catch (err) {{ return 'invalid'; }} \
         if (!e) return null; if ({scroll}) e.scrollIntoView({{block: 'center', inline: 'center'}}); \
         const r = e.getBoundingClientRect(); const dx = {scroll} ? 0 : window.scrollX, dy = {scroll} ? 0 : window.scrollY; \
         return {{x: r.x + dx, y: r.y + dy, width: r.width, height: r.height}}; }})()",
        sel = js_string(selector),
    );
    let value = evaluate_value(page, &script).await?;
    if value == Value::String("invalid".into()) {
        return Err(BrowserError::Invalid(format!("Invalid selector: {selector}")));
    }
    Ok(serde_json::from_value::<Option<p::Rect>>(value).ok().flatten())
}

async fn wait_for_element(page: &Instance, selector: &str, timeout: Duration) -> Result<p::Rect, BrowserError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(rect) = element_box(page, selector, true).await? {
            if rect.width > 0.0 && rect.height > 0.0 {
                return Ok(rect);
            }
        }
        if tokio::time::Instant::now() + POLL > deadline {
            return Err(BrowserError::SelectorTimeout { selector: selector.to_string(), waited: timeout });
        }
        tokio::time::sleep(POLL).await;
    }
}

fn js_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "''".into())
}

fn decode(data: &str) -> Result<Vec<u8>, BrowserError> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| BrowserError::Protocol(format!("bad base64: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_counted_without_the_pages_tree() {
        let pdf = b"<< /Type /Pages /Count 2 >> << /Type /Page >> << /Type/Page >>";
        assert_eq!(count_pages(pdf), 2);
        assert_eq!(count_pages(b"%PDF-1.4"), 1);
    }

    #[test]
    fn wait_names_and_paper_formats() {
        assert_eq!(WaitUntil::parse("networkidle").expect("ok"), WaitUntil::NetworkIdle);
        assert!(WaitUntil::parse("idle").is_err());
        assert_eq!(paper("A4"), Some((8.27, 11.7)));
        assert_eq!(paper("Letter"), Some((8.5, 11.0)));
        assert_eq!(paper("B5"), None);
    }

    #[test]
    fn selectors_are_quoted_as_javascript_strings() {
        assert_eq!(js_string("a[href='x\"']"), r#""a[href='x\"']""#);
    }
}
