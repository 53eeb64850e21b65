//! A seat's token variable: provisioning fills only a token that is one
//! whole `${VAR}`, never the operator's own credential, and never one
//! variable for two seats (the first seat to name it owns it).

use std::collections::HashMap;

use crewlet_config::{has_references, references};

/// A variable lookup: the env file, then the process environment.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The `${VAR}` that is the whole of `raw` (trimmed), if it is one.
pub fn whole_var(raw: &str) -> Option<String> {
    let raw = raw.trim();
    if !has_references(raw) {
        return None;
    }
    match references(raw).as_slice() {
        [var] if raw == format!("${{{var}}}") => Some((*var).to_owned()),
        _ => None,
    }
}

/// The value `var` holds now, trimmed; `None` when unset or blank.
pub(crate) fn recorded(env: EnvLookup<'_>, var: &str) -> Option<String> {
    env(var)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Which variable belongs to which seat: the first to name it.
#[derive(Debug, Default)]
pub(crate) struct Owners(HashMap<String, String>);

impl Owners {
    /// `handle` names `var`; it owns it unless a seat before it did.
    pub(crate) fn claim(&mut self, var: &str, handle: &str) {
        self.0
            .entry(var.to_owned())
            .or_insert_with(|| handle.to_owned());
    }
}

/// How one integration words the rules.
pub(crate) struct VarRules<'a> {
    /// The field as the company file names it (`bot_token`).
    pub field: &'a str,
    /// The field as a sentence starts with it (`bot_token`, `the token`).
    pub subject: &'a str,
    /// What the variable is of a seat (`bot_token`, `token`).
    pub noun: &'a str,
    /// The operator's credential.
    pub admin_var: &'a str,
}

impl VarRules<'_> {
    /// The field is not set.
    pub(crate) fn empty(&self) -> String {
        format!(
            "{} is not set: make it a ${{VAR}} for provisioning to fill",
            self.field
        )
    }

    /// The field has text around its `${VAR}`s.
    pub(crate) fn mixed(&self) -> String {
        format!(
            "{} mixes text and ${{VAR}}s: make it one whole ${{VAR}}",
            self.field
        )
    }

    /// Whether `handle` may have `var` filled.
    pub(crate) fn check(&self, var: &str, handle: &str, owners: &Owners) -> Result<(), String> {
        if var == self.admin_var {
            return Err(format!(
                "{} names {}, the operator's credential: give the seat its own variable",
                self.subject, self.admin_var
            ));
        }
        if let Some(owner) = owners.0.get(var).filter(|o| *o != handle) {
            return Err(format!(
                "{var} is already the {} of seat `{owner}`: give each seat its own variable",
                self.noun
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seat_variable_is_whole_its_own_and_not_the_admins() {
        assert_eq!(whole_var(" ${A} ").as_deref(), Some("A"));
        assert_eq!(whole_var("x${A}"), None);
        assert_eq!(whole_var("${A}${B}"), None);
        assert_eq!(whole_var("lit"), None);
        let rules = VarRules {
            field: "bot_token",
            subject: "bot_token",
            noun: "bot_token",
            admin_var: "ADMIN",
        };
        let mut owners = Owners::default();
        owners.claim("A", "swe");
        owners.claim("A", "pm");
        assert!(rules.check("A", "swe", &owners).is_ok());
        assert!(
            rules
                .check("A", "pm", &owners)
                .unwrap_err()
                .contains("`swe`")
        );
        assert!(rules.check("ADMIN", "pm", &owners).is_err());
        let env = |v: &str| (v == "A").then(|| " tok ".to_owned());
        assert_eq!(recorded(&env, "A").as_deref(), Some("tok"));
        assert_eq!(recorded(&env, "B"), None);
    }
}
