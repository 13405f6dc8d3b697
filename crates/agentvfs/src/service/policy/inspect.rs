//! Looking at a policy without running anything: which policy applies (a file or the
//! built-in one), what it hides (`policy show`), whether its examples hold (`policy test`)
//! and what it decides for a command (`proxy check`).

use std::path::Path;

use serde::Serialize;

use super::{CommandRequest, Decision, ExampleFailure, PolicyEngine};
use crate::error::{Error, Result};

/// `avfs policy show` data.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PolicyShowOutput {
    /// The built-in policy file.
    pub toml: String,
    /// `[secrets] paths`: hidden from a proxied command by name.
    pub secret_globs: Vec<String>,
    /// `[secrets] private_key_paths`: hidden when the file holds a private key.
    pub private_key_globs: Vec<String>,
    /// `[secrets] env`: environment variable name globs withheld (any case).
    pub secret_env_patterns: Vec<String>,
    /// `[secrets] env_words`: a variable whose name has one of these words is withheld.
    pub secret_env_words: Vec<String>,
    /// `[secrets] env_url_credentials`: a variable whose value is a URL with credentials is
    /// withheld.
    pub env_url_credentials: bool,
}

/// `avfs policy test` data (on success: no failures).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PolicyTestOutput {
    /// The file tested, or `builtin`.
    pub policy: String,
    /// How many examples were checked.
    pub examples: usize,
    pub failures: Vec<ExampleFailure>,
}

impl PolicyEngine {
    /// The policy in file `path`, or the built-in one.
    pub fn from_path(path: Option<&Path>) -> Result<PolicyEngine> {
        match path {
            Some(p) => PolicyEngine::from_file(p),
            None => Ok(PolicyEngine::builtin()),
        }
    }

    /// The built-in policy and what it hides.
    pub fn show_builtin() -> PolicyShowOutput {
        let engine = PolicyEngine::builtin();
        PolicyShowOutput {
            toml: PolicyEngine::builtin_toml().to_string(),
            secret_globs: engine.secret_globs(),
            private_key_globs: engine.private_key_globs(),
            secret_env_patterns: engine.secret_env_patterns(),
            secret_env_words: engine.secret_env_words(),
            env_url_credentials: engine.secret_env().url_credentials(),
        }
    }

    /// Check every example of the policy in `path` (or the built-in one). A failing
    /// example is an error listing each failure; the report is for a policy that passes.
    pub fn test_file(path: Option<&Path>) -> Result<PolicyTestOutput> {
        let engine = PolicyEngine::from_path(path)?;
        let name = path.map_or_else(|| "builtin".to_string(), |p| p.display().to_string());
        let failures = engine.test_examples();
        let total = engine.example_count();
        if !failures.is_empty() {
            let list: Vec<String> = failures
                .iter()
                .map(|f| {
                    format!(
                        "rule `{}`: `{}` expected {}, got {}",
                        f.rule, f.command, f.expected, f.got
                    )
                })
                .collect();
            return Err(Error::InvalidArgument {
                message: format!(
                    "{} of {total} policy example(s) in {name} failed:\n  {}",
                    failures.len(),
                    list.join("\n  ")
                ),
            });
        }
        Ok(PolicyTestOutput {
            policy: name,
            examples: total,
            failures,
        })
    }
}

impl CommandRequest {
    /// A request from exactly one of an argv (non-empty) or shell text.
    pub fn new(argv: Vec<String>, shell: Option<String>, cwd: String) -> Result<CommandRequest> {
        match (shell, argv.is_empty()) {
            (Some(_), false) => Err(Error::invalid(
                "pass either --shell 'TEXT' or `-- COMMAND ARGS…`, not both",
            )),
            (Some(text), true) => Ok(CommandRequest {
                argv: None,
                shell: Some(text),
                cwd,
            }),
            (None, false) => Ok(CommandRequest {
                argv: Some(argv),
                shell: None,
                cwd,
            }),
            (None, true) => Err(Error::invalid(
                "nothing to check: pass `-- COMMAND ARGS…` or --shell 'TEXT'",
            )),
        }
    }
}

/// The decision for a command under the policy in `path` (or the built-in one), without
/// running it.
pub fn check(path: Option<&Path>, req: &CommandRequest) -> Result<Decision> {
    Ok(PolicyEngine::from_path(path)?.decide(req))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_whose_example_fails_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.toml");
        let builtin = PolicyEngine::test_file(None).unwrap();
        assert_eq!(builtin.policy, "builtin");
        assert!(builtin.examples > 0 && builtin.failures.is_empty());
        std::fs::write(
            &file,
            "[[rule]]\nname = \"no-ls\"\nprogram = \"ls\"\naction = \"deny\"\n\
             examples = [{ command = \"ls\", action = \"allow\" }]\n",
        )
        .unwrap();
        match PolicyEngine::test_file(Some(&file)) {
            Err(Error::InvalidArgument { message }) => {
                assert!(message.contains("failed"), "{message}")
            }
            Err(e) => panic!("a policy file that does not load: {e}"),
            Ok(r) => panic!("the example cannot pass: {r:?}"),
        }
    }

    #[test]
    fn a_request_is_an_argv_or_shell_text_never_both_or_neither() {
        let cwd = || "/".to_string();
        assert!(CommandRequest::new(vec!["ls".into()], Some("ls".into()), cwd()).is_err());
        assert!(CommandRequest::new(Vec::new(), None, cwd()).is_err());
        let req = CommandRequest::new(Vec::new(), Some("rm -rf /".into()), cwd()).unwrap();
        assert_eq!(check(None, &req).unwrap().action.as_str(), "deny");
    }
}
