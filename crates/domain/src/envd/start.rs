//! envd's `Start` as a [`Plane`] of the one process use case
//! ([`crate::process::start::start_process`]).
//!
//! What envd adds to the API port's start: the account the request acts
//! as (the identity's own user, else the one it names, else `/init`'s
//! default, else the server's) gives the home, the login variables and the
//! default working directory; the command is checked before a slot is
//! reserved, because the account and the working directory go into it; a
//! terminal `Start` also holds the terminal endpoint's grant and a place
//! under `max_sessions`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use abx_wire::api::envd::process::StartRequest;
use abx_wire::endpoints::Limit;

use super::processes::{Held, Process, Processes, StartOptions};
use super::{access, Envd, EnvdError};
use crate::accounts::Account;
use crate::environment::ChildEnv;
use crate::policy::Grant;
use crate::process::exec::{prepare, CommandLine, ExecInput, ExecKind, ExecSpec};
use crate::process::registry::{Registry, Slot};
use crate::process::start::{viewer, CommandRequest, Plane};
use crate::pty::Terminals;

/// The command of a `Start`: the words, working directory and variables
/// it asks for, made into a command for the account it acts as.
pub struct Command {
    envd: Arc<Envd>,
    base: PathBuf,
    argv: Vec<String>,
    cwd: Option<String>,
    envs: std::collections::BTreeMap<String, String>,
}

impl CommandRequest for Command {
    type Error = EnvdError;

    fn blocks(&self) -> bool {
        true
    }

    /// As envd: the account's home, login variables and `PATH`, unless the request says otherwise.
    fn command(self, grant: &Grant, env: &ChildEnv, kind: ExecKind) -> Result<ExecSpec, EnvdError> {
        let own = grant.identity().user.as_deref();
        let mut account = match self.envd.account(own, grant.user().map(str::to_string))? {
            Some(account) => account,
            None => access::own()?,
        };
        if !account.is_other() {
            // The server's own user: its environment says where home and the shell are.
            account.home = env.get("HOME").map_or(account.home, Into::into);
            account.shell = env.get("SHELL").map_or(account.shell, Into::into);
        }
        let cwd = self.envd.workdir(self.cwd.as_deref(), &account, &self.base)?;
        let request = ExecInput {
            cwd: Some(cwd),
            env: Some(self.envs.clone()),
            user: Some(account.name.clone()).filter(|_| account.is_other()),
            ..ExecInput::new(CommandLine::Argv(self.argv))
        };
        let mut spec = prepare(grant, env, &request, kind)?;
        access::login_env(&account, &mut spec.env, &self.envs);
        Ok(spec)
    }
}

/// How a `Start` spawns: in envd's process table, on a terminal when it asks for one.
pub struct Start {
    processes: Arc<Processes>,
    terminals: Arc<Terminals>,
    /// The terminal endpoint's grant, for a terminal `Start`.
    terminal: Option<Grant>,
    options: StartOptions,
}

impl Start {
    /// The command and the plane of `request`, a `Start` that runs at most
    /// `lifetime`, with relative paths under `base`.
    ///
    /// # Errors
    /// The terminal endpoint's refusal (for a terminal `Start`), then
    /// [`EnvdError::Invalid`] for an empty `cmd`.
    pub fn new(
        grant: &Grant,
        envd: &Arc<Envd>,
        terminals: &Arc<Terminals>,
        base: PathBuf,
        request: StartRequest,
        lifetime: Option<Duration>,
    ) -> Result<(Command, Start), EnvdError> {
        let terminal = match request.pty {
            Some(_) => Some(grant.also()?),
            None => None,
        };
        let config = request.process;
        if config.cmd.is_empty() {
            return Err(EnvdError::Invalid("process.cmd is empty".into()));
        }
        let argv = std::iter::once(config.cmd.clone()).chain(config.args.iter().cloned()).collect();
        let command =
            Command { envd: Arc::clone(envd), base, argv, cwd: config.cwd.clone(), envs: config.envs.clone() };
        let size = request.pty.map(|p| {
            let side = |n: u32| u16::try_from(n).unwrap_or(u16::MAX).max(1);
            (side(p.size.cols), side(p.size.rows))
        });
        let options =
            StartOptions { config, tag: request.tag, terminal: size, stdin: request.stdin.unwrap_or(true), lifetime };
        let plane =
            Start { processes: Arc::clone(&envd.processes), terminals: Arc::clone(terminals), terminal, options };
        Ok((command, plane))
    }
}

impl Plane for Start {
    type Started = Arc<Process>;
    type Request = Command;

    fn kind(&self) -> ExecKind {
        ExecKind::Start
    }

    fn registry(&self) -> &Registry {
        self.processes.registry()
    }

    fn command_first(&self) -> bool {
        true
    }

    async fn spawn(self, grant: &Grant, spec: ExecSpec, slot: Slot) -> Result<Arc<Process>, EnvdError> {
        let session = match &self.terminal {
            Some(terminal) => {
                let max = terminal.limit(Limit::MaxSessions).map(|l| usize::try_from(l.as_u64()).unwrap_or(usize::MAX));
                Some(self.terminals.lease(max).map_err(|e| EnvdError::Exhausted(e.to_string()))?)
            }
            None => None,
        };
        self.processes.start(&viewer(grant), spec, self.options, Held { slot, session }).await
    }
}

impl Envd {
    /// The account a request acts as, if any: the user its identity's
    /// programs run as (`auth.tokens[].user`) when it names one, and then
    /// only that one; else the user the request names, else `/init`'s default.
    /// Blocking (the user database).
    ///
    /// # Errors
    /// `unauthenticated` for an unknown user, `permission_denied` for another
    /// user while not root, or for another user than the identity's own.
    pub fn account(&self, own: Option<&Account>, named: Option<String>) -> Result<Option<Account>, EnvdError> {
        if let Some(own) = own.filter(|u| u.is_other()) {
            if let Some(asked) = named.filter(|n| !n.is_empty() && !own.is(n)) {
                return Err(EnvdError::PermissionDenied(format!(
                    "cannot act as user '{asked}': this identity acts as '{}' only",
                    own.name
                )));
            }
            return Ok(Some(own.clone()));
        }
        self.user_name(named).map(|name| access::account(&name)).transpose()
    }
}
