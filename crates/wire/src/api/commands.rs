//! Wire types of the commands group: `GET /commands` and `POST /commands/{name}`.

use serde::{Deserialize, Serialize};

/// One argument of a registered command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct CommandArgInfo {
    /// Its name.
    pub name: String,
    /// `string`, `integer`, `float`, `boolean` or `string_array`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether callers must give it.
    pub required: bool,
    /// Its default as the reference lists it (a string; arrays as JSON text), if any.
    pub default: Option<String>,
    /// What it is for.
    #[serde(default)]
    pub description: String,
}

/// One registered command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct CommandInfo {
    /// Its name.
    pub name: String,
    /// Its arguments, in declaration order.
    pub args: Vec<CommandArgInfo>,
    /// What it does.
    #[serde(default)]
    pub description: String,
}

/// Answer of `GET /commands`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct CommandList {
    /// The commands the caller may run.
    pub commands: Vec<CommandInfo>,
}

/// Answer of `POST /commands/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(any(test, feature = "openapi"), derive(schemars::JsonSchema))]
pub struct CommandResult {
    /// What the command printed: JSON when it printed JSON, else its text.
    pub result: serde_json::Value,
}
