//! Client calls of the commands group: list the registered commands, run one.

use abx_wire::api::{CommandInfo, CommandList, CommandResult};
use serde_json::{Map, Value};

use super::{Client, ClientError};

impl Client {
    /// `GET /commands`: the registered commands this client may run.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// for command in client.commands().await? {
    ///     println!("{}: {}", command.name, command.description);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn commands(&self) -> Result<Vec<CommandInfo>, ClientError> {
        let list: CommandList = self.call("list_commands", &[], &[], None::<&()>).await?;
        Ok(list.commands)
    }

    /// `POST /commands/{name}`: runs a registered command with `args`;
    /// returns its result (JSON when the command printed JSON, else its text).
    ///
    /// # Errors
    /// 404 `command_not_found`, 400 refused arguments (`ValueError`/`TypeError`),
    /// 500 failure or timeout (`TimeoutError`), transport errors.
    ///
    /// ```no_run
    /// use serde_json::{json, Map, Value};
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let mut args = Map::new();
    /// args.insert("environment".into(), json!("staging"));
    /// let result: Value = client.run_command("deploy", &args).await?;
    /// println!("{result}");
    /// # Ok(()) }
    /// ```
    pub async fn run_command(&self, name: &str, args: &Map<String, Value>) -> Result<Value, ClientError> {
        let answer: CommandResult = self.call("run_command", &[("name", name)], &[], Some(args)).await?;
        Ok(answer.result)
    }
}
