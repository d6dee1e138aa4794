//! `process.Process` messages (envd's `process.proto`, JSON codec).

use std::collections::BTreeMap;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::{de_bytes, de_opt_u32, de_u32, enum_value, is_zero, ser_bytes};

/// `ProcessConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct ProcessConfig {
    /// The program.
    pub cmd: String,
    /// Its arguments.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables added to the child environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// Working directory (default: `/init`'s `defaultWorkdir`, else the base directory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `PTY.Size`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PtySize {
    /// Columns.
    #[serde(deserialize_with = "de_u32")]
    pub cols: u32,
    /// Rows.
    #[serde(deserialize_with = "de_u32")]
    pub rows: u32,
}

/// `PTY`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Pty {
    /// The terminal size.
    pub size: PtySize,
}

/// `StartRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StartRequest {
    /// What to run.
    pub process: ProcessConfig,
    /// Run it on a pseudo-terminal of this size.
    pub pty: Option<Pty>,
    /// A name to find it by.
    pub tag: Option<String>,
    /// Give it a stdin pipe (default true, as envd); otherwise `/dev/null`.
    pub stdin: Option<bool>,
}

/// `ProcessSelector`: a pid or a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The daemon's pid of the process.
    Pid(u32),
    /// Its tag.
    Tag(String),
}

impl<'de> Deserialize<'de> for Selector {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default, deserialize_with = "de_opt_u32")]
            pid: Option<u32>,
            #[serde(default)]
            tag: Option<String>,
        }
        let raw = Raw::deserialize(d)?;
        match (raw.pid, raw.tag) {
            (Some(pid), None) => Ok(Selector::Pid(pid)),
            (None, Some(tag)) => Ok(Selector::Tag(tag)),
            (None, None) => Err(D::Error::custom("the process selector names neither a pid nor a tag")),
            (Some(_), Some(_)) => Err(D::Error::custom("the process selector names both a pid and a tag")),
        }
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selector::Pid(pid) => write!(f, "pid {pid}"),
            Selector::Tag(tag) => write!(f, "tag {tag}"),
        }
    }
}

/// `ConnectRequest`, `CloseStdinRequest`: a selector.
#[derive(Debug, Clone, Deserialize)]
pub struct SelectRequest {
    /// The process.
    pub process: Selector,
}

/// `UpdateRequest`.
#[derive(Debug, Clone, Deserialize)]
pub struct UpdateRequest {
    /// The process.
    pub process: Selector,
    /// Its new terminal size.
    #[serde(default)]
    pub pty: Option<Pty>,
}

/// `ProcessInput`: bytes for stdin or for the terminal.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Input {
    /// Bytes for the stdin pipe.
    Stdin(#[serde(deserialize_with = "de_bytes")] Vec<u8>),
    /// Bytes typed on the terminal.
    Pty(#[serde(deserialize_with = "de_bytes")] Vec<u8>),
}

/// `SendInputRequest`.
#[derive(Debug, Clone, Deserialize)]
pub struct SendInputRequest {
    /// The process.
    pub process: Selector,
    /// The bytes.
    pub input: Input,
}

/// `StreamInputRequest`: one message of the input stream.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamInputRequest {
    /// First: which process.
    Start {
        /// The process.
        process: Selector,
    },
    /// Input.
    Data {
        /// The bytes.
        input: Input,
    },
    /// Nothing.
    Keepalive {},
}

/// `Signal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `SIGTERM`.
    Term,
    /// `SIGKILL`.
    Kill,
}

impl<'de> Deserialize<'de> for Signal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match enum_value(&Value::deserialize(d)?, "SIGNAL_", &[("SIGTERM", 15), ("SIGKILL", 9)]) {
            Some(15) => Ok(Signal::Term),
            Some(9) => Ok(Signal::Kill),
            _ => Err(D::Error::custom("the signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL")),
        }
    }
}

/// `SendSignalRequest`.
#[derive(Debug, Clone, Deserialize)]
pub struct SendSignalRequest {
    /// The process.
    pub process: Selector,
    /// The signal.
    pub signal: Signal,
}

/// `ProcessInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessInfo {
    /// What it runs.
    pub config: ProcessConfig,
    /// The daemon's pid of it.
    #[serde(skip_serializing_if = "is_zero")]
    pub pid: u32,
    /// Its tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// `ListResponse`.
#[derive(Debug, Clone, Serialize)]
pub struct ListResponse {
    /// Running processes, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessInfo>,
}

/// `ProcessEvent.DataEvent`: output bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Output {
    /// From stdout.
    Stdout(#[serde(serialize_with = "ser_bytes")] Vec<u8>),
    /// From stderr.
    Stderr(#[serde(serialize_with = "ser_bytes")] Vec<u8>),
    /// From the terminal.
    Pty(#[serde(serialize_with = "ser_bytes")] Vec<u8>),
}

/// `ProcessEvent.EndEvent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndEvent {
    /// Exit code (-1 when a signal ended it, as Go reports).
    #[serde(skip_serializing_if = "is_zero")]
    pub exit_code: i32,
    /// Whether it exited by itself (not by a signal).
    #[serde(skip_serializing_if = "is_zero")]
    pub exited: bool,
    /// `exit status 3` or `signal: killed`, as Go prints a process state.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Why waiting failed, or the exit described as an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `ProcessEvent.StartEvent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StartEvent {
    /// The daemon's pid of the process.
    pub pid: u32,
}

/// `ProcessEvent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessEvent {
    /// First event of a stream.
    Start(StartEvent),
    /// Output.
    Data(Output),
    /// Last event of a stream.
    End(EndEvent),
    /// Nothing happened for a keepalive interval.
    Keepalive(super::filesystem::Empty),
}

/// `StartResponse` and `ConnectResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventResponse {
    /// The event.
    pub event: ProcessEvent,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::envd::decode;

    #[test]
    fn requests_read_selectors_inputs_and_signals() {
        let r: SendInputRequest = decode(br#"{"process":{"pid":"7"},"input":{"stdin":"aGk="}}"#).expect("input");
        assert_eq!((r.process, r.input), (Selector::Pid(7), Input::Stdin(b"hi".to_vec())));
        let r: SendSignalRequest = decode(br#"{"process":{"tag":"t"},"signal":"SIGNAL_SIGKILL"}"#).expect("signal");
        assert_eq!((r.process, r.signal), (Selector::Tag("t".into()), Signal::Kill));
        assert!(decode::<SendSignalRequest>(br#"{"process":{"pid":1},"signal":"SIGNAL_UNSPECIFIED"}"#).is_err());
        assert!(decode::<SelectRequest>(br#"{"process":{}}"#).is_err());
        let s: StartRequest =
            decode(br#"{"process":{"cmd":"/bin/bash","args":["-c","x"],"envs":{"A":"1"}},"pty":{"size":{"cols":80,"rows":24}},"stdin":false}"#)
                .expect("start");
        assert_eq!(s.pty.map(|p| (p.size.cols, p.size.rows)), Some((80, 24)));
        assert_eq!((s.stdin, s.process.cwd), (Some(false), None));
        let m: StreamInputRequest = decode(br#"{"data":{"input":{"pty":"AQ=="}}}"#).expect("stream input");
        assert!(matches!(m, StreamInputRequest::Data { input: Input::Pty(b) } if b == [1]));
    }

    #[test]
    fn events_are_oneofs_with_base64_bytes() {
        let data = EventResponse { event: ProcessEvent::Data(Output::Stdout(b"hi\n".to_vec())) };
        assert_eq!(serde_json::to_string(&data).expect("json"), r#"{"event":{"data":{"stdout":"aGkK"}}}"#);
        let end = EventResponse {
            event: ProcessEvent::End(EndEvent {
                exit_code: 0,
                exited: true,
                status: "exit status 0".into(),
                error: None,
            }),
        };
        assert_eq!(
            serde_json::to_string(&end).expect("json"),
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#
        );
        let info =
            ProcessInfo { config: ProcessConfig { cmd: "sleep".into(), ..Default::default() }, pid: 3, tag: None };
        assert_eq!(serde_json::to_string(&info).expect("json"), r#"{"config":{"cmd":"sleep"},"pid":3}"#);
    }
}
