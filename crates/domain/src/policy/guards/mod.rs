//! Guards the exec endpoints apply on top of the rule gate: which programs
//! may run (`commands`), which environment a call may set (`env`), which
//! executables and signals are refused outright (`process`), which URLs the
//! browser may load (`urls`). Each is a plain
//! function over a [`Grant`](super::Grant) or values, returning a
//! [`Denial`](super::Denial) with the reference's code and status.

pub mod commands;
pub mod env;
pub mod process;
pub mod urls;

pub use self::commands::{command_guard, CommandGuard, PatternError};
pub use self::env::{check_env, check_not_dangerous, check_not_secret, commands_restricted};
pub use self::process::{check_process, check_signal, ALLOWED_SIGNALS};
pub use self::urls::{Host, UrlPolicy, UrlRefusal};
