//! The code contexts of the code-interpreter port.
//!
//! A context is a language, a working directory and a [`Kernel`]; its
//! state lives in the interpreter. A context whose interpreter died gets a
//! fresh one at its next execution (the death was reported to the
//! execution it happened in); a restart starts a fresh one in the same
//! working directory. Executions without a context id run in the
//! language's default context. A fresh server lists the default Python and
//! JavaScript contexts (as the code-interpreter server does) but starts
//! their interpreters only at their first execution; other languages' default
//! contexts are created on first use. Contexts are listed in creation order.
//! Contexts created through the API are bounded in number, and those idle
//! past the configured lifetime are removed (the two built-in defaults only
//! lose their interpreter, which the next execution starts again).
//!
//! A caller whose identity names a user (`auth.tokens[].user`) sees only the
//! contexts that run as that user, and its executions without a context id
//! run in that user's own default context: one identity's interpreter (and
//! its variables) is never another's.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use abx_wire::api::code::{ContextInfo, ExecuteRequest, OutputLine};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::kernel::{Execution, Kernel, KernelSpec, Refused, StartError, StopReason};
use super::language::{Interpreters, Language};
use super::{new_id, CodeError};
use crate::accounts::Account;
use crate::environment::ChildEnv;

mod idle;
use self::idle::reap_idle;

/// Lines buffered between a running execution and its client.
const SINK_CAPACITY: usize = 32;
/// Expired ids remembered so a late caller learns why its context is gone.
const TOMBSTONES: usize = 256;

/// Settings of the code interpreter.
#[derive(Debug, Clone)]
pub struct CodeConfig {
    /// Live contexts at most (default contexts included).
    pub max_contexts: usize,
    /// Contexts without an execution for this long are removed.
    pub idle_timeout: Option<Duration>,
    /// Interpreter programs.
    pub interpreters: Interpreters,
    /// Default working directory, and the base of relative ones.
    pub base_dir: PathBuf,
}

/// The code interpreter: every context, and the limits they live under.
pub struct CodeInterpreter {
    config: CodeConfig,
    env: Arc<ChildEnv>,
    registry: Mutex<Registry>,
    creating_default: tokio::sync::Mutex<()>,
    shutdown: CancellationToken,
}

#[derive(Default)]
struct Registry {
    contexts: HashMap<String, Arc<Context>>,
    /// Default contexts by language and the uid they run as (`None`: the daemon's).
    defaults: HashMap<(Language, Option<u32>), String>,
    expired: VecDeque<String>,
    starting: usize,
    created: u64,
}

/// One code context.
pub struct Context {
    id: String,
    /// Creation order.
    order: u64,
    /// A default context the server lists from the start (not counted in the limit).
    builtin: bool,
    language: Language,
    cwd: PathBuf,
    /// The user its interpreter runs as, `None`: the daemon's.
    user: Option<Account>,
    kernel: tokio::sync::Mutex<Option<Kernel>>,
    counter: AtomicU64,
    activity: Mutex<Activity>,
}

struct Activity {
    last: Instant,
    running: usize,
}

/// Marks a context busy while an execution is queued or running.
struct Busy(Arc<Context>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut activity = self.0.activity.lock().unwrap_or_else(PoisonError::into_inner);
        activity.running = activity.running.saturating_sub(1);
        activity.last = Instant::now();
    }
}

/// A slot counted against the limit while a context starts.
struct Reservation<'a>(&'a CodeInterpreter);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut registry = self.0.lock();
        registry.starting = registry.starting.saturating_sub(1);
    }
}

impl Context {
    fn info(&self) -> ContextInfo {
        ContextInfo {
            id: self.id.clone(),
            language: self.language.as_str().into(),
            cwd: self.cwd.display().to_string(),
        }
    }

    fn busy(self: &Arc<Self>) -> Busy {
        let mut activity = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        activity.running += 1;
        activity.last = Instant::now();
        Busy(Arc::clone(self))
    }

    fn idle_for(&self) -> Option<Duration> {
        let activity = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        (activity.running == 0).then(|| activity.last.elapsed())
    }

    fn uid(&self) -> Option<u32> {
        self.user.as_ref().map(|u| u.uid)
    }

    /// The interpreter's pid, when one runs.
    pub async fn pid(&self) -> Option<i32> {
        self.kernel.lock().await.as_ref().filter(|k| k.death().is_none()).map(Kernel::pid)
    }
}

impl CodeInterpreter {
    /// An interpreter with its built-in default contexts (Python, and
    /// JavaScript when Node.js is installed), none started yet; `shutdown`
    /// stops its reaper.
    pub fn new(config: CodeConfig, env: Arc<ChildEnv>, shutdown: CancellationToken) -> Arc<Self> {
        let interpreter = Arc::new(CodeInterpreter {
            config,
            env,
            registry: Mutex::new(Registry::default()),
            creating_default: tokio::sync::Mutex::new(()),
            shutdown,
        });
        for language in [Language::Python, Language::JavaScript] {
            if language == Language::JavaScript
                && interpreter.spec(language, &interpreter.config.base_dir, None).is_err()
            {
                continue;
            }
            let context = interpreter.register(language, interpreter.config.base_dir.clone(), None, true, None);
            interpreter.lock().defaults.insert((language, None), context.id.clone());
        }
        if let Some(idle) = interpreter.config.idle_timeout {
            tokio::spawn(reap_idle(Arc::downgrade(&interpreter), idle, interpreter.shutdown.clone()));
        }
        interpreter
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `POST /contexts`: starts a context running as `user` (the caller
    /// identity's, `None`: the daemon's) and waits until it is ready.
    ///
    /// # Errors
    /// An unsupported language, a missing interpreter, a bad `cwd`, the
    /// context limit, or an interpreter that does not start.
    pub async fn create(
        &self,
        language: Option<&str>,
        cwd: Option<&str>,
        user: Option<&Account>,
    ) -> Result<ContextInfo, CodeError> {
        let language = Language::parse(language)?;
        let cwd = self.resolve_cwd(cwd).await?;
        let context = self.start_context(language, cwd, user).await?;
        Ok(context.info())
    }

    async fn start_context(
        &self,
        language: Language,
        cwd: PathBuf,
        user: Option<&Account>,
    ) -> Result<Arc<Context>, CodeError> {
        let spec = self.spec(language, &cwd, user)?;
        let _reservation = self.reserve()?;
        let kernel = start(spec).await?;
        if self.shutdown.is_cancelled() {
            return Err(CodeError::ShuttingDown);
        }
        Ok(self.register(language, cwd, Some(kernel), false, user.cloned()))
    }

    fn register(
        &self,
        language: Language,
        cwd: PathBuf,
        kernel: Option<Kernel>,
        builtin: bool,
        user: Option<Account>,
    ) -> Arc<Context> {
        let mut registry = self.lock();
        registry.created += 1;
        let context = Arc::new(Context {
            id: new_id(),
            order: registry.created,
            builtin,
            language,
            cwd,
            user,
            kernel: tokio::sync::Mutex::new(kernel),
            counter: AtomicU64::new(0),
            activity: Mutex::new(Activity { last: Instant::now(), running: 0 }),
        });
        registry.contexts.insert(context.id.clone(), Arc::clone(&context));
        context
    }

    /// How many contexts there are, whoever they run as.
    pub fn count(&self) -> usize {
        self.lock().contexts.len()
    }

    /// `GET /contexts`: those running as `user`, in creation order.
    pub fn list(&self, user: Option<&Account>) -> Vec<ContextInfo> {
        let registry = self.lock();
        let uid = user.map(|u| u.uid);
        let mut contexts: Vec<&Arc<Context>> = registry.contexts.values().filter(|c| c.uid() == uid).collect();
        contexts.sort_by_key(|c| c.order);
        contexts.into_iter().map(|c| c.info()).collect()
    }

    /// The context `id`, when it runs as `user`.
    ///
    /// # Errors
    /// [`CodeError::ContextNotFound`] (for another user's too), or
    /// [`CodeError::ContextExpired`] for one removed while idle.
    pub fn get(&self, id: &str, user: Option<&Account>) -> Result<Arc<Context>, CodeError> {
        let registry = self.lock();
        if let Some(context) = registry.contexts.get(id) {
            if context.uid() != user.map(|u| u.uid) {
                return Err(CodeError::ContextNotFound(id.to_string()));
            }
            return Ok(Arc::clone(context));
        }
        match (registry.expired.iter().any(|e| e == id), self.config.idle_timeout) {
            (true, Some(idle)) => Err(CodeError::ContextExpired { id: id.to_string(), idle_seconds: idle.as_secs() }),
            _ => Err(CodeError::ContextNotFound(id.to_string())),
        }
    }

    /// `POST /contexts/{id}/restart`: a fresh interpreter in the same working directory.
    ///
    /// # Errors
    /// An unknown context, or an interpreter that does not start.
    pub async fn restart(&self, id: &str, user: Option<&Account>) -> Result<ContextInfo, CodeError> {
        let context = self.get(id, user)?;
        let mut slot = context.kernel.lock().await;
        if let Some(kernel) = slot.take() {
            kernel.stop(StopReason::Restart);
            kernel.stopped().await;
        }
        context.counter.store(0, Ordering::SeqCst);
        *slot = Some(start(self.spec(context.language, &context.cwd, context.user.as_ref())?).await?);
        Ok(context.info())
    }

    /// `DELETE /contexts/{id}`: stops its interpreter and forgets it.
    ///
    /// # Errors
    /// An unknown context (another user's too).
    pub async fn delete(&self, id: &str, user: Option<&Account>) -> Result<(), CodeError> {
        let context = {
            let mut registry = self.lock();
            let uid = user.map(|u| u.uid);
            if registry.contexts.get(id).is_none_or(|c| c.uid() != uid) {
                return Err(CodeError::ContextNotFound(id.to_string()));
            }
            let context = registry.contexts.remove(id).ok_or_else(|| CodeError::ContextNotFound(id.to_string()))?;
            registry.defaults.retain(|_, default| default != id);
            context
        };
        if let Some(kernel) = context.kernel.lock().await.take() {
            kernel.stop(StopReason::Delete);
        }
        Ok(())
    }

    /// `POST /execute`: checks the request, then runs it in the background
    /// in a context of `user`; the lines arrive on the receiver, which ends
    /// after the last one.
    ///
    /// Dropping the receiver interrupts the execution.
    ///
    /// # Errors
    /// Request errors, an unknown context, or a default context that cannot start.
    pub async fn execute(
        self: &Arc<Self>,
        request: ExecuteRequest,
        user: Option<&Account>,
    ) -> Result<mpsc::Receiver<OutputLine>, CodeError> {
        let ExecuteRequest { code, context_id, language, env_vars, timeout } = request;
        if context_id.is_some() && language.is_some() {
            return Err(CodeError::ContextAndLanguage);
        }
        let env = validate_env(env_vars.unwrap_or_default())?;
        if code.contains('\0') {
            return Err(CodeError::Invalid("code must not contain NUL characters".into()));
        }
        let timeout = match timeout {
            None => None,
            Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t.min(1e9))),
            Some(_) => return Err(CodeError::Invalid("timeout must be a positive number of seconds".into())),
        };
        let context = match context_id {
            Some(id) => self.get(&id, user)?,
            None => self.default_context(Language::parse(language.as_deref())?, user).await?,
        };
        let (sink, lines) = mpsc::channel(SINK_CAPACITY);
        let busy = context.busy();
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let mut slot = context.kernel.lock().await;
            if slot.as_ref().is_none_or(|k| k.death().is_some()) {
                // Only a dead kernel needs a spec (an environment snapshot and a PATH lookup).
                let started = match this.spec(context.language, &context.cwd, context.user.as_ref()) {
                    Ok(spec) => start(spec).await,
                    Err(e) => Err(e),
                };
                match started {
                    Ok(kernel) => {
                        context.counter.store(0, Ordering::SeqCst);
                        *slot = Some(kernel);
                    }
                    Err(e) => {
                        let _ = sink
                            .send(OutputLine::Error {
                                name: "ContextDied".into(),
                                value: e.to_string(),
                                traceback: String::new(),
                            })
                            .await;
                        return;
                    }
                }
            }
            let seq = context.counter.fetch_add(1, Ordering::SeqCst) + 1;
            let execution = Execution { seq, code, env, timeout, sink, hold: Some(Box::new(busy)) };
            let refused = match slot.as_ref() {
                Some(kernel) => kernel.submit(execution).err(),
                None => Some(Refused::Dead(execution)),
            };
            drop(slot);
            if let Some(refused) = refused {
                let (execution, value) = match refused {
                    Refused::Busy(x) => (x, "too many executions are waiting for this context"),
                    Refused::Dead(x) => (x, "the context's interpreter stopped; run the code again"),
                };
                let line =
                    OutputLine::Error { name: "ContextBusy".into(), value: value.into(), traceback: String::new() };
                let _ = execution.sink.send(line).await;
            }
        });
        Ok(lines)
    }

    async fn default_context(&self, language: Language, user: Option<&Account>) -> Result<Arc<Context>, CodeError> {
        let key = (language, user.map(|u| u.uid));
        let existing = |this: &Self| {
            let registry = this.lock();
            registry.defaults.get(&key).and_then(|id| registry.contexts.get(id)).cloned()
        };
        if let Some(context) = existing(self) {
            return Ok(context);
        }
        let _creating = self.creating_default.lock().await;
        if let Some(context) = existing(self) {
            return Ok(context);
        }
        let context = self.start_context(language, self.config.base_dir.clone(), user).await?;
        self.lock().defaults.insert(key, context.id.clone());
        Ok(context)
    }

    /// The interpreter pid of context `id` (for tests and diagnostics).
    ///
    /// # Errors
    /// An unknown context.
    pub async fn pid(&self, id: &str, user: Option<&Account>) -> Result<Option<i32>, CodeError> {
        Ok(self.get(id, user)?.pid().await)
    }

    /// Stops every interpreter (at server shutdown) and waits for them, at most `grace`.
    pub async fn shutdown(&self, grace: Duration) {
        let contexts: Vec<_> = {
            let mut registry = self.lock();
            registry.defaults.clear();
            registry.contexts.drain().map(|(_, c)| c).collect()
        };
        let mut kernels = Vec::new();
        for context in contexts {
            if let Some(kernel) = context.kernel.lock().await.take() {
                kernel.stop(StopReason::Shutdown);
                kernels.push(kernel);
            }
        }
        let all = futures_util::future::join_all(kernels.iter().map(Kernel::stopped));
        let _ = tokio::time::timeout(grace, all).await;
    }

    fn reserve(&self) -> Result<Reservation<'_>, CodeError> {
        let mut registry = self.lock();
        let live = registry.contexts.values().filter(|c| !c.builtin).count() + registry.starting;
        if live >= self.config.max_contexts {
            return Err(CodeError::TooManyContexts(live));
        }
        registry.starting += 1;
        Ok(Reservation(self))
    }

    fn spec(&self, language: Language, cwd: &Path, user: Option<&Account>) -> Result<KernelSpec, CodeError> {
        if self.shutdown.is_cancelled() {
            return Err(CodeError::ShuttingDown);
        }
        let mut env = self.env.snapshot();
        let program = self.config.interpreters.resolve(language, env.get("PATH").map(String::as_str))?;
        if let Some(user) = user {
            user.login_env(&mut env);
        }
        let run_as = user.map(Account::run_as);
        Ok(KernelSpec { language, program, cwd: cwd.to_path_buf(), env, run_as })
    }

    async fn resolve_cwd(&self, cwd: Option<&str>) -> Result<PathBuf, CodeError> {
        let Some(raw) = cwd.filter(|c| !c.is_empty()) else { return Ok(self.config.base_dir.clone()) };
        if raw.contains('\0') {
            return Err(CodeError::InvalidCwd { path: raw.into(), reason: "contains a NUL character" });
        }
        let path = std::path::absolute(self.config.base_dir.join(raw)).unwrap_or_else(|_| PathBuf::from(raw));
        match tokio::fs::metadata(&path).await {
            Ok(meta) if meta.is_dir() => Ok(path),
            Ok(_) => Err(CodeError::InvalidCwd { path: raw.into(), reason: "not a directory" }),
            Err(_) => Err(CodeError::InvalidCwd { path: raw.into(), reason: "no such directory" }),
        }
    }
}

async fn start(spec: KernelSpec) -> Result<Kernel, CodeError> {
    let language = spec.language.as_str();
    Kernel::start(spec).await.map_err(|e| match e {
        StartError::Missing(program) => CodeError::RuntimeMissing { language, program },
        e => CodeError::StartFailed { language, detail: e.to_string() },
    })
}

/// Checks per-execution variables: names must be identifiers, nothing may hold NUL.
fn validate_env(vars: std::collections::BTreeMap<String, String>) -> Result<Vec<(String, String)>, CodeError> {
    for (name, value) in &vars {
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(CodeError::Invalid(format!(
                "env_vars: '{name}' is not a valid variable name (letters, digits and _, not starting with a digit)"
            )));
        }
        if value.contains('\0') {
            return Err(CodeError::Invalid(format!("env_vars: the value of '{name}' contains a NUL character")));
        }
    }
    Ok(vars.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_must_be_identifiers() {
        let ok = validate_env([("A_1".to_string(), "it's \"x\"".to_string())].into()).expect("valid");
        assert_eq!(ok.len(), 1);
        for bad in ["1A", "A-B", "", "A B", "É"] {
            assert!(validate_env([(bad.to_string(), String::new())].into()).is_err(), "{bad:?}");
        }
        assert!(validate_env([("A".to_string(), "a\0b".to_string())].into()).is_err());
    }
}
