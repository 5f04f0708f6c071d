//! Exit codes: the one documented list, docs/exit-codes.md (a test holds the
//! two equal). [`crate::error::CliError::exit_code`] says which one a failure
//! gets; a command's own verdict (not verified, unsafe plan) is an [`ExitCode`]
//! it returns.

/// Declares [`ExitCode`] and its list from one table, so that no code can be
/// missing from [`ExitCode::ALL`] (the list the documentation is checked against).
macro_rules! exit_codes {
    ($($(#[doc = $doc:literal])* $variant:ident = $code:literal $name:literal,)*) => {
        /// How the process ends: a command's verdict, or a failure's code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ExitCode {
            $($(#[doc = $doc])* $variant = $code,)*
        }

        // Only the test that holds docs/exit-codes.md to the code needs these.
        #[cfg(test)]
        impl ExitCode {
            /// Every code, in the table's order.
            pub const ALL: &'static [ExitCode] = &[$(ExitCode::$variant),*];

            /// The name docs/exit-codes.md gives it.
            pub fn name(self) -> &'static str {
                match self {
                    $(ExitCode::$variant => $name,)*
                }
            }
        }
    };
}

exit_codes! {
    /// Done: the plan is safe, the migration completed, verification holds.
    Ok = 0 "OK",
    /// The operation failed for another reason (see the message).
    Failed = 1 "FAILED",
    /// Invalid arguments, names, files, or a stream/consumer that does not
    /// exist; nothing was changed.
    BadInput = 2 "BAD_INPUT",
    /// The plan is unsafe (or the server too old, or its version unreadable);
    /// nothing was changed.
    Incompatible = 3 "INCOMPATIBLE",
    /// The server could not be reached, refused the credentials, or failed a
    /// request.
    Server = 4 "SERVER",
    /// Stopped at a safe point (Ctrl-C); the message says how to resume or roll
    /// back.
    Interrupted = 5 "INTERRUPTED",
    /// Verification found lost, duplicated or extra messages.
    NotVerified = 6 "NOT_VERIFIED",
    /// `apply`'s dry run: changes are pending (terraform plan
    /// -detailed-exitcode's 2, which is BAD_INPUT here); nothing was changed.
    ChangesPending = 7 "CHANGES_PENDING",
}

impl ExitCode {
    /// The process exit status.
    pub fn code(self) -> i32 {
        self as i32
    }
}

#[cfg(test)]
mod tests {
    use super::ExitCode;
    use std::collections::BTreeMap;

    /// The `| code | name | meaning |` rows of docs/exit-codes.md.
    fn documented() -> BTreeMap<i32, String> {
        let doc = include_str!("../../../docs/exit-codes.md");
        let mut rows = BTreeMap::new();
        for line in doc.lines().filter(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let Ok(code) = cells[0].parse::<i32>() else { continue }; // header, rule
            let name = cells.get(1).expect("a code row has a name").to_string();
            assert!(rows.insert(code, name).is_none(), "code {code} is documented twice");
        }
        rows
    }

    #[test]
    fn the_documented_exit_codes_are_the_codes_in_the_code() {
        let in_code: BTreeMap<i32, String> =
            ExitCode::ALL.iter().map(|c| (c.code(), c.name().to_string())).collect();
        assert_eq!(in_code.len(), ExitCode::ALL.len(), "two variants share a code");
        let documented = documented();
        for (code, name) in &documented {
            assert_eq!(
                in_code.get(code),
                Some(name),
                "docs/exit-codes.md documents {code} {name}; the code does not"
            );
        }
        for (code, name) in &in_code {
            assert_eq!(
                documented.get(code),
                Some(name),
                "ExitCode has {code} {name}; docs/exit-codes.md does not document it"
            );
        }
    }
}
