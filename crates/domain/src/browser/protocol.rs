//! The part of the Chrome DevTools Protocol this daemon speaks, typed: the
//! commands it sends with their replies, and the events it reads. Field
//! names follow the protocol (camelCase on the wire).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cdp::Command;

/// A reply without fields.
#[derive(Debug, Deserialize)]
pub struct Empty {}

macro_rules! command {
    ($name:ident, $method:literal, $reply:ty) => {
        impl Command for $name {
            const METHOD: &'static str = $method;
            type Reply = $reply;
        }
    };
}

/// `Target.setAutoAttach`: attach to every new target, paused until released.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetAutoAttach {
    /// Attach to new targets.
    pub auto_attach: bool,
    /// Pause them until `Runtime.runIfWaitingForDebugger`.
    pub wait_for_debugger_on_start: bool,
    /// One connection, sessions by id.
    pub flatten: bool,
}
command!(SetAutoAttach, "Target.setAutoAttach", Empty);

impl SetAutoAttach {
    /// Every new target attached and paused, on flat sessions.
    pub const PAUSED: SetAutoAttach =
        SetAutoAttach { auto_attach: true, wait_for_debugger_on_start: true, flatten: true };
}

/// `Target.createTarget`: a new page.
#[derive(Debug, Serialize)]
pub struct CreateTarget {
    /// Its first URL.
    pub url: String,
}
command!(CreateTarget, "Target.createTarget", TargetId);

/// A reply naming a target.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetId {
    /// The target.
    pub target_id: String,
}

/// `Target.closeTarget`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseTarget {
    /// The target.
    pub target_id: String,
}
command!(CloseTarget, "Target.closeTarget", Value);

/// `Browser.setDownloadBehavior`: what happens to a download.
#[derive(Debug, Serialize)]
pub struct DownloadBehavior {
    /// `deny`: no download is written anywhere.
    pub behavior: &'static str,
}
command!(DownloadBehavior, "Browser.setDownloadBehavior", Empty);

/// `Runtime.runIfWaitingForDebugger`: releases a paused new target.
#[derive(Debug, Serialize)]
pub struct RunIfWaiting {}
command!(RunIfWaiting, "Runtime.runIfWaitingForDebugger", Empty);

/// `Fetch.enable` for every request, at the request stage.
#[derive(Debug, Serialize)]
pub struct FetchEnable {
    /// `[{"urlPattern": "*"}]`.
    pub patterns: Vec<Value>,
}
command!(FetchEnable, "Fetch.enable", Empty);

impl FetchEnable {
    /// Interception of every request.
    pub fn all() -> Self {
        FetchEnable { patterns: vec![serde_json::json!({"urlPattern": "*"})] }
    }
}

/// `Fetch.continueRequest`: lets a paused request go.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContinueRequest {
    /// The paused request.
    pub request_id: String,
}
command!(ContinueRequest, "Fetch.continueRequest", Empty);

/// `Fetch.failRequest`: the page sees a network error.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailRequest {
    /// The paused request.
    pub request_id: String,
    /// `BlockedByClient`.
    pub error_reason: &'static str,
}
command!(FailRequest, "Fetch.failRequest", Empty);

macro_rules! simple {
    ($name:ident, $method:literal) => {
        #[doc = concat!("`", $method, "`.")]
        #[derive(Debug, Serialize)]
        pub struct $name {}
        command!($name, $method, Empty);
    };
}
simple!(PageEnable, "Page.enable");
simple!(RuntimeEnable, "Runtime.enable");
simple!(NetworkEnable, "Network.enable");
simple!(StopLoading, "Page.stopLoading");
simple!(InspectorEnable, "Inspector.enable");
simple!(TerminateExecution, "Runtime.terminateExecution");

/// `Page.setLifecycleEventsEnabled`.
#[derive(Debug, Serialize)]
pub struct LifecycleEvents {
    /// On.
    pub enabled: bool,
}
command!(LifecycleEvents, "Page.setLifecycleEventsEnabled", Empty);

/// `Emulation.setDeviceMetricsOverride`: the viewport's size.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceMetrics {
    /// Width in CSS pixels.
    pub width: u32,
    /// Height in CSS pixels.
    pub height: u32,
    /// Device pixels per CSS pixel.
    pub device_scale_factor: f64,
    /// Mobile emulation.
    pub mobile: bool,
}
command!(DeviceMetrics, "Emulation.setDeviceMetricsOverride", Empty);

/// `Page.navigate`.
#[derive(Debug, Serialize)]
pub struct Navigate {
    /// Where to.
    pub url: String,
}
command!(Navigate, "Page.navigate", Navigated);

/// The reply of `Page.navigate`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Navigated {
    /// The new document's loader (absent for a same-document navigation).
    pub loader_id: Option<String>,
    /// Why it failed (`net::ERR_...`).
    pub error_text: Option<String>,
}

/// `Page.getLayoutMetrics`.
#[derive(Debug, Serialize)]
pub struct GetLayoutMetrics {}
command!(GetLayoutMetrics, "Page.getLayoutMetrics", LayoutMetrics);

/// The reply of `Page.getLayoutMetrics` (CSS pixels).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LayoutMetrics {
    /// The visible viewport.
    pub css_layout_viewport: Viewport,
    /// The whole document.
    pub css_content_size: Rect,
}

/// The visible viewport's size.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Viewport {
    /// Width.
    pub client_width: f64,
    /// Height.
    pub client_height: f64,
}

/// A rectangle in CSS pixels.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Rect {
    /// Left.
    #[serde(default)]
    pub x: f64,
    /// Top.
    #[serde(default)]
    pub y: f64,
    /// Width.
    pub width: f64,
    /// Height.
    pub height: f64,
}

/// `Page.captureScreenshot`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaptureScreenshot {
    /// `png` or `jpeg`.
    pub format: &'static str,
    /// The area, in document coordinates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clip: Option<Clip>,
    /// Render beyond the viewport (full page, elements out of view).
    pub capture_beyond_viewport: bool,
}
command!(CaptureScreenshot, "Page.captureScreenshot", Data);

/// A screenshot clip.
#[derive(Debug, Serialize)]
pub struct Clip {
    /// The area.
    #[serde(flatten)]
    pub rect: Rect,
    /// Device scale.
    pub scale: f64,
}

/// A reply carrying base64 data.
#[derive(Debug, Deserialize)]
pub struct Data {
    /// Base64.
    pub data: String,
}

/// `Page.printToPDF`, streamed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrintToPdf {
    /// Landscape orientation.
    pub landscape: bool,
    /// Paper width in inches.
    pub paper_width: f64,
    /// Paper height in inches.
    pub paper_height: f64,
    /// Print backgrounds.
    pub print_background: bool,
    /// `ReturnAsStream`: read back in chunks with `IO.read`.
    pub transfer_mode: &'static str,
}
command!(PrintToPdf, "Page.printToPDF", PdfStream);

/// The reply of a streamed `Page.printToPDF`.
#[derive(Debug, Deserialize)]
pub struct PdfStream {
    /// The stream handle.
    pub stream: Option<String>,
}

/// `IO.read`.
#[derive(Debug, Serialize)]
pub struct IoRead {
    /// The stream handle.
    pub handle: String,
    /// Bytes at most.
    pub size: usize,
}
command!(IoRead, "IO.read", IoChunk);

/// One chunk of a stream.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IoChunk {
    /// The data.
    pub data: String,
    /// Whether `data` is base64.
    #[serde(default)]
    pub base64_encoded: bool,
    /// The end of the stream.
    pub eof: bool,
}

/// `IO.close`.
#[derive(Debug, Serialize)]
pub struct IoClose {
    /// The stream handle.
    pub handle: String,
}
command!(IoClose, "IO.close", Empty);

/// `Runtime.evaluate`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Evaluate {
    /// The script.
    pub expression: String,
    /// Reply with the JSON value instead of a handle.
    pub return_by_value: bool,
    /// Wait for a returned promise.
    pub await_promise: bool,
    /// As if the user acted (focus, popups).
    pub user_gesture: bool,
    /// The group handles are kept in, for releasing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_group: Option<&'static str>,
}
command!(Evaluate, "Runtime.evaluate", Evaluated);

/// `Runtime.callFunctionOn`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallFunctionOn {
    /// The function's source.
    pub function_declaration: &'static str,
    /// `this`.
    pub object_id: String,
    /// Reply with the JSON value.
    pub return_by_value: bool,
    /// Wait for a returned promise.
    pub await_promise: bool,
    /// As if the user acted.
    pub user_gesture: bool,
}
command!(CallFunctionOn, "Runtime.callFunctionOn", Evaluated);

/// `Runtime.releaseObjectGroup`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseObjectGroup {
    /// The group.
    pub object_group: &'static str,
}
command!(ReleaseObjectGroup, "Runtime.releaseObjectGroup", Empty);

/// The reply of an evaluation.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Evaluated {
    /// The value or handle.
    pub result: RemoteObject,
    /// Set when the script threw.
    pub exception_details: Option<ExceptionDetails>,
}

/// A JavaScript value, by value or by handle.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteObject {
    /// `object`, `function`, `string`, `undefined`, ...
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The value, when by value or primitive.
    pub value: Option<Value>,
    /// `NaN`, `Infinity`, `-0`, bigints.
    pub unserializable_value: Option<String>,
    /// A readable description.
    pub description: Option<String>,
    /// The handle.
    pub object_id: Option<String>,
}

/// Why a script threw.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionDetails {
    /// `Uncaught`.
    #[serde(default)]
    pub text: String,
    /// The thrown value.
    pub exception: Option<RemoteObject>,
}

impl ExceptionDetails {
    /// The thrown value's first line (`Error: boom`), as a browser console shows it.
    pub fn message(&self) -> String {
        let description = self.exception.as_ref().and_then(|e| {
            e.description.clone().or_else(|| e.value.as_ref().map(|v| v.as_str().map_or(v.to_string(), str::to_string)))
        });
        let text = description.unwrap_or_else(|| self.text.clone());
        text.lines().next().unwrap_or_default().to_string()
    }
}

/// `Input.dispatchMouseEvent`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MouseEvent {
    /// `mouseMoved`, `mousePressed`, `mouseReleased`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Viewport x.
    pub x: f64,
    /// Viewport y.
    pub y: f64,
    /// `left` or `none`.
    pub button: &'static str,
    /// 1 for a click.
    pub click_count: u32,
}
command!(MouseEvent, "Input.dispatchMouseEvent", Empty);

/// `Input.dispatchKeyEvent`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyEvent {
    /// `keyDown` or `keyUp`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The key's name (`a`, `Enter`).
    pub key: String,
    /// The text it types, on `keyDown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The Windows key code (13 for Enter), where it matters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows_virtual_key_code: Option<u32>,
}
command!(KeyEvent, "Input.dispatchKeyEvent", Empty);

/// `Target.attachedToTarget`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachedToTarget {
    /// The new flat session.
    pub session_id: String,
    /// What was attached.
    pub target_info: TargetInfo,
    /// Whether it waits for `Runtime.runIfWaitingForDebugger`.
    #[serde(default)]
    pub waiting_for_debugger: bool,
}

/// A target's identity.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetInfo {
    /// Its id.
    pub target_id: String,
    /// `page`, `iframe`, `worker`, `service_worker`, ...
    #[serde(rename = "type")]
    pub kind: String,
}

/// `Target.detachedFromTarget`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DetachedFromTarget {
    /// The session that ended.
    pub session_id: String,
}

/// `Fetch.requestPaused`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPaused {
    /// The paused request.
    pub request_id: String,
    /// What it asks for.
    pub request: Request,
    /// `Document`, `Image`, `XHR`, ...
    #[serde(default)]
    pub resource_type: String,
    /// The frame it is for.
    #[serde(default)]
    pub frame_id: String,
}

/// A request.
#[derive(Debug, Deserialize)]
pub struct Request {
    /// Its URL.
    pub url: String,
    /// Its method (`GET`, `POST`, ...).
    #[serde(default)]
    pub method: String,
}

/// `Page.lifecycleEvent`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleEvent {
    /// The frame.
    pub frame_id: String,
    /// The document's loader.
    pub loader_id: String,
    /// `init`, `commit`, `DOMContentLoaded`, `load`, `networkIdle`, ...
    pub name: String,
}

/// `Network.responseReceived`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseReceived {
    /// The document's loader.
    #[serde(default)]
    pub loader_id: String,
    /// `Document`, ...
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The frame.
    #[serde(default)]
    pub frame_id: String,
    /// The response.
    pub response: Response,
}

/// A response.
#[derive(Debug, Deserialize)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
}

/// `Runtime.consoleAPICalled`.
#[derive(Debug, Deserialize)]
pub struct ConsoleCalled {
    /// `log`, `warning`, `error`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The arguments.
    #[serde(default)]
    pub args: Vec<RemoteObject>,
    /// Milliseconds since the epoch.
    #[serde(default)]
    pub timestamp: f64,
}

impl RemoteObject {
    /// The text a console shows for this argument.
    pub fn text(&self) -> String {
        match (&self.value, &self.unserializable_value, &self.description) {
            (Some(Value::String(s)), _, _) => s.clone(),
            (Some(v), _, _) if !v.is_object() && !v.is_array() => v.to_string(),
            (_, Some(u), _) => u.clone(),
            (_, _, Some(d)) => d.clone(),
            _ => self.kind.clone(),
        }
    }
}
