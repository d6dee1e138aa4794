//! Wire types: the JSON requests and responses of the HTTP API.
//!
//! Handlers (`http`) and the companion client (`client`) both use these
//! types, so the two cannot drift. Field names and shapes follow the Python
//! `agent-sandbox-server` 0.4.0a6 contract.

pub mod browser;
pub mod code;
pub mod commands;
pub mod core;
pub mod envd;
pub mod error;
pub mod fault;
pub mod files;
pub mod process;
pub mod pty;
pub mod system;

pub use self::commands::{CommandArgInfo, CommandInfo, CommandList, CommandResult};
pub use self::core::{Capabilities, CheckRequest, Decision, EndpointState, Health};
pub use self::error::{ErrorBody, ErrorCode};
pub use self::fault::{ConnectCode, Fault};
pub use self::pty::{
    PtyClientMessage, PtyClosed, PtyCreateRequest, PtyCreated, PtyMessage, PtyResizeRequest, PtySessionInfo,
    PtySessionList,
};
pub use self::system::{
    CgroupStats, EnvQuery, EnvSetRequest, EnvUpdated, EnvVariables, ListeningPort, PackageInfo, PackageList,
    PackagesQuery, PortList, SystemInfo, SystemMetrics,
};
