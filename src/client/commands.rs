//! Client calls of the commands group: list the registered commands, run one.

use serde_json::{Map, Value};

use super::{Client, ClientError};
use crate::api::{CommandInfo, CommandList, CommandResult};

impl Client {
    /// `GET /commands`: the commands this client may run.
    ///
    /// # Errors
    /// Transport errors and error answers.
    pub async fn commands(&self) -> Result<Vec<CommandInfo>, ClientError> {
        let list: CommandList = self.call("list_commands", &[], &[], None::<&()>).await?;
        Ok(list.commands)
    }

    /// `POST /commands/{name}`: runs a command with `args`; returns its result
    /// (JSON when the command printed JSON, else its text).
    ///
    /// # Errors
    /// 404 unknown command, 400 refused arguments (`ValueError`/`TypeError`),
    /// 500 failure or timeout (`TimeoutError`), transport errors.
    pub async fn run_command(&self, name: &str, args: &Map<String, Value>) -> Result<Value, ClientError> {
        let answer: CommandResult = self.call("run_command", &[("name", name)], &[], Some(args)).await?;
        Ok(answer.result)
    }
}
