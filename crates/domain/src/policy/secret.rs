//! Secrets read from the environment or from a file it names.
//!
//! A token in an environment variable sits in the daemon's
//! `/proc/<pid>/environ` for its whole life. The `_FILE` form (Docker's and
//! Kubernetes' convention for secrets) lets it come from a file instead: for
//! a variable `NAME`, `NAME_FILE` names a file holding the value (a trailing
//! newline is ignored). This works for `ABX_SERVER_TOKEN` and for every
//! policy token's `token_env`, so policy files stay in the reference's format.

use std::path::Path;

use super::PolicyConfigError;

/// The suffix of a variable naming the file that holds another variable's value.
pub const FILE_SUFFIX: &str = "_FILE";

/// The secret `name` holds, or the content of the file `name_FILE` names.
///
/// # Errors
/// Both set; a file that cannot be read or is empty.
pub fn from_env(name: &str) -> Result<Option<String>, PolicyConfigError> {
    let value = std::env::var(name).ok().filter(|v| !v.is_empty());
    let file = std::env::var_os(format!("{name}{FILE_SUFFIX}")).filter(|f| !f.is_empty());
    match (value, file) {
        (Some(_), Some(_)) => {
            Err(PolicyConfigError::new(format!("both {name} and {name}{FILE_SUFFIX} are set; set only one")))
        }
        (Some(value), None) => Ok(Some(value)),
        (None, Some(file)) => read(name, Path::new(&file)).map(Some),
        (None, None) => Ok(None),
    }
}

fn read(name: &str, path: &Path) -> Result<String, PolicyConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| PolicyConfigError::new(format!("cannot read {name}{FILE_SUFFIX} ({}): {e}", path.display())))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_string();
    if secret.is_empty() {
        return Err(PolicyConfigError::new(format!("{name}{FILE_SUFFIX} ({}) is empty", path.display())));
    }
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_holds_the_secret_and_an_ambiguous_or_empty_one_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret\n").expect("write");
        assert_eq!(read("T", &file).expect("read"), "s3cret");
        std::fs::write(&file, "\n").expect("write");
        assert!(read("T", &file).expect_err("empty").to_string().contains("is empty"));
        let missing = read("T", &dir.path().join("none")).expect_err("missing");
        assert!(missing.to_string().starts_with("cannot read T_FILE"), "{missing}");
        assert_eq!(from_env("ABX_TEST_SURELY_UNSET_4d1e").expect("unset"), None);
    }
}
