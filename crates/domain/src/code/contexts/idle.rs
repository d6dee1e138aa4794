//! The idle reaper of code contexts: contexts without an execution for the
//! configured lifetime are removed (the built-in defaults only lose their
//! interpreter, which the next execution starts again).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{CodeInterpreter, Context, StopReason, TOMBSTONES};

impl CodeInterpreter {
    fn expire(&self, idle: Duration) {
        let expired: Vec<Arc<Context>> = {
            let mut registry = self.lock();
            let ids: Vec<String> = registry
                .contexts
                .iter()
                .filter(|(_, c)| c.idle_for().is_some_and(|d| d >= idle))
                .map(|(id, _)| id.clone())
                .collect();
            let mut removed = Vec::new();
            for id in ids {
                if let Some(context) = registry.contexts.get(&id).filter(|c| c.builtin) {
                    // A built-in default stays listed; only a running interpreter is stopped.
                    if context.kernel.try_lock().is_ok_and(|k| k.is_some()) {
                        removed.push(Arc::clone(context));
                    }
                    continue;
                }
                if let Some(context) = registry.contexts.remove(&id) {
                    registry.defaults.retain(|_, d| *d != id);
                    registry.expired.push_back(id);
                    removed.push(context);
                }
            }
            while registry.expired.len() > TOMBSTONES {
                registry.expired.pop_front();
            }
            removed
        };
        for context in expired {
            tracing::info!(context = %context.id, language = context.language.as_str(), builtin = context.builtin, "stopping an idle code context");
            if let Ok(mut slot) = context.kernel.try_lock() {
                if let Some(kernel) = slot.take() {
                    kernel.stop(StopReason::Delete);
                }
            }
        }
    }
}

pub(super) async fn reap_idle(
    interpreter: std::sync::Weak<CodeInterpreter>,
    idle: Duration,
    shutdown: CancellationToken,
) {
    let period = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    let mut ticker = tokio::time::interval(period);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => match interpreter.upgrade() {
                Some(interpreter) => interpreter.expire(idle),
                None => return,
            },
        }
    }
}
