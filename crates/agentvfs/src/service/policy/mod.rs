//! The policy engine of the proxy boundary: it reads a command the way a shell would and
//! decides what `avfs proxy exec` may do with it (DESIGN.md, "Proxy boundary").
//!
//! # How a command is classified
//!
//! Shell text is parsed with `brush-parser` (a real POSIX/bash parser, never string
//! splitting) and the whole tree is walked: pipelines, `&&`, `||`, `;`, `&`, subshells
//! `( … )`, groups `{ …; }`, `if`/`for`/`while`/`case`, function bodies, `$(…)` and backtick
//! substitutions (the inner command is classified too), process substitutions `<(…)`,
//! redirections (`>`/`>>` targets are writes, `<` is a read), here-documents and
//! here-strings (fed to a shell they are classified as the script they are), `bash -c` /
//! `sh -c` / `zsh -c` bodies recursively (with `$1…` bound to the arguments that follow),
//! `eval`, `trap`, `alias` bodies, wrappers (`env` with `VAR=x`, `-C`, `sudo`, `doas`, `su -c`,
//! `nice`, `nohup`, `timeout`, `time`, `stdbuf`, `setsid`, `exec`, `command`, `xargs`,
//! `watch`, `flock`, `find -exec`/`-delete`, `fd -x`) and `git`'s global options (`-C dir`,
//! `-c key=value`, `--git-dir`) before its subcommand. An argv request (no shell) is
//! classified as one simple command with literal words.
//!
//! Every simple command gets one or more [`Category`]s; the decision's categories are their
//! union over the whole tree and its [`Action`] is the strictest one found
//! (`allow` < `checkpoint_then_run` < `readonly` < `ask` < `deny`). Its `rule`, `reason` and
//! `offending` token come from the finding that set that action.
//!
//! * **Paths.** Every argument in a path position, every redirection target and every `cd`
//!   target is resolved against the request's `cwd` inside the workspace. Absolute host
//!   paths (`/`, `/etc/passwd`, `/dev/sda`), `~`, `~user`, `$HOME`/`${HOME}`, and `..` that
//!   climbs above the workspace root are `host_escape`; an `ln -s` target is resolved from
//!   the directory its link is made in. Harmless devices (`/dev/null`,
//!   `/dev/zero`, `/dev/std*`, `/dev/tty`, `/dev/fd/*`, `/dev/urandom`) are not, nor are
//!   system programs used as the command word (`/usr/bin/env`, `/bin/rm` — those are
//!   classified by their name). Symlinks cannot be seen from the text; the mount is what
//!   refuses links that point out.
//! * **Run-time values.** A command word produced by expansion (`$(echo rm) -rf /`, `$CMD`)
//!   is `unknown`; with destructive-looking flags (`-r`, `-f`, `--force`, `--delete`, …) it is
//!   denied. A write or delete whose target is only known at run time (`rm -rf "$X"`,
//!   `xargs rm`, `> "$OUT"`, `cd "$D" && …`) is `ask` (rule `builtin/dynamic-target`); a read
//!   of such a target is `unknown`. Code that only exists at run time (`eval "$X"`,
//!   `bash -c "$X"`, `… | base64 -d | sh`) is `ask` (rule `builtin/dynamic-code`). Variables
//!   assigned earlier in the same command text (`D=build; rm -rf $D`, `export X=…`,
//!   `for f in *.rs`) are followed.
//! * **Hard denials**, whatever the policy file says: network output piped or substituted
//!   into a shell or interpreter (`curl … | sh`, `bash <(curl …)`, `eval "$(wget -O- …)"`,
//!   rule `builtin/remote-code`); recursive functions (the fork bomb `:(){ :|:& };:`,
//!   `builtin/fork-bomb`); dynamic command words with destructive flags
//!   (`builtin/dynamic-command`); text the parser cannot read (`builtin/unparsable`: a shell
//!   would run the lines before the error); nesting deeper than 12 levels.
//! * Anything the engine does not know (an unlisted program, a git alias, a cargo plugin)
//!   is `unknown`, never `readonly`.
//!
//! # Categories and the default actions
//!
//! | category | meaning | default action |
//! |---|---|---|
//! | `readonly` | only reads the workspace (`ls`, `cat`, `grep -r`, `git log`) | `allow` |
//! | `mutating` | changes the workspace (`touch`, `cp`, `sed -i`, `cargo test`, `python3 x.py`; also what rewrites a cache while it reads: `git status` and `git diff` refresh `.git/index`, `cargo metadata` may write `Cargo.lock`) | `checkpoint_then_run` |
//! | `destructive` | deletes or overwrites (`rm -rf build`, `git reset --hard`, `git clean -fdx`) | `checkpoint_then_run`: inside the workspace the checkpoint taken first makes it recoverable |
//! | `unknown` | the engine cannot tell | `checkpoint_then_run` |
//! | `networked` | talks to the network (`curl`, `git push`, `npm install`, `pip install`) | `ask`: the harness approves with `--approve TOKEN` |
//! | `interactive` | needs a terminal (`vim`, `less`, `top`, `python3` REPL, `git commit` without `-m`) | `deny`: it would hang until the timeout |
//! | `host_escape` | touches the host outside the workspace (paths above, `kill PID`, `crontab`) | `deny` |
//! | `privileged` | root or the host's kernel/daemons (`sudo`, `su`, `mount`, `docker`, `chown root`) | `deny` |
//!
//! Destructive on a host-escape target (`rm -rf /`, `find / -delete`, `dd of=/dev/sda`,
//! `chmod -R 777 /`, `git -C / clean -fdx`) is therefore denied, while `rm -rf build` is a
//! checkpoint-then-run. Actions: `allow` (run, no checkpoint), `checkpoint_then_run`,
//! `readonly` (run on a read-only mount; only from policy rules), `ask` (run nothing, return
//! an approval token), `deny` (run nothing).
//!
//! # Policy file (TOML)
//!
//! `avfs policy show` prints the built-in policy ([`PolicyEngine::builtin_toml`]); a file
//! passed with `--policy FILE` has the same format. Every key is optional; a missing section
//! keeps the built-in value.
//!
//! ```toml
//! version = 1                    # format version; only 1 exists
//! builtin_rules = true           # also apply the built-in [[rule]]s after this file's (default true)
//! examples = [                   # checks of the built-in classification, run by `avfs policy test`
//!   { command = "ls -la", action = "allow" },
//!   { command = "rm -rf build", action = "checkpoint_then_run", category = "destructive" },
//! ]
//!
//! [actions]                      # category -> action when no rule matches
//! networked = "ask"
//! host_escape = "deny"
//!
//! [secrets]                      # what a proxied run cannot see (service::secrets)
//! paths = [".env", ".env.*", "id_ed25519", "*.key", ".ssh/"]  # hidden by name
//! private_key_paths = ["*.pem"]  # hidden when the file holds a `BEGIN … PRIVATE KEY` block
//! env = ["*_TOKEN", "AWS_*", "SSH_AUTH_SOCK"]  # env names withheld (globs, any case)
//! env_words = ["token", "key", "auth", "pat"]  # env names with one of these words withheld
//! env_url_credentials = true     # env values that are URLs with `user:pass@` withheld
//! env_allow = []                 # names passed all the same (exact case)
//!
//! [[rule]]                       # ordered; the first matching rule wins
//! name = "no-force-push"         # required, unique; reported as the decision's `rule`
//! program = "git"                # glob(s) on the program name (after wrappers like sudo/env)
//! subcommand = "push"            # glob(s) on the subcommand (git/cargo/npm/…: after global options)
//! flags = ["--force", "-f"]      # any of these flags present (`-f` also matches inside `-uf`)
//! args = ["+*"]                  # any argument (as written, quotes removed) matches a glob
//! paths = ["/tmp/**"]            # any path argument matches a glob (see below)
//! action = "deny"                # allow | checkpoint_then_run | readonly | ask | deny
//! category = "destructive"       # optional: the category reported (else the built-in ones)
//! reason = "force-pushing rewrites the remote's history"
//! examples = [{ command = "git push -f origin main", action = "deny" }]
//! ```
//!
//! A rule matches a simple command when every criterion it has matches (within one
//! criterion, any listed value); a rule needs at least one criterion (`program = "*"` is a
//! catch-all). Rules are tried at every layer of a wrapped command (`sudo rm x`: first
//! `sudo …`, then `rm x`); a matching rule decides that layer and everything inside it. A
//! rule cannot authorise a path outside the workspace that its own `paths` globs do not
//! name: such an argument still adds its `host_escape` finding, and the hard denials above
//! always apply. Globs use `globset` syntax (`*` also matches `/`); a path glob is tried on
//! the argument as written (`~/.ssh/id_rsa`, `/etc/hosts`, `../x`), on its workspace path
//! without the leading `/` (`src/main.rs`), and on its file name. When no rule matches, the
//! built-in classification applies with the `[actions]` table.
//!
//! An example is `{ command = "…", action = "…", category = "…", cwd = "/sub" }` with at
//! least one of `action` (the decision's action must be it) or `category` (the decision's
//! categories must include it); `cwd` defaults to `/`. `avfs policy test [--policy FILE]`
//! runs every example of the file ([`PolicyEngine::test_examples`]).
//!
//! `docs/policy.md` documents the same format with the complete default policy.

mod analyzer;
mod classify;
mod expand;
mod inspect;
mod rules;
mod shell;
mod words;

use std::collections::{BTreeMap, BTreeSet};

use analyzer::Analyzer;
use rules::{Example, PolicyFile, Rule};
use serde::{Deserialize, Serialize};
use words::{Arg, Fact, Scope, Stdin};

use crate::error::{Error, Result};
use crate::service::secrets::{SecretEnv, SecretPaths};

pub use inspect::{PolicyShowOutput, PolicyTestOutput, check};

/// What a command does, as far as the policy can tell from its text.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Only reads the workspace.
    // `read_only` is the old spelling; policy files that use it still load.
    #[serde(rename = "readonly", alias = "read_only")]
    ReadOnly,
    /// Changes files in the workspace.
    Mutating,
    /// Deletes or overwrites data (recoverable inside the workspace through the checkpoint).
    Destructive,
    /// Talks to the network.
    Networked,
    /// Reaches the host outside the workspace.
    HostEscape,
    /// Needs root or acts on the host's kernel or daemons.
    Privileged,
    /// Needs a terminal.
    Interactive,
    /// The policy cannot tell.
    Unknown,
}

impl Category {
    /// Every category, in order.
    pub const ALL: [Category; 8] = [
        Category::ReadOnly,
        Category::Mutating,
        Category::Destructive,
        Category::Networked,
        Category::HostEscape,
        Category::Privileged,
        Category::Interactive,
        Category::Unknown,
    ];

    /// The snake_case name used in JSON and TOML.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::ReadOnly => "readonly",
            Category::Mutating => "mutating",
            Category::Destructive => "destructive",
            Category::Networked => "networked",
            Category::HostEscape => "host_escape",
            Category::Privileged => "privileged",
            Category::Interactive => "interactive",
            Category::Unknown => "unknown",
        }
    }
}

/// What the proxy does with a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Run it; no checkpoint is needed.
    Allow,
    /// Checkpoint the workspace, then run it.
    CheckpointThenRun,
    /// Run it on a read-only mount.
    // `read_only` is the old spelling; policy files that use it still load.
    #[serde(rename = "readonly", alias = "read_only")]
    ReadOnly,
    /// Run nothing; return an approval token the harness can pass back with `--approve`.
    Ask,
    /// Run nothing.
    Deny,
}

impl Action {
    /// How strict the action is; the decision takes the strictest of all findings.
    pub fn severity(self) -> u8 {
        match self {
            Action::Allow => 0,
            Action::CheckpointThenRun => 1,
            Action::ReadOnly => 2,
            Action::Ask => 3,
            Action::Deny => 4,
        }
    }

    /// The snake_case name used in JSON and TOML.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::CheckpointThenRun => "checkpoint_then_run",
            Action::ReadOnly => "readonly",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

/// The policy's answer for one command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Decision {
    pub action: Action,
    /// Every category found anywhere in the command, sorted.
    pub categories: Vec<Category>,
    /// The rule that set the action: a `[[rule]]` name, or `builtin/…` for the built-in
    /// classification.
    pub rule: Option<String>,
    /// Why, naming the offending token.
    pub reason: String,
    /// The token (path, flag, program) that set the action, when there is one.
    pub offending: Option<String>,
}

/// When a proxied command runs without network (`[confinement] offline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Offline {
    Never,
    Always,
    /// Offline unless the policy classified the command `networked` (and it was allowed or
    /// approved).
    UnlessNetworked,
}

/// A command to classify: either an argv (run without a shell) or shell text.
#[derive(Debug, Clone, Default)]
pub struct CommandRequest {
    pub argv: Option<Vec<String>>,
    pub shell: Option<String>,
    /// cwd inside the workspace, e.g. "/" or "/src"
    pub cwd: String,
}

/// A policy example whose decision differs from what it expects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ExampleFailure {
    /// The rule the example belongs to (`(top-level)` for the file's own `examples`).
    pub rule: String,
    pub command: String,
    /// What the example expects, e.g. `action deny` or `action ask, category networked`.
    pub expected: String,
    /// What the engine decided: action, categories and the rule that set it.
    pub got: String,
}

/// A loaded policy: ordered rules, the category → action table, secrets, and examples.
#[derive(Debug, Clone)]
pub struct PolicyEngine {
    rules: Vec<Rule>,
    landlock: bool,
    offline: Offline,
    actions: BTreeMap<Category, Action>,
    secret_paths: SecretPaths,
    secret_env: SecretEnv,
    sandbox: crate::service::sandbox::SandboxConfig,
    /// (rule name, example) for every example written in the loaded file.
    examples: Vec<(String, Example)>,
}

const BUILTIN_TOML: &str = include_str!("default.toml");

/// The label of a policy file's own top-level examples.
const TOP_LEVEL: &str = "(top-level)";

impl PolicyEngine {
    /// The documented default policy (`default.toml`, printed by `avfs policy show`).
    pub fn builtin() -> PolicyEngine {
        // The built-in file is part of the binary and covered by tests.
        Self::load(BUILTIN_TOML, None).expect("the built-in policy is valid")
    }

    /// The text of the built-in policy.
    pub fn builtin_toml() -> &'static str {
        BUILTIN_TOML
    }

    /// A policy file: its rules first, then (unless `builtin_rules = false`) the built-in
    /// rules; sections it leaves out keep the built-in values.
    pub fn from_toml(text: &str) -> Result<PolicyEngine> {
        let base = Self::builtin();
        Self::load(text, Some(&base))
    }

    /// A policy file from disk; errors name the file.
    pub fn from_file(path: &std::path::Path) -> Result<PolicyEngine> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::io("reading policy", path, e))?;
        Self::from_toml(&text).map_err(|e| match e {
            Error::InvalidArgument { message } => Error::InvalidArgument {
                message: format!("{}: {message}", path.display()),
            },
            other => other,
        })
    }

    fn load(text: &str, base: Option<&PolicyEngine>) -> Result<PolicyEngine> {
        let file: PolicyFile = toml::from_str(text)
            .map_err(|e| Error::invalid(format!("policy file: {}", e.to_string().trim_end())))?;
        if let Some(v) = file.version
            && v != 1
        {
            return Err(Error::invalid(format!(
                "policy file: unsupported version {v}; this avfs reads version 1"
            )));
        }
        let mut rules = Vec::new();
        let mut examples = Vec::new();
        for (i, r) in file.rules.iter().enumerate() {
            let rule = Rule::compile(r, i, text)?;
            if rules.iter().any(|x: &Rule| x.name == rule.name) {
                return Err(Error::invalid(format!(
                    "policy file: rule #{} (line {}): duplicate rule name `{}`",
                    i + 1,
                    rules::line_of(text, r.name.span().start),
                    rule.name
                )));
            }
            for e in &r.examples {
                examples.push((rule.name.clone(), Example::from_spec(e, &rule.name)?));
            }
            rules.push(rule);
        }
        for e in &file.examples {
            examples.push((TOP_LEVEL.to_string(), Example::from_spec(e, TOP_LEVEL)?));
        }
        let mut actions = match base {
            Some(b) => b.actions.clone(),
            None => Category::ALL
                .iter()
                .map(|c| (*c, default_action(*c)))
                .collect(),
        };
        actions.extend(file.actions.iter().map(|(c, a)| (*c, *a)));
        let secrets = file.secrets.unwrap_or_default();
        let (secret_paths, secret_env) = match base {
            Some(b) => (b.secret_paths.clone(), b.secret_env.clone()),
            None => (SecretPaths::default(), SecretEnv::default()),
        };
        let secret_paths = SecretPaths::new(
            secrets
                .paths
                .unwrap_or_else(|| secret_paths.names().to_vec()),
            secrets
                .private_key_paths
                .unwrap_or_else(|| secret_paths.private_key_globs().to_vec()),
        )?;
        let secret_env = SecretEnv::new(
            secrets.env.unwrap_or_else(|| secret_env.globs().to_vec()),
            secrets
                .env_words
                .unwrap_or_else(|| secret_env.words().to_vec()),
            secrets
                .env_url_credentials
                .unwrap_or(secret_env.url_credentials()),
            secrets
                .env_allow
                .unwrap_or_else(|| secret_env.allowed().to_vec()),
        )?;
        let confinement = file.confinement.unwrap_or_default();
        let (base_landlock, base_offline) = base
            .map(|b| (b.landlock, b.offline))
            .unwrap_or((false, Offline::Never));
        let landlock = confinement.landlock.unwrap_or(base_landlock);
        let offline = confinement.offline.unwrap_or(base_offline);
        let mut sandbox = base.map(|b| b.sandbox.clone()).unwrap_or_default();
        if let Some(spec) = file.sandbox {
            if let Some(p) = spec.workspace_path {
                sandbox.workspace_path = p;
            }
            if let Some(ro) = spec.ro {
                sandbox.ro = ro;
            }
            if let Some(rw) = spec.rw {
                sandbox.rw = rw;
            }
            if let Some(lower) = spec.lower {
                sandbox.lower = lower;
            }
            if let Some(mb) = spec.tree_cache_mb {
                sandbox.tree_cache_mb = mb;
            }
        }
        sandbox.validate()?;
        if let Some(b) = base
            && file.builtin_rules.unwrap_or(true)
        {
            rules.extend(b.rules.iter().cloned());
        }
        Ok(PolicyEngine {
            rules,
            landlock,
            offline,
            actions,
            secret_paths,
            secret_env,
            sandbox,
            examples,
        })
    }

    /// Classify a command without running anything.
    pub fn decide(&self, req: &CommandRequest) -> Decision {
        let mut an = Analyzer::new(self);
        let mut scope = Scope::new(&req.cwd);
        match (&req.argv, &req.shell) {
            (Some(_), Some(_)) => {
                return Decision {
                    action: Action::Deny,
                    categories: vec![Category::Unknown],
                    rule: Some("builtin/request".into()),
                    reason: "the request has both an argv and shell text; pass one".into(),
                    offending: None,
                };
            }
            (Some(argv), None) if !argv.is_empty() => {
                let args = argv.iter().map(|a| Arg::literal(a)).collect();
                an.classify_argv(args, &mut scope, Stdin::Inherit);
            }
            (None, Some(text)) if !text.trim().is_empty() => {
                an.shell_text(text, &mut scope, Stdin::Inherit);
            }
            _ => {
                return Decision {
                    action: Action::Deny,
                    categories: vec![Category::Unknown],
                    rule: Some("builtin/request".into()),
                    reason: "nothing to run: the command is empty".into(),
                    offending: None,
                };
            }
        }
        self.finish(an.facts)
    }

    fn fact_action(&self, f: &Fact) -> Action {
        f.forced.unwrap_or_else(|| self.action_for(&f.categories))
    }

    /// The strictest action of the `[actions]` table over these categories.
    pub fn action_for(&self, categories: &[Category]) -> Action {
        categories
            .iter()
            .map(|c| {
                self.actions
                    .get(c)
                    .copied()
                    .unwrap_or_else(|| default_action(*c))
            })
            .max_by_key(|a| a.severity())
            .unwrap_or(Action::Allow)
    }

    fn finish(&self, facts: Vec<Fact>) -> Decision {
        if facts.is_empty() {
            return Decision {
                action: Action::Allow,
                categories: vec![Category::ReadOnly],
                rule: Some("builtin/readonly".into()),
                reason: "nothing runs: the text has no commands".into(),
                offending: None,
            };
        }
        let categories: BTreeSet<Category> = facts
            .iter()
            .flat_map(|f| f.categories.iter().copied())
            .collect();
        let mut best = 0;
        let mut best_action = self.fact_action(&facts[0]);
        for (i, f) in facts.iter().enumerate().skip(1) {
            let a = self.fact_action(f);
            if a.severity() > best_action.severity() {
                best = i;
                best_action = a;
            }
        }
        let f = &facts[best];
        let reason = if f.rule == "builtin/readonly" {
            let mut progs: Vec<&str> = Vec::new();
            for p in facts.iter().filter_map(|f| f.program.as_deref()) {
                if !progs.contains(&p) {
                    progs.push(p);
                }
            }
            if progs.is_empty() {
                f.reason.clone()
            } else {
                let list: Vec<String> = progs.iter().take(6).map(|p| format!("`{p}`")).collect();
                let verb = if list.len() == 1 {
                    "only reads"
                } else {
                    "only read"
                };
                format!("read-only: {} {verb} the workspace", list.join(", "))
            }
        } else {
            f.reason.clone()
        };
        Decision {
            action: best_action,
            categories: categories.into_iter().collect(),
            rule: Some(f.rule.clone()),
            reason,
            offending: f.offending.clone(),
        }
    }

    /// Check every example written in the loaded policy file; returns the failures.
    pub fn test_examples(&self) -> Vec<ExampleFailure> {
        let mut out = Vec::new();
        for (rule, ex) in &self.examples {
            let d = self.decide(&CommandRequest {
                argv: None,
                shell: Some(ex.command.clone()),
                cwd: ex.cwd.clone(),
            });
            let action_ok = ex.action.is_none_or(|a| a == d.action);
            let category_ok = ex.category.is_none_or(|c| d.categories.contains(&c));
            if !(action_ok && category_ok) {
                let mut expected = Vec::new();
                if let Some(a) = ex.action {
                    expected.push(format!("action {}", a.as_str()));
                }
                if let Some(c) = ex.category {
                    expected.push(format!("category {}", c.as_str()));
                }
                let cats: Vec<&str> = d.categories.iter().map(|c| c.as_str()).collect();
                out.push(ExampleFailure {
                    rule: rule.clone(),
                    command: ex.command.clone(),
                    expected: expected.join(", "),
                    got: format!(
                        "action {} [{}] by {}: {}",
                        d.action.as_str(),
                        cats.join(", "),
                        d.rule.as_deref().unwrap_or("-"),
                        d.reason
                    ),
                });
            }
        }
        out
    }

    /// How many examples [`PolicyEngine::test_examples`] checks.
    pub fn example_count(&self) -> usize {
        self.examples.len()
    }

    /// The confinement this policy asks for, for a command decided as `decision`
    /// (`[confinement]`: Landlock on or off; offline never, always, or unless the command
    /// was classified networked).
    pub fn confinement(&self, decision: &Decision) -> crate::service::confine::Confinement {
        let offline = match self.offline {
            Offline::Never => false,
            Offline::Always => true,
            Offline::UnlessNetworked => !decision.categories.contains(&Category::Networked),
        };
        crate::service::confine::Confinement {
            landlock: self.landlock,
            offline,
        }
    }

    /// The `[sandbox]` table: the workspace's path inside a command's sandbox and the host
    /// paths bound into it.
    pub fn sandbox(&self) -> &crate::service::sandbox::SandboxConfig {
        &self.sandbox
    }

    /// The paths a proxied run's mount hides (`[secrets] paths` and `private_key_paths`).
    pub fn secret_paths(&self) -> &SecretPaths {
        &self.secret_paths
    }

    /// The globs of `[secrets] paths` (default: `.env`, `.env.*`, SSH private key names,
    /// `*.key`, `.ssh/`, `.aws/`); a trailing `/` names a directory.
    pub fn secret_globs(&self) -> Vec<String> {
        self.secret_paths.names().to_vec()
    }

    /// The globs of `[secrets] private_key_paths` (default `*.pem`): files hidden when
    /// they hold a private key.
    pub fn private_key_globs(&self) -> Vec<String> {
        self.secret_paths.private_key_globs().to_vec()
    }

    /// The environment variables withheld from a proxied command (`[secrets] env`,
    /// `env_words`, `env_url_credentials`, `env_allow`).
    pub fn secret_env(&self) -> &SecretEnv {
        &self.secret_env
    }

    /// Environment variable name globs withheld from the child, in any case (e.g.
    /// `*_TOKEN`, `*_SECRET*`, `AWS_*`, `*_KEY`, `*PASSWORD*`, `SSH_AUTH_SOCK`).
    pub fn secret_env_patterns(&self) -> Vec<String> {
        self.secret_env.globs().to_vec()
    }

    /// Words that make a variable name secret (`token`, `key`, `auth`, `pat`, …).
    pub fn secret_env_words(&self) -> Vec<String> {
        self.secret_env.words().to_vec()
    }

    /// Environment variable names (globs) passed to the child even though they are
    /// secret-looking (`[secrets] env_allow`).
    pub fn secret_env_allowed(&self) -> Vec<String> {
        self.secret_env.allowed().to_vec()
    }

    /// Whether the policy withholds the variable `name=value` from the child.
    pub fn withholds_env(&self, name: &str, value: &str) -> bool {
        self.secret_env.withholds(name, value)
    }

    pub(crate) fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

/// The action for a category when the policy file does not say.
fn default_action(c: Category) -> Action {
    match c {
        Category::ReadOnly => Action::Allow,
        Category::Mutating | Category::Destructive | Category::Unknown => Action::CheckpointThenRun,
        Category::Networked => Action::Ask,
        Category::HostEscape | Category::Privileged | Category::Interactive => Action::Deny,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(s: &str) -> Decision {
        PolicyEngine::builtin().decide(&CommandRequest {
            argv: None,
            shell: Some(s.into()),
            cwd: "/".into(),
        })
    }

    #[test]
    fn builtin_loads_and_examples_pass() {
        let e = PolicyEngine::builtin();
        assert!(e.example_count() > 10);
        let f = e.test_examples();
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn basic_decisions() {
        assert_eq!(sh("ls -la").action, Action::Allow);
        assert_eq!(sh("rm -rf /").action, Action::Deny);
        assert_eq!(sh("rm -rf build").action, Action::CheckpointThenRun);
        assert_eq!(sh("rm -rf /").offending.as_deref(), Some("/"));
    }
}
