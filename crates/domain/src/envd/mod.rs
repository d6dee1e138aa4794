//! The envd data plane's domain: what the `e2b` SDK and
//! `agent_sandbox._standard` expect of a sandbox's envd, built on the
//! daemon's own file, process and terminal modules. No HTTP here.
//!
//! - [`access`]: the user a request acts as (its tokens and signed URLs
//!   are the policy engine's, [`crate::policy::signed`]).
//! - [`entry`]: envd's `EntryInfo` and listings to a depth.
//! - [`metadata`]: user metadata of files (`user.e2b.*` extended attributes).
//! - [`filesystem`]: `Stat`, `ListDir`, `MakeDir`, `Move`, `Remove`.
//! - [`processes`], [`events`]: `process.Process`'s processes and their event streams;
//!   [`start`]: `Start` as a plane of the one process use case.
//! - [`watchers`]: `WatchDir` events and the polled watchers of
//!   `CreateWatcher`/`GetWatcherEvents`, from the inotify watch of [`crate::fs::watch`];
//!   [`dir_watches`]: `WatchDir` watches a client can resume.
//!
//! Paths go through the policy's path guard like every request: relative
//! paths (and `~`) resolve against the base directory, and an empty path is
//! `/init`'s `defaultWorkdir`, else the base directory.

pub mod access;
pub mod dir_watches;
pub mod entry;
pub mod events;
pub mod filesystem;
pub mod metadata;
pub mod processes;
pub mod start;
pub mod watchers;

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use abx_wire::api::Fault;
use tokio_util::sync::CancellationToken;

pub use self::watchers::Watchers;
use crate::accounts::Account;
use crate::environment::ChildEnv;
use crate::fs::FsError;
use crate::policy::Denial;
use crate::process::Registry;

/// Why an envd operation failed; the HTTP layer maps each to a Connect code
/// (or an HTTP status on the plain endpoints) in one place.
#[derive(Debug, thiserror::Error)]
pub enum EnvdError {
    /// Nothing by that path, pid, tag or id (`not_found`).
    #[error("{0}")]
    NotFound(String),
    /// It exists already (`already_exists`).
    #[error("{0}")]
    AlreadyExists(String),
    /// A malformed or unusable request (`invalid_argument`).
    #[error("{0}")]
    Invalid(String),
    /// The target is in a state that does not allow it (`failed_precondition`).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A missing or unknown user, or a bad signature (`unauthenticated`).
    #[error("{0}")]
    Unauthenticated(String),
    /// Not allowed to the caller (`permission_denied`).
    #[error("{0}")]
    PermissionDenied(String),
    /// A bound is reached (`resource_exhausted`).
    #[error("{0}")]
    Exhausted(String),
    /// A file operation failed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The policy refused it.
    #[error(transparent)]
    Denied(#[from] Denial),
    /// Events or output were dropped, and how many (`data_loss`).
    #[error("{0}")]
    DataLoss(String),
    /// Something failed inside the server (`internal`; details logged).
    #[error("{0}")]
    Internal(String),
}

impl EnvdError {
    /// The error's row of the error table (envd answers its Connect code).
    pub fn fault(&self) -> Fault {
        match self {
            EnvdError::NotFound(_) => Fault::NotFound,
            EnvdError::AlreadyExists(_) => Fault::FileExists,
            EnvdError::Invalid(_) => Fault::BadRequest,
            EnvdError::FailedPrecondition(_) => Fault::Conflict,
            EnvdError::Unauthenticated(_) => Fault::Unauthorized,
            EnvdError::PermissionDenied(_) => Fault::Refused,
            EnvdError::Exhausted(_) => Fault::ProcessLimit,
            EnvdError::Fs(error) => error.fault(),
            EnvdError::Denied(denial) => denial.fault(),
            EnvdError::DataLoss(_) => Fault::DataLoss,
            EnvdError::Internal(_) => Fault::Internal,
        }
    }
}

impl From<crate::process::ProcessError> for EnvdError {
    fn from(error: crate::process::ProcessError) -> Self {
        use crate::process::ProcessError as P;
        match error {
            P::Invalid(m) | P::Timeout(m) => EnvdError::Invalid(m),
            P::Denied(denial) => EnvdError::Denied(denial),
            P::Spawn { message, .. } => EnvdError::Invalid(message),
            P::ProcessLimit(limit) => EnvdError::Exhausted(format!("too many processes (at most {limit})")),
            P::NotFound(pid) | P::Exited(pid) => EnvdError::NotFound(format!("process with pid {pid} not found")),
            P::Conflict(m) => EnvdError::FailedPrecondition(m),
            P::Refused(pid) => EnvdError::PermissionDenied(format!("refusing to signal pid {pid}")),
            P::Internal(m) => EnvdError::Internal(m),
        }
    }
}

/// A blocking envd task that panicked or was cancelled.
impl From<tokio::task::JoinError> for EnvdError {
    fn from(e: tokio::task::JoinError) -> Self {
        EnvdError::Internal(format!("a blocking task failed: {e}"))
    }
}

/// What `/init` sets besides the token.
#[derive(Debug, Clone, Default)]
struct Defaults {
    user: Option<String>,
    workdir: Option<String>,
    env: BTreeMap<String, String>,
}

/// The envd plane's state.
pub struct Envd {
    /// Polled watchers.
    pub watchers: Watchers,
    /// `WatchDir` watches kept for a resume.
    pub dir_watches: Arc<dir_watches::DirWatches>,
    /// Processes of `process.Process`.
    pub processes: Arc<processes::Processes>,
    defaults: RwLock<Defaults>,
    env: Arc<ChildEnv>,
}

impl std::fmt::Debug for Envd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envd").finish_non_exhaustive()
    }
}

impl Envd {
    /// The plane's state, viewing the daemon's process `registry`; terminal
    /// processes keep `scrollback` bytes.
    pub fn new(env: Arc<ChildEnv>, shutdown: CancellationToken, scrollback: usize, registry: Registry) -> Self {
        Envd {
            watchers: Watchers::new(shutdown.clone()),
            dir_watches: Arc::default(),
            processes: Arc::new(processes::Processes::new(registry, scrollback, shutdown)),
            defaults: RwLock::new(Defaults::default()),
            env,
        }
    }

    /// The child environment store.
    pub fn child_env(&self) -> &Arc<ChildEnv> {
        &self.env
    }

    /// Records an admitted `POST /init`: the variables it set (already
    /// checked by `env_set`'s rules and stored in the child environment),
    /// the default user and working directory. Blocking (the user database).
    ///
    /// # Errors
    /// [`EnvdError::Invalid`] for an unknown default user; nothing is recorded then.
    pub fn init(
        &self,
        vars: BTreeMap<String, String>,
        default_user: Option<String>,
        default_workdir: Option<String>,
    ) -> Result<(), EnvdError> {
        if let Some(user) = default_user.as_deref().filter(|u| !u.is_empty()) {
            access::account(user).map_err(|e| EnvdError::Invalid(format!("invalid default user: {e}")))?;
        }
        let mut defaults = self.defaults.write().unwrap_or_else(PoisonError::into_inner);
        defaults.env.extend(vars);
        if let Some(user) = default_user {
            defaults.user = Some(user).filter(|u| !u.is_empty());
        }
        if let Some(workdir) = default_workdir {
            defaults.workdir = Some(workdir).filter(|w| !w.is_empty());
        }
        Ok(())
    }

    /// The variables `/init` set (`GET /envs`).
    pub fn init_env(&self) -> BTreeMap<String, String> {
        self.defaults.read().unwrap_or_else(PoisonError::into_inner).env.clone()
    }

    /// The user a request acts as: the one it names, else `/init`'s default, else the server's own (`None`).
    pub fn user_name(&self, named: Option<String>) -> Option<String> {
        named
            .filter(|n| !n.is_empty())
            .or_else(|| self.defaults.read().unwrap_or_else(PoisonError::into_inner).user.clone())
    }

    /// The working directory of a process started as `account` that asks for
    /// `requested`: that directory (relative paths and `~` below `base`),
    /// else `/init`'s `defaultWorkdir`, else the account's home (when it is a
    /// directory), else `base`. As another user, the account must be able
    /// to enter it. Blocking (it looks at the file system).
    ///
    /// # Errors
    /// `invalid_path` for a malformed path; [`EnvdError::PermissionDenied`]
    /// for a directory the account cannot enter.
    pub fn workdir(
        &self,
        requested: Option<&str>,
        account: &Account,
        base: &std::path::Path,
    ) -> Result<String, EnvdError> {
        let requested = requested.filter(|r| !r.is_empty());
        let workdir = self.defaults.read().unwrap_or_else(PoisonError::into_inner).workdir.clone();
        let chosen = match (requested, workdir.as_deref()) {
            (Some(raw), _) | (None, Some(raw)) => base.join(self.path(raw)?),
            (None, None) if account.home.is_dir() => account.home.clone(),
            (None, None) => base.to_path_buf(),
        };
        let chosen = crate::policy::paths::normalize(&chosen);
        if account.is_other() && chosen.is_dir() && !account.may_enter(&chosen) {
            return Err(EnvdError::PermissionDenied(format!(
                "user '{}' cannot enter the working directory {}",
                account.name,
                chosen.display()
            )));
        }
        Ok(chosen.display().to_string())
    }

    /// `raw` as the path guard takes it: empty is the default working
    /// directory (else the base directory), `~` and `~/...` are below the base directory.
    ///
    /// Every envd path passes here first, so a path no file system can name
    /// (a NUL byte, too long) is refused as on the API port, before anything is touched.
    ///
    /// # Errors
    /// [`EnvdError::Invalid`] for `~user` paths; `invalid_path` (invalid argument).
    pub fn path(&self, raw: &str) -> Result<String, EnvdError> {
        if raw.is_empty() {
            let workdir = self.defaults.read().unwrap_or_else(PoisonError::into_inner).workdir.clone();
            let workdir = workdir.unwrap_or_else(|| ".".into());
            crate::policy::paths::check_spelling(&workdir, "")?;
            return Ok(workdir);
        }
        crate::policy::paths::check_spelling(raw, "")?;
        match raw.strip_prefix('~') {
            None => Ok(raw.to_string()),
            Some("") => Ok(".".into()),
            Some(rest) => match rest.strip_prefix('/') {
                Some("") => Ok(".".into()),
                Some(below) => Ok(below.to_string()),
                None => Err(EnvdError::Invalid(format!("cannot expand another user's home directory: '{raw}'"))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envd() -> Envd {
        let env = Arc::new(ChildEnv::from_vars([("PATH".to_string(), "/bin".to_string())], &[]));
        Envd::new(env, CancellationToken::new(), 4096, Registry::new())
    }

    #[test]
    fn paths_expand_home_and_default_to_the_workdir() {
        let envd = envd();
        assert_eq!(envd.path("").expect("empty"), ".");
        assert_eq!(envd.path("~").expect("home"), ".");
        assert_eq!(envd.path("~/a/b").expect("below"), "a/b");
        assert_eq!(envd.path("/abs").expect("abs"), "/abs");
        assert!(envd.path("~root/x").is_err());
        for bad in ["a\0b", "~/x\0", &"a/".repeat(crate::policy::paths::MAX_PATH_LENGTH)] {
            let refused = envd.path(bad).map_err(|e| match e {
                EnvdError::Denied(denial) => denial.code(),
                other => panic!("{other:?}"),
            });
            assert_eq!(refused, Err("invalid_path"), "{bad:?}");
        }
        envd.init(BTreeMap::new(), None, Some("/w".into())).expect("init");
        assert_eq!(envd.path("").expect("workdir"), "/w");
    }

    #[test]
    fn a_process_starts_where_it_asks_else_the_workdir_else_home() {
        let envd = envd();
        let home = tempfile::tempdir().expect("home");
        let me = access::own().expect("own");
        let account = Account { home: home.path().to_path_buf(), ..me.clone() };
        let base = std::path::Path::new("/base");
        assert_eq!(envd.workdir(None, &account, base).expect("home"), home.path().display().to_string());
        assert_eq!(envd.workdir(Some(""), &account, base).expect("home"), home.path().display().to_string());
        let homeless = Account { home: "/no/such/home".into(), ..me };
        assert_eq!(envd.workdir(None, &homeless, base).expect("base"), "/base");
        assert_eq!(envd.workdir(Some("/"), &account, base).expect("root"), "/");
        assert_eq!(envd.workdir(Some("sub/../x"), &account, base).expect("relative"), "/base/x");
        assert_eq!(envd.workdir(Some("~"), &account, base).expect("tilde"), "/base");
        envd.init(BTreeMap::new(), None, Some("/w".into())).expect("init");
        assert_eq!(envd.workdir(None, &account, base).expect("workdir"), "/w");
        assert_eq!(envd.workdir(Some("/tmp"), &account, base).expect("asked"), "/tmp");
    }

    #[test]
    fn init_records_variables_and_refuses_unknown_users() {
        let envd = envd();
        envd.init(BTreeMap::from([("A".to_string(), "1".to_string())]), None, None).expect("init");
        assert_eq!(envd.init_env(), BTreeMap::from([("A".to_string(), "1".to_string())]));
        let unknown = envd.init(BTreeMap::from([("B".into(), "2".into())]), Some("no-such-user-xyz".into()), None);
        assert!(matches!(unknown, Err(EnvdError::Invalid(_))));
        assert!(!envd.init_env().contains_key("B"), "nothing is recorded from a refused /init");
    }
}
