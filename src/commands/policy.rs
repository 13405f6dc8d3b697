//! `avfs policy show|test` and `avfs proxy check`: print, test and apply the proxy's policy
//! without running anything (format: docs/policy.md).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Serialize;

use agentvfs::service::policy::{CommandRequest, Decision, ExampleFailure, PolicyEngine};
use agentvfs::{Error, Result};

use super::Ctx;
use crate::output::Reply;

#[derive(Subcommand)]
pub enum PolicyCmd {
    /// Print the built-in default policy (TOML); a file for --policy has the same format.
    Show,
    /// Check every `examples = […]` entry of a policy file (default: the built-in policy).
    Test {
        /// The TOML policy file to test.
        #[arg(long)]
        policy: Option<PathBuf>,
    },
}

#[derive(Args)]
pub struct CheckArgs {
    /// A TOML policy file instead of the built-in policy (`avfs policy show`).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Working directory inside the workspace the command would run in.
    #[arg(long, default_value = "/")]
    pub cwd: String,
    /// Shell text to classify, as `avfs proxy exec --shell` would run it.
    #[arg(long, conflicts_with = "argv")]
    pub shell: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

/// `avfs policy show` data.
#[derive(Serialize, schemars::JsonSchema)]
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
#[derive(Serialize, schemars::JsonSchema)]
pub struct PolicyTestOutput {
    /// The file tested, or `builtin`.
    pub policy: String,
    /// How many examples were checked.
    pub examples: usize,
    pub failures: Vec<ExampleFailure>,
}

pub fn run(ctx: &Ctx, cmd: PolicyCmd) -> (&'static str, Result<Reply>) {
    match cmd {
        PolicyCmd::Show => ("policy show", cmd_show(ctx)),
        PolicyCmd::Test { policy } => ("policy test", cmd_test(ctx, policy)),
    }
}

/// The policy at `path`, or the built-in one.
pub fn load(path: Option<&PathBuf>) -> Result<PolicyEngine> {
    match path {
        Some(p) => PolicyEngine::from_file(p),
        None => Ok(PolicyEngine::builtin()),
    }
}

fn cmd_show(_ctx: &Ctx) -> Result<Reply> {
    let engine = PolicyEngine::builtin();
    let out = PolicyShowOutput {
        toml: PolicyEngine::builtin_toml().to_string(),
        secret_globs: engine.secret_globs(),
        private_key_globs: engine.private_key_globs(),
        secret_env_patterns: engine.secret_env_patterns(),
        secret_env_words: engine.secret_env_words(),
        env_url_credentials: engine.secret_env().url_credentials(),
    };
    let human = out.toml.clone();
    Ok(Reply::new(&out, human))
}

fn cmd_test(_ctx: &Ctx, policy: Option<PathBuf>) -> Result<Reply> {
    let engine = load(policy.as_ref())?;
    let name = policy
        .as_ref()
        .map_or_else(|| "builtin".to_string(), |p| p.display().to_string());
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
    let out = PolicyTestOutput {
        policy: name.clone(),
        examples: total,
        failures,
    };
    let human = format!("{total} example(s) in {name} passed");
    Ok(Reply::new(&out, human))
}

/// `avfs proxy check`: print the decision for a command without running it.
pub fn cmd_check(_ctx: &Ctx, a: CheckArgs) -> Result<Reply> {
    let engine = load(a.policy.as_ref())?;
    let req = match (a.shell, a.argv.is_empty()) {
        (Some(_), false) => {
            return Err(Error::invalid(
                "pass either --shell 'TEXT' or `-- COMMAND ARGS…`, not both",
            ));
        }
        (Some(text), true) => CommandRequest {
            argv: None,
            shell: Some(text),
            cwd: a.cwd,
        },
        (None, false) => CommandRequest {
            argv: Some(a.argv),
            shell: None,
            cwd: a.cwd,
        },
        (None, true) => {
            return Err(Error::invalid(
                "nothing to check: pass `-- COMMAND ARGS…` or --shell 'TEXT'",
            ));
        }
    };
    let d: Decision = engine.decide(&req);
    let cats: Vec<&str> = d.categories.iter().map(|c| c.as_str()).collect();
    let mut human = format!(
        "{}: {}\n  categories: {}",
        d.action.as_str(),
        d.reason,
        cats.join(", ")
    );
    if let Some(r) = &d.rule {
        human.push_str(&format!("\n  rule: {r}"));
    }
    if let Some(o) = &d.offending {
        human.push_str(&format!("\n  offending: {o}"));
    }
    Ok(Reply::new(&d, human))
}
