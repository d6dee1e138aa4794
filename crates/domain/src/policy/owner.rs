//! Who owns a process or a terminal, and who may see and touch it.
//!
//! The identity that starts a process or opens a terminal owns it. Another
//! identity neither sees it (lists leave it out; by id or pid it is "not
//! found", so its existence does not leak) nor touches it (output, input,
//! signals, resize, attach, delete), unless it holds the admin scope of
//! that kind ([`PROCESS_ADMIN`], [`TERMINAL_ADMIN`]; `*` and `process:*` or
//! `terminal:*` hold them). Without policy identities every caller is the
//! same one (the server token's `server`, or `anonymous`, both with every
//! scope), so everyone sees everything, as with the reference.

use super::Identity;

/// The scope that sees and touches every identity's processes.
pub const PROCESS_ADMIN: &str = "process:admin";
/// The scope that sees and touches every identity's terminals.
pub const TERMINAL_ADMIN: &str = "terminal:admin";

/// A caller as the owner checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    id: String,
    admin: bool,
}

impl Viewer {
    /// `identity`, an admin of the kind when it holds `admin_scope`.
    pub fn new(identity: &Identity, admin_scope: &str) -> Self {
        Viewer { id: identity.id.clone(), admin: identity.can(admin_scope) }
    }

    /// Everyone's view (the server itself, tests).
    pub fn admin() -> Self {
        Viewer { id: String::new(), admin: true }
    }

    /// The owner to record for what this caller starts.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether this caller may see and touch what `owner` owns.
    pub fn sees(&self, owner: &str) -> bool {
        self.admin || self.id == owner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_and_admins_see_others_do_not() {
        let alice = Viewer::new(&Identity::new("alice", ["process:run", "process:read"]), PROCESS_ADMIN);
        assert!(alice.sees("alice") && !alice.sees("bob"));
        for admin in [["*"], ["process:*"], ["process:admin"]] {
            assert!(Viewer::new(&Identity::new("ops", admin), PROCESS_ADMIN).sees("bob"), "{admin:?}");
        }
        assert!(!Viewer::new(&Identity::new("ops", ["process:admin"]), TERMINAL_ADMIN).sees("bob"));
        assert!(Viewer::admin().sees("anyone"));
    }
}
