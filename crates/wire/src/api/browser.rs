//! Browser group wire types: the eight endpoints' request bodies and answers.
//!
//! Request fields are JSON values read leniently, as the reference reads
//! them (`int()` with a default on failure, Python truthiness for flags).
//! Answers carry the reference's fields; `blocked` on a navigation is ours
//! (left out when empty), and the client's models accept extra fields.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /browser/navigate`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct NavigateRequest {
    /// The URL to open.
    pub url: Option<Value>,
    /// `load`, `domcontentloaded`, `networkidle` (default) or `commit`.
    pub wait_until: Option<Value>,
    /// Milliseconds (default 30000).
    pub timeout: Option<Value>,
}

/// A request the URL policy refused while a page loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct BlockedRequest {
    /// Its URL.
    pub url: String,
    /// `Document`, `Image`, `Script`, `XHR`, ...
    pub resource_type: String,
    /// The refusal's code (`url_denied`, `url_not_allowed`).
    pub code: String,
    /// The rule that decided (`private_address`, `url_deny:<pattern>`, ...).
    pub rule: String,
}

/// The answer of `navigate`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct BrowserPage {
    /// Where the page is now.
    pub url: String,
    /// Its title.
    pub title: String,
    /// The main document's HTTP status (0 when there was none).
    pub status: u16,
    /// Sub-resources the URL policy refused (ours).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<BlockedRequest>,
}

/// `POST /browser/screenshot`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ScreenshotRequest {
    /// Only this element.
    pub selector: Option<Value>,
    /// The whole page, not only the viewport (default true).
    pub full_page: Option<Value>,
    /// `png` (default) or `jpeg`.
    pub format: Option<Value>,
}

/// The answer of `screenshot`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct Screenshot {
    /// The image, base64.
    pub image_base64: String,
    /// The element's width, or the viewport's.
    pub width: u64,
    /// The element's height, or the viewport's.
    pub height: u64,
}

/// `GET /browser/content?type=html|text`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ContentQuery {
    /// `html` (default) or `text`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

/// The answer of `content`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct BrowserContent {
    /// HTML or text.
    pub content: String,
    /// The page's URL.
    pub url: String,
    /// Its title.
    pub title: String,
}

/// `POST /browser/click`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ClickRequest {
    /// The element.
    pub selector: Option<Value>,
    /// Milliseconds to wait for it (default 5000).
    pub timeout: Option<Value>,
}

/// The answer of `click`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct Clicked {
    /// Always true.
    pub clicked: bool,
    /// The selector.
    pub selector: String,
}

/// `POST /browser/type`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct TypeRequest {
    /// The element.
    pub selector: Option<Value>,
    /// What to type.
    pub text: Option<Value>,
    /// Milliseconds between keys (default 50).
    pub delay: Option<Value>,
    /// Empty the field first.
    pub clear: Option<Value>,
}

/// The answer of `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct Typed {
    /// Always true.
    pub typed: bool,
    /// The selector.
    pub selector: String,
    /// The text.
    pub text: String,
}

/// `POST /browser/evaluate`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct EvaluateRequest {
    /// The script: an expression, or a function that is called.
    pub script: Option<Value>,
    /// Milliseconds (default 10000).
    pub timeout: Option<Value>,
}

/// The answer of `evaluate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct Evaluated {
    /// The script's JSON value (`null` for `undefined`).
    pub result: Value,
}

/// `POST /browser/pdf`.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct PdfRequest {
    /// `A4` (default), `Letter`, `Legal`, `Tabloid`, `Ledger`, `A0`–`A6`.
    pub format: Option<Value>,
    /// Landscape orientation.
    pub landscape: Option<Value>,
}

/// The answer of `pdf`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct Pdf {
    /// The PDF, base64.
    pub pdf_base64: String,
    /// Its pages.
    pub pages: usize,
}

/// One console message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ConsoleLog {
    /// `log`, `info`, `warning`, `error`, `debug`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Its text.
    pub text: String,
    /// Seconds since the epoch.
    pub timestamp: f64,
}

/// The answer of `console`: the messages since the last read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct ConsoleLogs {
    /// Oldest first.
    pub logs: Vec<ConsoleLog>,
}
