//! The table of docs/policy.md: every endpoint, its group and powers, and
//! what each preset leaves open, computed from the endpoint table and the
//! presets (a test keeps the page equal to it).

use abx_wire::endpoints::{Group, ENDPOINTS};

use super::document::preset_layers;
use super::presets::NAMES;
use super::rules::{baseline_layers, compile, enabled_group_layers, Rank};
use super::PolicyConfigError;

/// The table of docs/policy.md: each endpoint with its group and powers,
/// and whether each preset leaves it open when every opt-in group is
/// switched on by the environment (a test keeps the page equal to it).
///
/// # Errors
/// A preset that does not compile (never, for the built-in ones).
pub fn powers_table() -> Result<String, PolicyConfigError> {
    let opt_in: Vec<Group> = Group::ALL.into_iter().filter(|g| g.opt_in()).collect();
    let mut columns = Vec::new();
    for name in NAMES {
        let mut layers = baseline_layers();
        layers.extend(preset_layers(name)?);
        layers.extend(enabled_group_layers(&opt_in, Rank::Env, "env:ABX_SERVER_ENABLED_GROUPS"));
        columns.push(compile(&layers, true)?);
    }
    let mut out = format!("| group | endpoint | powers | {} |\n|---|---|---|{}\n", NAMES.join(" | "), "---|".repeat(5));
    for (i, endpoint) in ENDPOINTS.iter().enumerate() {
        let powers: Vec<&str> = endpoint.powers().iter().map(|p| p.as_str()).collect();
        let open: Vec<&str> = columns.iter().map(|rules| if rules[i].enabled { "open" } else { "-" }).collect();
        out.push_str(&format!(
            "| {} | `{}` | {} | {} |\n",
            endpoint.group,
            endpoint.id,
            powers.join(", "),
            open.join(" | ")
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/policy.md shows [`powers_table`]; `ABX_UPDATE_DOCS=1` rewrites it.
    #[test]
    fn the_docs_table_is_the_table() {
        let (start, end) = ("<!-- powers-table:start -->\n", "<!-- powers-table:end -->");
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/policy.md");
        let page = std::fs::read_to_string(path).expect("docs/policy.md");
        let table = powers_table().expect("table");
        let from = page.find(start).expect("start marker") + start.len();
        let to = page.find(end).expect("end marker");
        if std::env::var_os("ABX_UPDATE_DOCS").is_some() {
            std::fs::write(path, format!("{}{table}{}", &page[..from], &page[to..])).expect("write");
            return;
        }
        assert!(page[from..to] == table, "docs/policy.md's powers table is stale: run with ABX_UPDATE_DOCS=1");
    }
}
