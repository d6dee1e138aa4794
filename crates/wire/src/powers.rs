//! The powers an endpoint exercises: a small closed vocabulary every row of
//! the endpoint table declares ([`crate::endpoints::Endpoint::powers`]).
//!
//! The presets, the lint and `/capabilities` derive from the powers rather
//! than from group names, so a group added later cannot be forgotten: a row
//! that runs programs is switched off by `read-only`, `hardened` and
//! `locked` whatever its group, unless a policy rule names it.

use std::fmt;

/// One thing an endpoint can do to the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Power {
    /// Starts a program, a shell, a terminal or code chosen by the caller
    /// (an agent CLI and a browser page's scripts count): whatever the
    /// program does, the caller can do.
    RunsPrograms,
    /// Runs a command the operator registered, with checked arguments.
    RunsRegistered,
    /// Reads files under the roots.
    ReadsFiles,
    /// Creates, changes or removes files under the roots.
    WritesFiles,
    /// Opens network connections to addresses the caller chooses.
    Network,
    /// Holds or hands out credentials (vault secrets, signing secrets).
    Credentials,
    /// Reads or changes only the daemon's own records and what it started
    /// (discovery, listings, system facts, signals to its own processes).
    DaemonState,
}

impl Power {
    /// Every power, in the order documents list them.
    pub const ALL: [Power; 7] = [
        Power::RunsPrograms,
        Power::RunsRegistered,
        Power::ReadsFiles,
        Power::WritesFiles,
        Power::Network,
        Power::Credentials,
        Power::DaemonState,
    ];

    /// The wire name (`runs_programs`, ...), as `/capabilities` and the docs spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Power::RunsPrograms => "runs_programs",
            Power::RunsRegistered => "runs_registered",
            Power::ReadsFiles => "reads_files",
            Power::WritesFiles => "writes_files",
            Power::Network => "network",
            Power::Credentials => "credentials",
            Power::DaemonState => "daemon_state",
        }
    }

    /// Parses a wire name.
    pub fn from_name(name: &str) -> Option<Power> {
        Power::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for Power {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Power::ALL {
            assert_eq!(Power::from_name(p.as_str()), Some(p));
        }
        assert_eq!(Power::from_name("exec"), None);
    }
}
