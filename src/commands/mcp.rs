//! `avfs mcp`: a Model Context Protocol server on stdin/stdout (the `rmcp` SDK). Each tool
//! builds the same clap arguments the CLI would and runs them through the same dispatch,
//! so a tool's result is exactly the `data` of `avfs --json <command>` (for `exec`, the
//! proxy's envelope) and a failure carries the same typed error kind, message and details.

use std::path::PathBuf;

use clap::{Args, FromArgMatches};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use agentvfs::model::Actor;
use agentvfs::service::{Registry, WorkspaceService};
use agentvfs::{Error, Result};

use super::checkpoint::{CheckpointCmd, SaveArgs};
use super::files::{CatArgs, LsArgs, WriteArgs};
use super::history::{DiffArgs, MergeArgs, Strategy};
use super::proxy::{CheckpointArg, ExecArgs, RollbackArgs};
use super::vault::{ForkArgs, VaultCmd};
use super::{Command, Ctx, ProxyCmd};
use crate::output::Reply;

/// The long `avfs mcp --help` text (the examples come from `help.rs`, as for every command).
pub const ABOUT: &str = "\
Serve the workspace tools over the Model Context Protocol on stdin/stdout.

An MCP client (Claude Desktop, an IDE, an agent harness) starts it as a stdio server:
  {\"command\": \"avfs\", \"args\": [\"mcp\", \"--vault\", \"task-1\"]}

Tools: exec, read_file, write_file, list_files, diff, checkpoint, rollback, fork, merge.
A result is the `data` of the matching `avfs --json` command (for exec, the proxy's
envelope); a failure is a tool error holding {kind, message, details}. Every tool takes
an optional `vault` that overrides --vault for that call. stdout carries only the
protocol, with or without --json.";

#[derive(Args)]
pub struct McpArgs {
    /// A TOML policy file that decides every `exec`, instead of the built-in policy and
    /// over a session's own; calls cannot choose another.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

pub fn cmd_mcp(ctx: &Ctx, a: McpArgs) -> Result<Reply> {
    // A policy that does not load fails here, not on the agent's first command.
    super::policy::load(a.policy.as_ref())?;
    let server = AvfsServer::new(ctx.vault.clone(), a.policy);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the MCP server", "", e))?;
    runtime.block_on(async {
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| Error::io("starting the MCP server", "", std::io::Error::other(e)))?;
        running
            .waiting()
            .await
            .map_err(|e| Error::io("serving MCP", "", std::io::Error::other(e)))?;
        Ok::<(), Error>(())
    })?;
    // Dropping the runtime waits for calls still running (an exec ends at its timeout), so
    // their mounts are cleaned up. Then exit here: under --json the usual closing document
    // would land on stdout, which belongs to the protocol.
    drop(runtime);
    std::process::exit(agentvfs::error::exit::OK)
}

/// The tools' shared state: the server's defaults. Each call opens what it needs.
#[derive(Clone)]
pub struct AvfsServer {
    vault: Option<String>,
    policy: Option<PathBuf>,
    tool_router: ToolRouter<AvfsServer>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecParams {
    /// The command and its arguments, run without a shell, e.g. ["cargo", "test"].
    /// Give this or `shell`.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// Shell text run with /bin/sh -c, e.g. "make && make test"; the policy parses it like
    /// a shell would. Give this or `argv`.
    #[serde(default)]
    pub shell: Option<String>,
    /// Working directory inside the workspace (default "/").
    #[serde(default)]
    pub cwd: Option<String>,
    /// Kill the command after this long, e.g. "30s" or "5m" (default "300s").
    #[serde(default)]
    pub timeout: Option<String>,
    /// Mount the workspace read-only for this command.
    #[serde(default)]
    pub readonly: bool,
    /// When to checkpoint first: "auto" (when the policy says the command may change
    /// things; the default), "always" or "never".
    #[serde(default)]
    pub checkpoint: Option<CheckpointParam>,
    /// Run a command the policy answered `ask` for, with the approval_token from that
    /// envelope.
    #[serde(default)]
    pub approve: Option<String>,
    /// Run in this session's mount (`avfs session start`) instead of mounting for this call.
    #[serde(default)]
    pub session: Option<String>,
    /// Keep at most this many bytes of stdout and of stderr each (default 1 MiB).
    #[serde(default)]
    pub max_output: Option<usize>,
    /// Landlock: the command may write only inside the workspace and a private TMPDIR.
    #[serde(default)]
    pub confine: bool,
    /// Run without network (a fresh network namespace with only loopback).
    #[serde(default)]
    pub offline: bool,
    /// The vault or fork to act on (default: the server's --vault, else $AVFS_VAULT, else
    /// the current vault).
    #[serde(default)]
    pub vault: Option<String>,
}

#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointParam {
    Auto,
    Always,
    Never,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileParams {
    /// The file, e.g. "src/main.rs" or "/src/main.rs".
    pub path: String,
    /// Read it as of this checkpoint instead of the live state.
    #[serde(default)]
    pub at: Option<String>,
    /// The vault or fork to act on (default: the server's --vault, else $AVFS_VAULT, else
    /// the current vault).
    #[serde(default)]
    pub vault: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileParams {
    /// The file to write.
    pub path: String,
    /// The new content (UTF-8 text).
    pub content: String,
    /// Create missing parent directories.
    #[serde(default)]
    pub parents: bool,
    /// Append instead of replacing.
    #[serde(default)]
    pub append: bool,
    /// Permission bits for a new file in octal, e.g. "755" (default "644").
    #[serde(default)]
    pub mode: Option<String>,
    /// The vault or fork to act on (default: the server's --vault, else $AVFS_VAULT, else
    /// the current vault).
    #[serde(default)]
    pub vault: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesParams {
    /// The directory to list (default "/"); a file lists just that file.
    #[serde(default)]
    pub path: Option<String>,
    /// Include entries whose names start with `.`.
    #[serde(default)]
    pub all: bool,
    /// List as of this checkpoint instead of the live state.
    #[serde(default)]
    pub at: Option<String>,
    /// The vault or fork to act on (default: the server's --vault, else $AVFS_VAULT, else
    /// the current vault).
    #[serde(default)]
    pub vault: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffParams {
    /// From: a checkpoint, a fork, FORK:CHECKPOINT, "@base" (where this fork started) or
    /// "@" (live). Default: the last checkpoint, else "@base".
    #[serde(default)]
    pub from: Option<String>,
    /// To: same forms. Default: "@" (the live state).
    #[serde(default)]
    pub to: Option<String>,
    /// Include a unified patch of the text changes.
    #[serde(default)]
    pub patch: bool,
    /// The vault or fork to act on (default: the server's --vault, else $AVFS_VAULT, else
    /// the current vault).
    #[serde(default)]
    pub vault: Option<String>,
}

#[derive(Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointAction {
    /// Save the live state (cost follows what changed since the last checkpoint).
    #[default]
    Save,
    /// List checkpoints, oldest first.
    List,
    /// Show one checkpoint.
    Info,
    /// Return the workspace to a checkpoint, atomically.
    Restore,
    /// Delete a checkpoint.
    Delete,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointParams {
    /// What to do (default "save").
    #[serde(default)]
    pub action: CheckpointAction,
    /// The checkpoint: optional for save (generated as cp-N), required for info, restore
    /// and delete.
    #[serde(default)]
    pub name: Option<String>,
    /// A message describing the checkpoint (save only).
    #[serde(default)]
    pub message: Option<String>,
    /// The vault or fork to act on (default: the server's --vault, else $AVFS_VAULT, else
    /// the current vault).
    #[serde(default)]
    pub vault: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackParams {
    /// The exec_id from an exec envelope (default: the last proxied command).
    #[serde(default)]
    pub exec_id: Option<i64>,
    /// The vault or fork to act on (default: the server's --vault, else $AVFS_VAULT, else
    /// the current vault).
    #[serde(default)]
    pub vault: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkParams {
    /// The new fork's name (registered, so it can be passed as `vault` afterwards).
    pub name: String,
    /// The vault or fork to fork from (default: the selected vault).
    #[serde(default)]
    pub source: Option<String>,
    /// Fork at this checkpoint of the source instead of its live state.
    #[serde(default)]
    pub at: Option<String>,
    /// The vault whose selection `source` defaults to (default: the server's --vault,
    /// else $AVFS_VAULT, else the current vault).
    #[serde(default)]
    pub vault: Option<String>,
}

#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StrategyParam {
    Ours,
    Theirs,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeParams {
    /// The fork whose changes to merge (default: the selected vault, when it is a fork).
    #[serde(default)]
    pub fork: Option<String>,
    /// The vault or fork to merge into (default: the fork's parent).
    #[serde(default)]
    pub into: Option<String>,
    /// Resolve every conflict with one side ("ours" or "theirs") instead of failing with
    /// merge_conflict.
    #[serde(default)]
    pub strategy: Option<StrategyParam>,
    /// Report what would happen without changing anything.
    #[serde(default)]
    pub dry_run: bool,
    /// The vault whose selection `fork` defaults to (default: the server's --vault, else
    /// $AVFS_VAULT, else the current vault).
    #[serde(default)]
    pub vault: Option<String>,
}

/// Parse CLI arguments into an `Args` struct, so a tool gets the CLI's defaults and value
/// rules (durations, octal modes) from the one place they are declared.
fn cli_args<A: Args + FromArgMatches>(args: &[&str]) -> Result<A> {
    let cmd = A::augment_args(clap::Command::new("avfs").no_binary_name(true));
    cmd.try_get_matches_from(args)
        .and_then(|m| A::from_arg_matches(&m))
        .map_err(|e| {
            let text = e.render().to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ");
            Error::invalid(first.to_string())
        })
}

/// The name of the selected vault or fork, for tools whose subject defaults to it.
fn selected(ctx: &Ctx) -> Result<String> {
    Ok(ctx.service.resolve(ctx.vault.as_deref())?.name)
}

#[tool_router]
impl AvfsServer {
    pub fn new(vault: Option<String>, policy: Option<PathBuf>) -> AvfsServer {
        AvfsServer {
            vault,
            policy,
            tool_router: Self::tool_router(),
        }
    }

    /// Run `command` (built with the call's context) the way the CLI would, on a blocking
    /// thread: the library is synchronous and an exec may run for minutes.
    async fn call(
        &self,
        vault: Option<String>,
        command: impl FnOnce(&Ctx) -> Result<Command> + Send + 'static,
    ) -> std::result::Result<CallToolResult, McpError> {
        let vault = vault.or_else(|| self.vault.clone());
        let outcome = tokio::task::spawn_blocking(move || {
            let ctx = Ctx {
                json: true,
                vault,
                service: WorkspaceService::new(Registry::from_env(), Actor::from_env("mcp")),
            };
            let command = command(&ctx)?;
            super::run(&ctx, command).1.map(|reply| reply.data)
        })
        .await
        .map_err(|e| McpError::internal_error(format!("the tool call failed: {e}"), None))?;
        Ok(match outcome {
            Ok(data) => CallToolResult::structured(data),
            Err(e) => CallToolResult::structured_error(error_value(&e)),
        })
    }

    #[tool(
        description = "Run one command in the workspace through the policy-checked proxy: classify, checkpoint, mount, run with a timeout. Returns the envelope: decision, ran, exit_code, capped stdout/stderr, the exact changed files, the checkpoint and an exec_id for rollback. A command that fails is still a successful call (read exit_code); a denied one comes back with ran=false (and an approval_token when the policy asks for approval).",
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn exec(
        &self,
        Parameters(p): Parameters<ExecParams>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let policy = self.policy.clone();
        self.call(p.vault.clone(), move |_| {
            let mut a: ExecArgs = cli_args(&[])?;
            match (p.argv, p.shell) {
                (Some(argv), None) if !argv.is_empty() => a.argv = argv,
                (None, Some(shell)) => a.shell = Some(shell),
                _ => return Err(Error::invalid("give exactly one of `argv` or `shell`")),
            }
            a.timeout = p.timeout.unwrap_or(a.timeout);
            a.cwd = p.cwd.unwrap_or(a.cwd);
            a.readonly = p.readonly;
            if let Some(c) = p.checkpoint {
                a.checkpoint = match c {
                    CheckpointParam::Auto => CheckpointArg::Auto,
                    CheckpointParam::Always => CheckpointArg::Always,
                    CheckpointParam::Never => CheckpointArg::Never,
                };
            }
            a.approve = p.approve;
            a.session = p.session;
            a.policy = policy;
            a.max_output = p.max_output.unwrap_or(a.max_output);
            a.confine = p.confine;
            a.offline = p.offline;
            Ok(Command::Proxy(ProxyCmd::Exec(a)))
        })
        .await
    }

    #[tool(
        description = "Read a file of the workspace (optionally as of a checkpoint). Returns {path, size, encoding, content}: encoding is utf8, or base64 for binary content. Secret files (the policy's [secrets]: .env, private keys, .ssh/, .aws/) fail with secret_refused.",
        annotations(read_only_hint = true)
    )]
    async fn read_file(
        &self,
        Parameters(p): Parameters<ReadFileParams>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let policy = self.policy.clone();
        self.call(p.vault, move |ctx| {
            // An agent never gets a secret's content (the mount refuses it the same way).
            let (_, ws) = ctx.open()?;
            super::policy::load(policy.as_ref())?
                .secret_paths()
                .check_agent_access(&ws, &p.path, p.at.as_deref())?;
            Ok(Command::Cat(CatArgs {
                path: p.path,
                at: p.at,
            }))
        })
        .await
    }

    #[tool(
        description = "Write a file in the workspace (replace, or append). Returns {path, size, content_id}.",
        annotations(destructive_hint = true, idempotent_hint = false)
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<WriteFileParams>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let policy = self.policy.clone();
        self.call(p.vault, move |ctx| {
            // Nor can it change one, as in the mount.
            let (_, ws) = ctx.open()?;
            super::policy::load(policy.as_ref())?
                .secret_paths()
                .check_agent_access(&ws, &p.path, None)?;
            let mode = match &p.mode {
                Some(m) => cli_args::<WriteArgs>(&[&format!("--mode={m}"), "--", "x"])?.mode,
                None => None,
            };
            Ok(Command::Write(WriteArgs {
                path: p.path,
                content: Some(p.content),
                parents: p.parents,
                append: p.append,
                mode,
            }))
        })
        .await
    }

    #[tool(
        description = "List a directory of the workspace (optionally as of a checkpoint): one entry per child with name, kind, size, mode and times.",
        annotations(read_only_hint = true)
    )]
    async fn list_files(
        &self,
        Parameters(p): Parameters<ListFilesParams>,
    ) -> std::result::Result<CallToolResult, McpError> {
        self.call(p.vault, move |_| {
            let mut a: LsArgs = cli_args(&[])?;
            a.path = p.path.unwrap_or(a.path);
            a.all = p.all;
            a.at = p.at;
            Ok(Command::Ls(a))
        })
        .await
    }

    #[tool(
        description = "What changed between two states (default: the last checkpoint to the live state): a summary and one entry per changed path, plus a unified patch with patch=true (the content of secret files is withheld).",
        annotations(read_only_hint = true)
    )]
    async fn diff(
        &self,
        Parameters(p): Parameters<DiffParams>,
    ) -> std::result::Result<CallToolResult, McpError> {
        self.call(p.vault, move |_| {
            Ok(Command::Diff(DiffArgs {
                from: p.from,
                to: p.to,
                name_status: false,
                stat: false,
                patch: p.patch,
                show_secrets: false,
            }))
        })
        .await
    }

    #[tool(
        description = "Checkpoints of the workspace: save (the default; cost follows what changed), list, info, restore (atomic) or delete.",
        annotations(destructive_hint = true)
    )]
    async fn checkpoint(
        &self,
        Parameters(p): Parameters<CheckpointParams>,
    ) -> std::result::Result<CallToolResult, McpError> {
        self.call(p.vault, move |_| {
            let named = |name: Option<String>| {
                name.ok_or_else(|| Error::invalid("this checkpoint action needs a `name`"))
            };
            let cmd = match p.action {
                CheckpointAction::Save => CheckpointCmd::Save(SaveArgs {
                    name: p.name,
                    message: p.message,
                }),
                CheckpointAction::List => CheckpointCmd::List,
                CheckpointAction::Info => CheckpointCmd::Info {
                    name: named(p.name)?,
                },
                CheckpointAction::Restore => CheckpointCmd::Restore {
                    name: named(p.name)?,
                },
                CheckpointAction::Delete => CheckpointCmd::Delete {
                    name: named(p.name)?,
                },
            };
            Ok(Command::Checkpoint(cmd))
        })
        .await
    }

    #[tool(
        description = "Restore the state before a proxied command (default: the last exec). Itself an operation, so it can be undone.",
        annotations(destructive_hint = true)
    )]
    async fn rollback(
        &self,
        Parameters(p): Parameters<RollbackParams>,
    ) -> std::result::Result<CallToolResult, McpError> {
        self.call(p.vault, move |_| {
            Ok(Command::Rollback(RollbackArgs { exec_id: p.exec_id }))
        })
        .await
    }

    #[tool(
        description = "Fork a vault or fork in O(1) (no content copied), optionally at a checkpoint. The fork is registered under `name`: pass it as `vault` to work in it.",
        annotations(destructive_hint = false, idempotent_hint = false)
    )]
    async fn fork(
        &self,
        Parameters(p): Parameters<ForkParams>,
    ) -> std::result::Result<CallToolResult, McpError> {
        self.call(p.vault, move |ctx| {
            let source = match p.source {
                Some(s) => s,
                None => selected(ctx)?,
            };
            Ok(Command::Vault(VaultCmd::Fork(ForkArgs {
                source,
                name: p.name,
                at: p.at,
                make_current: false,
            })))
        })
        .await
    }

    #[tool(
        description = "Merge a fork's changes into its parent (or `into`), three-way against the fork's base. Conflicts apply nothing and fail with merge_conflict unless a strategy is given.",
        annotations(destructive_hint = true)
    )]
    async fn merge(
        &self,
        Parameters(p): Parameters<MergeParams>,
    ) -> std::result::Result<CallToolResult, McpError> {
        self.call(p.vault, move |ctx| {
            let fork = match p.fork {
                Some(f) => f,
                None => selected(ctx)?,
            };
            Ok(Command::Merge(MergeArgs {
                fork,
                into: p.into,
                strategy: p.strategy.map(|s| match s {
                    StrategyParam::Ours => Strategy::Ours,
                    StrategyParam::Theirs => Strategy::Theirs,
                }),
                dry_run: p.dry_run,
            }))
        })
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for AvfsServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("avfs", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "agentvfs workspace tools. Run commands with `exec` (policy-checked, \
                 checkpointed, reports exactly what changed); undo one with `rollback`. \
                 Files: read_file, write_file, list_files, diff. Isolation: `fork` a vault, \
                 work in it by passing its name as `vault`, then `merge` it back. Results \
                 are the JSON of `avfs --json`; failures carry {kind, message, details}.",
            )
    }
}

/// A failed call: the same `error` object as `avfs --json` prints.
fn error_value(e: &Error) -> Value {
    json!({ "kind": e.kind(), "message": e.to_string(), "details": e.details() })
}
