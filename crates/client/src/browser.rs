//! Client calls of the browser group (opt-in): one shared headless page
//! that navigates, is read, clicked, typed into, scripted and printed.
//! Every URL the page loads is held to the policy's URL rules.

use abx_wire::api::browser::{
    BrowserContent, BrowserPage, Clicked, ConsoleLog, ConsoleLogs, Evaluated, Pdf, Screenshot, Typed,
};
use serde_json::{json, Value};

use super::{Client, ClientError};

impl Client {
    /// `POST /browser/navigate`: opens `url` and waits for `wait_until`
    /// (`load`, `domcontentloaded`, `networkidle` by default, or `commit`).
    ///
    /// # Errors
    /// 403 `url_not_allowed`/`url_denied` (the URL policy), 502
    /// `navigation_failed`, 503 `browser_unavailable`, 404
    /// `endpoint_disabled` unless the browser group is on.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let page = client.browser_navigate("https://example.com", None).await?;
    /// println!("{} ({}): {} requests blocked", page.title, page.status, page.blocked.len());
    /// # Ok(()) }
    /// ```
    pub async fn browser_navigate(&self, url: &str, wait_until: Option<&str>) -> Result<BrowserPage, ClientError> {
        let mut body = json!({ "url": url });
        if let Some(wait_until) = wait_until {
            body["wait_until"] = json!(wait_until);
        }
        self.call("browser_navigate", &[], &[], Some(&body)).await
    }

    /// `POST /browser/screenshot`: a PNG of the page (all of it with
    /// `full_page`, else the viewport), or of the element `selector`.
    ///
    /// # Errors
    /// Transport errors and error answers (404 `selector_not_found`).
    ///
    /// ```no_run
    /// use abx_wire::codec::base64;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let shot = client.browser_screenshot(None, true).await?;
    /// std::fs::write("page.png", base64::decode(&shot.image_base64).expect("base64")).expect("written");
    /// # Ok(()) }
    /// ```
    pub async fn browser_screenshot(&self, selector: Option<&str>, full_page: bool) -> Result<Screenshot, ClientError> {
        let mut body = json!({ "full_page": full_page });
        if let Some(selector) = selector {
            body["selector"] = json!(selector);
        }
        self.call("browser_screenshot", &[], &[], Some(&body)).await
    }

    /// `GET /browser/content`: the page's HTML, or its text with `text`.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let page = client.browser_content(true).await?;
    /// println!("{}: {} characters", page.url, page.content.len());
    /// # Ok(()) }
    /// ```
    pub async fn browser_content(&self, text: bool) -> Result<BrowserContent, ClientError> {
        let kind = if text { "text" } else { "html" };
        self.call("browser_content", &[], &[("type", kind.to_string())], None::<&()>).await
    }

    /// `POST /browser/click`: clicks the element `selector`.
    ///
    /// # Errors
    /// Transport errors and error answers (404 `selector_not_found`).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// client.browser_click("button[type=submit]").await?;
    /// # Ok(()) }
    /// ```
    pub async fn browser_click(&self, selector: &str) -> Result<Clicked, ClientError> {
        self.call("browser_click", &[], &[], Some(&json!({ "selector": selector }))).await
    }

    /// `POST /browser/type`: types `text` into the element `selector`
    /// (emptied first with `clear`).
    ///
    /// # Errors
    /// Transport errors and error answers (404 `selector_not_found`).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// client.browser_type("input[name=q]", "agent sandboxes", true).await?;
    /// # Ok(()) }
    /// ```
    pub async fn browser_type(&self, selector: &str, text: &str, clear: bool) -> Result<Typed, ClientError> {
        let body = json!({ "selector": selector, "text": text, "clear": clear });
        self.call("browser_type", &[], &[], Some(&body)).await
    }

    /// `POST /browser/evaluate`: runs `script` (an expression, or a
    /// function that is called) in the page; its JSON value.
    ///
    /// # Errors
    /// Transport errors and error answers (400 `script_error` when it throws).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let links = client.browser_evaluate("document.links.length").await?;
    /// println!("{links} links");
    /// # Ok(()) }
    /// ```
    pub async fn browser_evaluate(&self, script: &str) -> Result<Value, ClientError> {
        let answer: Evaluated = self.call("browser_evaluate", &[], &[], Some(&json!({ "script": script }))).await?;
        Ok(answer.result)
    }

    /// `POST /browser/pdf`: the page printed to PDF (`format` `A4` by default).
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// use abx_wire::codec::base64;
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let pdf = client.browser_pdf(Some("Letter"), false).await?;
    /// std::fs::write("page.pdf", base64::decode(&pdf.pdf_base64).expect("base64")).expect("written");
    /// # Ok(()) }
    /// ```
    pub async fn browser_pdf(&self, format: Option<&str>, landscape: bool) -> Result<Pdf, ClientError> {
        let mut body = json!({ "landscape": landscape });
        if let Some(format) = format {
            body["format"] = json!(format);
        }
        self.call("browser_pdf", &[], &[], Some(&body)).await
    }

    /// `GET /browser/console`: the page's console messages since the last read.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// for log in client.browser_console().await? {
    ///     println!("[{}] {}", log.kind, log.text);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn browser_console(&self) -> Result<Vec<ConsoleLog>, ClientError> {
        let answer: ConsoleLogs = self.call("browser_console", &[], &[], None::<&()>).await?;
        Ok(answer.logs)
    }
}
