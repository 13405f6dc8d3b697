//! `avfs policy show|test` and `avfs proxy check`: print, test and apply the proxy's policy
//! without running anything (format: docs/policy.md).

use std::path::PathBuf;

use agentvfs::Result;
use agentvfs::service::policy::{self, CommandRequest, Decision, PolicyEngine};
use clap::{Args, Subcommand};

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

pub fn run(ctx: &Ctx, cmd: PolicyCmd) -> (&'static str, Result<Reply>) {
    match cmd {
        PolicyCmd::Show => ("policy show", cmd_show(ctx)),
        PolicyCmd::Test { policy } => ("policy test", cmd_test(ctx, policy)),
    }
}

fn cmd_show(_ctx: &Ctx) -> Result<Reply> {
    let out = PolicyEngine::show_builtin();
    let human = out.toml.clone();
    Ok(Reply::new(&out, human))
}

fn cmd_test(_ctx: &Ctx, policy: Option<PathBuf>) -> Result<Reply> {
    let out = PolicyEngine::test_file(policy.as_deref())?;
    let human = format!("{} example(s) in {} passed", out.examples, out.policy);
    Ok(Reply::new(&out, human))
}

/// `avfs proxy check`: print the decision for a command without running it.
pub fn cmd_check(_ctx: &Ctx, a: CheckArgs) -> Result<Reply> {
    let req = CommandRequest::new(a.argv, a.shell, a.cwd)?;
    let d: Decision = policy::check(a.policy.as_deref(), &req)?;
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
