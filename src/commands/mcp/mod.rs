//! `avfs mcp`: a Model Context Protocol server on stdin/stdout (the `rmcp` SDK). Each tool
//! calls the same service as the matching CLI command, so its result is exactly the `data`
//! of `avfs --json <command>` (the service's output type; for `exec`, the proxy's envelope)
//! and a failure carries the same typed error kind, message and details.

use std::path::PathBuf;

use clap::Args;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use std::path::Path;

use agentvfs::model::merge::{MergeOptions, MergeStrategy};
use agentvfs::model::{Actor, CheckpointInfo, Workspace, WriteOptions, limits};
use agentvfs::service::confine::Confinement;
use agentvfs::service::exec::{self, Place};
use agentvfs::service::history::{self, DiffRequest};
use agentvfs::service::policy::{CommandRequest, PolicyEngine};
use agentvfs::service::proxy::{CheckpointMode, EXEC_OP, ExecOptions};
use agentvfs::service::sandbox::Mode;
use agentvfs::service::workspace::ForkOutput;
use agentvfs::service::{Registry, WorkspaceService, files};
use agentvfs::{Error, Result};

use super::Ctx;
use crate::output::Reply;

mod args;
use args::Checked;

/// The long `avfs mcp --help` text (the examples come from `help.rs`, as for every command).
pub const ABOUT: &str = "\
Serve the workspace tools over the Model Context Protocol on stdin/stdout.

An MCP client (Claude Desktop, an IDE, an agent harness) starts it as a stdio server:
  {\"command\": \"avfs\", \"args\": [\"mcp\", \"--workspace\", \"task-1\"]}

Tools: exec, read_file, write_file, list_files, diff, checkpoint, rollback, fork, merge.
A result is the `data` of the matching `avfs --json` command (for exec, the proxy's
envelope); a failure is a tool error holding {kind, message, details}, arguments that do
not fit a tool's schema included (kind invalid_argument). Every tool takes
an optional `workspace` that overrides --workspace for that call (`vault` is accepted as
its old name). stdout carries only the protocol, with or without --json.";

#[derive(Args)]
pub struct McpArgs {
    /// A TOML policy file that decides every `exec`, instead of the built-in policy and
    /// over a session's own; calls cannot choose another.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

pub fn cmd_mcp(ctx: &Ctx, a: McpArgs) -> Result<Reply> {
    // A policy that does not load fails here, not on the agent's first command.
    PolicyEngine::from_path(a.policy.as_deref())?;
    let server = AvfsServer::new(ctx.workspace.clone(), a.policy);
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
    workspace: Option<String>,
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
    pub checkpoint: Option<CheckpointMode>,
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
    /// How the command's file system is made: "overlay" (native-speed writes on a kernel
    /// overlay of the fork, ingested after), "fuse", "copy", or "auto" (the default:
    /// overlay where the sandbox can be made). See the envelope's `mode` and `sandbox`.
    #[serde(default)]
    pub mode: Option<Mode>,
    /// Where the workspace appears inside the sandbox (default: the policy's
    /// `[sandbox] workspace_path`, built in "/workspace").
    #[serde(default)]
    pub workspace_path: Option<String>,
    /// stdout and stderr as one stream in the order written: the envelope's `stdout` holds
    /// both (`interleaved: true`) and `stderr` is empty.
    #[serde(default)]
    pub interleave: bool,
    /// List the changes the workspace's ignore rules leave out too (.gitignore,
    /// .avfsignore, .git/info/exclude, .git/) instead of counting them in `ignored`.
    #[serde(default)]
    pub include_ignored: bool,
    /// The workspace to act on: a vault or fork name, or a vault file path (default: the
    /// server's --workspace, else $AVFS_WORKSPACE, else the current one). `vault` is its
    /// old, deprecated name.
    #[serde(default, alias = "vault")]
    pub workspace: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileParams {
    /// The file, e.g. "src/main.rs" or "/src/main.rs".
    pub path: String,
    /// Read it as of this checkpoint instead of the live state.
    #[serde(default)]
    pub at: Option<String>,
    /// The workspace to act on: a vault or fork name, or a vault file path (default: the
    /// server's --workspace, else $AVFS_WORKSPACE, else the current one). `vault` is its
    /// old, deprecated name.
    #[serde(default, alias = "vault")]
    pub workspace: Option<String>,
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
    /// Apply only while the workspace's newest operation is this id (from `op_log`; 0 for
    /// a workspace with none), as a compare-and-swap with the change; otherwise fail with
    /// head_moved and change nothing.
    #[serde(default)]
    pub if_head: Option<i64>,
    /// The workspace to act on: a vault or fork name, or a vault file path (default: the
    /// server's --workspace, else $AVFS_WORKSPACE, else the current one). `vault` is its
    /// old, deprecated name.
    #[serde(default, alias = "vault")]
    pub workspace: Option<String>,
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
    /// The workspace to act on: a vault or fork name, or a vault file path (default: the
    /// server's --workspace, else $AVFS_WORKSPACE, else the current one). `vault` is its
    /// old, deprecated name.
    #[serde(default, alias = "vault")]
    pub workspace: Option<String>,
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
    /// List the changes the workspace's ignore rules leave out too (.gitignore,
    /// .avfsignore, .git/info/exclude, .git/) instead of counting them in `ignored`.
    #[serde(default)]
    pub include_ignored: bool,
    /// The workspace to act on: a vault or fork name, or a vault file path (default: the
    /// server's --workspace, else $AVFS_WORKSPACE, else the current one). `vault` is its
    /// old, deprecated name.
    #[serde(default, alias = "vault")]
    pub workspace: Option<String>,
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
    /// Apply only while the workspace's newest operation is this id (from `op_log`; 0 for
    /// a workspace with none), as a compare-and-swap with the change; otherwise fail with
    /// head_moved and change nothing.
    #[serde(default)]
    pub if_head: Option<i64>,
    /// The workspace to act on: a vault or fork name, or a vault file path (default: the
    /// server's --workspace, else $AVFS_WORKSPACE, else the current one). `vault` is its
    /// old, deprecated name.
    #[serde(default, alias = "vault")]
    pub workspace: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackParams {
    /// The exec_id from an exec envelope (default: the last proxied command that changed
    /// something and is not already rolled back or undone).
    #[serde(default)]
    pub exec_id: Option<i64>,
    /// Apply only while the workspace's newest operation is this id (from `op_log`; 0 for
    /// a workspace with none), as a compare-and-swap with the change; otherwise fail with
    /// head_moved and change nothing.
    #[serde(default)]
    pub if_head: Option<i64>,
    /// The workspace to act on: a vault or fork name, or a vault file path (default: the
    /// server's --workspace, else $AVFS_WORKSPACE, else the current one). `vault` is its
    /// old, deprecated name.
    #[serde(default, alias = "vault")]
    pub workspace: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpLogParams {
    /// At most this many entries, newest first (default 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// The workspace to act on: a vault or fork name, or a vault file path (default: the
    /// server's --workspace, else $AVFS_WORKSPACE, else the current one). `vault` is its
    /// old, deprecated name.
    #[serde(default, alias = "vault")]
    pub workspace: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkParams {
    /// The new fork's name (registered, so it can be passed as `workspace` afterwards).
    pub name: String,
    /// The workspace to fork from (default: the selected workspace).
    #[serde(default)]
    pub source: Option<String>,
    /// Fork at this checkpoint of the source instead of its live state.
    #[serde(default)]
    pub at: Option<String>,
    /// The selected workspace, which `source` defaults to (default: the server's
    /// --workspace, else $AVFS_WORKSPACE, else the current one). `vault` is its old,
    /// deprecated name.
    #[serde(default, alias = "vault")]
    pub workspace: Option<String>,
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
    /// The fork whose changes to merge (default: the selected workspace, when it is a fork).
    #[serde(default)]
    pub fork: Option<String>,
    /// The workspace to merge into (default: the fork's parent).
    #[serde(default)]
    pub into: Option<String>,
    /// Resolve every conflict with one side ("ours" or "theirs") instead of failing with
    /// merge_conflict.
    #[serde(default)]
    pub strategy: Option<StrategyParam>,
    /// Report what would happen without changing anything.
    #[serde(default)]
    pub dry_run: bool,
    /// Also carry the fork's changes the ignore rules leave out (by default they stay in
    /// the fork and are counted in `ignored`).
    #[serde(default)]
    pub include_ignored: bool,
    /// The selected workspace, which `fork` defaults to (default: the server's
    /// --workspace, else $AVFS_WORKSPACE, else the current one). `vault` is its old,
    /// deprecated name.
    #[serde(default, alias = "vault")]
    pub workspace: Option<String>,
}

/// The name of the selected workspace, for tools whose subject defaults to it.
fn selected(ctx: &Ctx) -> Result<String> {
    Ok(ctx.service.resolve(ctx.workspace.as_deref())?.name)
}

/// An agent never reads or changes a secret's content (the mount refuses it the same way).
fn check_secret(policy: Option<&Path>, ws: &Workspace, path: &str, at: Option<&str>) -> Result<()> {
    PolicyEngine::from_path(policy)?
        .secret_paths()
        .check_agent_access(ws, path, at)?;
    Ok(())
}

#[tool_router]
impl AvfsServer {
    pub fn new(workspace: Option<String>, policy: Option<PathBuf>) -> AvfsServer {
        AvfsServer {
            workspace,
            policy,
            tool_router: Self::tool_router(),
        }
    }

    /// Run `tool` with the call's context on a blocking thread (the library is synchronous
    /// and an exec may run for minutes); its output, serialized, is the tool's result.
    async fn call<T: Serialize>(
        &self,
        workspace: Option<String>,
        tool: impl FnOnce(&Ctx) -> Result<T> + Send + 'static,
    ) -> std::result::Result<CallToolResult, McpError> {
        self.call_if_head(workspace, None, tool).await
    }

    /// `call` for a tool that changes the workspace: with `if_head`, its changes apply only
    /// while the workspace's newest operation is that one (`Workspace::expect_head`).
    async fn call_if_head<T: Serialize>(
        &self,
        workspace: Option<String>,
        if_head: Option<i64>,
        tool: impl FnOnce(&Ctx) -> Result<T> + Send + 'static,
    ) -> std::result::Result<CallToolResult, McpError> {
        if if_head.is_some_and(|h| h < 0) {
            let e = Error::invalid("`if_head` is an operation id: 0 or more");
            return Ok(CallToolResult::structured_error(error_value(&e)));
        }
        let workspace = workspace.or_else(|| self.workspace.clone());
        let outcome = tokio::task::spawn_blocking(move || {
            let ctx = Ctx {
                json: true,
                workspace,
                service: WorkspaceService::new(Registry::from_env(), Actor::from_env("mcp"))
                    .with_expected_head(if_head),
            };
            tool(&ctx).map(|out| crate::output::json_data(&out))
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
        Parameters(p): Parameters<Checked<ExecParams>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let p = match p.0 {
            Ok(p) => p,
            Err(refused) => return Ok(refused),
        };
        let policy = self.policy.clone();
        self.call(p.workspace.clone(), move |ctx| {
            let (argv, shell) = match (p.argv, p.shell) {
                (Some(argv), None) if !argv.is_empty() => (Some(argv), None),
                (None, Some(shell)) => (None, Some(shell)),
                _ => return Err(Error::invalid("give exactly one of `argv` or `shell`")),
            };
            let defaults = ExecOptions::default();
            let timeout = match &p.timeout {
                Some(t) => limits::parse_timeout("--timeout", t)?,
                None => defaults.timeout,
            };
            let cwd = p.cwd.unwrap_or(defaults.cwd.clone());
            let req = CommandRequest {
                argv,
                shell,
                cwd: cwd.clone(),
            };
            let opts = ExecOptions {
                cwd,
                timeout,
                readonly: p.readonly,
                checkpoint: p.checkpoint.unwrap_or(defaults.checkpoint),
                output_cap: p.max_output.unwrap_or(defaults.output_cap),
                approve: p.approve,
                confine: Confinement {
                    landlock: p.confine,
                    offline: p.offline,
                },
                mode: p.mode.unwrap_or(defaults.mode),
                workspace_path: p.workspace_path,
                include_ignored: p.include_ignored,
                interleave: p.interleave,
                ..defaults
            };
            let place = match p.session {
                Some(name) => Place::Session(name),
                None => Place::Selected(ctx.workspace.clone()),
            };
            exec::exec(
                &ctx.service,
                super::mounter(),
                &place,
                policy.as_deref(),
                req,
                opts,
                None,
            )
        })
        .await
    }

    #[tool(
        description = "Read a file of the workspace (optionally as of a checkpoint). Returns {path, size, encoding, content}: encoding is utf8, or base64 for binary content. Secret files (the policy's [secrets]: .env, private keys, .ssh/, .aws/) fail with secret_refused.",
        annotations(read_only_hint = true)
    )]
    async fn read_file(
        &self,
        Parameters(p): Parameters<Checked<ReadFileParams>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let p = match p.0 {
            Ok(p) => p,
            Err(refused) => return Ok(refused),
        };
        let policy = self.policy.clone();
        self.call(p.workspace, move |ctx| {
            let (_, ws) = ctx.open()?;
            check_secret(policy.as_deref(), &ws, &p.path, p.at.as_deref())?;
            files::cat(&ws, &p.path, p.at.as_deref())
        })
        .await
    }

    #[tool(
        description = "Write a file in the workspace (replace, or append). Returns {path, size, content_id}.",
        annotations(destructive_hint = true, idempotent_hint = false)
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<Checked<WriteFileParams>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let p = match p.0 {
            Ok(p) => p,
            Err(refused) => return Ok(refused),
        };
        let policy = self.policy.clone();
        self.call_if_head(p.workspace, p.if_head, move |ctx| {
            let (_, ws) = ctx.open()?;
            check_secret(policy.as_deref(), &ws, &p.path, None)?;
            let mode = match &p.mode {
                Some(m) => Some(files::parse_mode(m).map_err(|e| match e {
                    // Worded as the CLI's `--mode` error, as this tool always has.
                    Error::InvalidArgument { message } => Error::invalid(format!(
                        "invalid value '{m}' for '--mode <MODE>': {message}"
                    )),
                    e => e,
                })?),
                None => None,
            };
            let opts = WriteOptions {
                mode,
                parents: p.parents,
                append: p.append,
            };
            files::write(&ws, &p.path, p.content.as_bytes(), opts)
        })
        .await
    }

    #[tool(
        description = "List a directory of the workspace (optionally as of a checkpoint): one entry per child with name, kind, size, mode and times.",
        annotations(read_only_hint = true)
    )]
    async fn list_files(
        &self,
        Parameters(p): Parameters<Checked<ListFilesParams>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let p = match p.0 {
            Ok(p) => p,
            Err(refused) => return Ok(refused),
        };
        self.call(p.workspace, move |ctx| {
            let (_, ws) = ctx.open()?;
            files::ls(
                &ws,
                p.path.as_deref().unwrap_or("/"),
                p.all,
                p.at.as_deref(),
            )
        })
        .await
    }

    #[tool(
        description = "What changed between two states (default: the last checkpoint to the live state): a summary and one entry per changed path, plus a unified patch with patch=true (the content of secret files is withheld).",
        annotations(read_only_hint = true)
    )]
    async fn diff(
        &self,
        Parameters(p): Parameters<Checked<DiffParams>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let p = match p.0 {
            Ok(p) => p,
            Err(refused) => return Ok(refused),
        };
        self.call(p.workspace, move |ctx| {
            let (_, ws) = ctx.open()?;
            let req = DiffRequest {
                from: p.from,
                to: p.to,
                patch: p.patch,
                show_secrets: false,
                line_stats: false,
                include_ignored: p.include_ignored,
            };
            Ok(history::diff(&ws, &req)?.output)
        })
        .await
    }

    #[tool(
        description = "Checkpoints of the workspace: save (the default; cost follows what changed), list, info, restore (atomic) or delete.",
        annotations(destructive_hint = true)
    )]
    async fn checkpoint(
        &self,
        Parameters(p): Parameters<Checked<CheckpointParams>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let p = match p.0 {
            Ok(p) => p,
            Err(refused) => return Ok(refused),
        };
        if p.if_head.is_some()
            && matches!(p.action, CheckpointAction::List | CheckpointAction::Info)
        {
            let e = Error::invalid(
                "`if_head` applies to save, restore and delete, which change the workspace",
            );
            return Ok(CallToolResult::structured_error(error_value(&e)));
        }
        self.call_if_head(p.workspace, p.if_head, move |ctx| {
            let named = |name: Option<String>| {
                name.ok_or_else(|| Error::invalid("this checkpoint action needs a `name`"))
            };
            let out = match p.action {
                CheckpointAction::Save => {
                    let (_, ws) = ctx.open()?;
                    let cp: CheckpointInfo = ws
                        .checkpoint_save(p.name.as_deref(), p.message.as_deref())?
                        .into();
                    serde_json::to_value(cp)
                }
                CheckpointAction::List => {
                    let (_, ws) = ctx.open()?;
                    let list: Vec<CheckpointInfo> =
                        ws.checkpoints()?.into_iter().map(Into::into).collect();
                    serde_json::to_value(list)
                }
                CheckpointAction::Info => {
                    let name = named(p.name)?;
                    let (_, ws) = ctx.open()?;
                    serde_json::to_value(CheckpointInfo::from(ws.checkpoint(&name)?))
                }
                CheckpointAction::Restore => {
                    let name = named(p.name)?;
                    let (_, ws) = ctx.open()?;
                    serde_json::to_value(CheckpointInfo::from(ws.checkpoint_restore(&name)?))
                }
                CheckpointAction::Delete => {
                    let name = named(p.name)?;
                    let (_, ws) = ctx.open()?;
                    serde_json::to_value(CheckpointInfo::from(ws.checkpoint_delete(&name)?))
                }
            };
            Ok(out.unwrap_or(Value::Null))
        })
        .await
    }

    #[tool(
        description = "Restore the state before a proxied command (default: the last exec). Itself an operation, so it can be undone.",
        annotations(destructive_hint = true)
    )]
    async fn rollback(
        &self,
        Parameters(p): Parameters<Checked<RollbackParams>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let p = match p.0 {
            Ok(p) => p,
            Err(refused) => return Ok(refused),
        };
        self.call_if_head(p.workspace, p.if_head, move |ctx| {
            let (_, ws) = ctx.open()?;
            ws.rollback(EXEC_OP, p.exec_id)
        })
        .await
    }

    #[tool(
        description = "The workspace's operations, newest first: id, kind, when, description, and whether undone. The first entry's id is the head that `if_head` compares (no entries: 0); a conditional change first records what a mount or session wrote and has not recorded, so that is always so.",
        annotations(read_only_hint = true)
    )]
    async fn op_log(
        &self,
        Parameters(p): Parameters<Checked<OpLogParams>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let p = match p.0 {
            Ok(p) => p,
            Err(refused) => return Ok(refused),
        };
        self.call(p.workspace, move |ctx| {
            let (_, ws) = ctx.open()?;
            ws.op_log(p.limit.unwrap_or(50))
        })
        .await
    }

    #[tool(
        description = "Fork a workspace in O(1) (no content copied), optionally at a checkpoint. The fork is registered under `name`: pass it as `workspace` to work in it.",
        annotations(destructive_hint = false, idempotent_hint = false)
    )]
    async fn fork(
        &self,
        Parameters(p): Parameters<Checked<ForkParams>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let p = match p.0 {
            Ok(p) => p,
            Err(refused) => return Ok(refused),
        };
        self.call(p.workspace, move |ctx| {
            let source = match p.source {
                Some(s) => s,
                None => selected(ctx)?,
            };
            let (target, fork) = ctx.service.fork(&source, &p.name, p.at.as_deref(), false)?;
            Ok(ForkOutput { target, fork })
        })
        .await
    }

    #[tool(
        description = "Merge a fork's changes into its parent (or `into`), three-way against the fork's base. Conflicts apply nothing and fail with merge_conflict unless a strategy is given.",
        annotations(destructive_hint = true)
    )]
    async fn merge(
        &self,
        Parameters(p): Parameters<Checked<MergeParams>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let p = match p.0 {
            Ok(p) => p,
            Err(refused) => return Ok(refused),
        };
        self.call(p.workspace, move |ctx| {
            let fork = match p.fork {
                Some(f) => f,
                None => selected(ctx)?,
            };
            let strategy = match p.strategy {
                None => MergeStrategy::Fail,
                Some(StrategyParam::Ours) => MergeStrategy::Ours,
                Some(StrategyParam::Theirs) => MergeStrategy::Theirs,
            };
            let opts = MergeOptions {
                strategy,
                dry_run: p.dry_run,
                include_ignored: p.include_ignored,
            };
            ctx.service.merge(&fork, p.into.as_deref(), opts)
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
                 Files: read_file, write_file, list_files, diff. Isolation: `fork` a \
                 workspace, work in it by passing its name as `workspace`, then `merge` it \
                 back. Results \
                 are the JSON of `avfs --json`; failures carry {kind, message, details}.",
            )
    }
}

/// A failed call: the same `error` object as `avfs --json` prints.
fn error_value(e: &Error) -> Value {
    json!({ "kind": e.kind(), "message": e.to_string(), "details": e.details() })
}
