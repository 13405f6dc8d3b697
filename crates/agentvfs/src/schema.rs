//! The JSON contract: the schema of every `avfs --json` command's output, derived from the
//! services' own output types so it cannot drift from them. `schema/avfs.schema.json` is
//! this document, checked by a test. The few outputs of adapter-only commands (completions,
//! man pages, the interactive shell) are declared here too, so every type is the library's.

use schemars::{JsonSchema, schema_for};
use serde_json::{Value, json};

use std::path::PathBuf;

use serde::Serialize;

use crate::model::{CheckReport, CheckpointInfo, GcReport, PathVersion, Quota, StatsReport};
use crate::service::files::NodeInfo;
use crate::service::search::{FoundEntry, GrepMatch};
use crate::service::transfer::TransferReport;
use crate::service::{DeleteReport, Target, VaultListEntry};
use crate::store::AuditRecord;

use crate::model::OpInfo;
use crate::model::merge::MergeReport;
use crate::service::apply::ApplyReport;

use crate::service::mounts::MountRecord;

use crate::service::apply::ExportOutput;
use crate::service::files::{
    CatOutput, MetaOutput, MoveOutput, PathsOutput, TreeNode, WriteOutput,
};
use crate::service::history::DiffOutput;
use crate::service::maintenance::{CompactOutput, PruneOutput};
use crate::service::mounts::UnmountOutput;
use crate::service::workspace::{ForkOutput, InfoOutput};

// `avfs completions` data.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CompletionsOutput {
    pub shell: String,
    pub script: String,
}

// `avfs man` data.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ManOutput {
    /// The pages written (with --dir).
    pub pages: Vec<PathBuf>,
    /// The avfs(1) page in roff (without --dir).
    pub text: Option<String>,
}

// `avfs shell` data.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ShellOutput {
    /// Command lines run.
    pub commands: u64,
    /// How many of them failed.
    pub failed: u64,
}

fn s<T: JsonSchema>() -> Value {
    let mut schema = serde_json::to_value(schema_for!(T)).unwrap_or(Value::Null);
    close_objects(&mut schema);
    schema
}

/// The contract is exact: an object schema that lists its properties allows no others, so
/// a field added to an output type without a schema change fails the contract tests
/// instead of slipping through. Maps (no `properties`) keep their `additionalProperties`.
fn close_objects(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            map.values_mut().for_each(close_objects);
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// Command name (as in the envelope's `command`) to the schema of its `data`.
pub fn commands() -> Vec<(&'static str, Value)> {
    vec![
        ("vault create", s::<Target>()),
        ("vault list", s::<Vec<VaultListEntry>>()),
        ("vault use", s::<Target>()),
        ("vault info", s::<InfoOutput>()),
        ("vault delete", s::<DeleteReport>()),
        ("vault fork", s::<ForkOutput>()),
        ("vault check", s::<CheckReport>()),
        ("checkpoint save", s::<CheckpointInfo>()),
        ("checkpoint list", s::<Vec<CheckpointInfo>>()),
        ("checkpoint info", s::<CheckpointInfo>()),
        ("checkpoint restore", s::<CheckpointInfo>()),
        ("checkpoint delete", s::<CheckpointInfo>()),
        ("ls", s::<Vec<NodeInfo>>()),
        ("cat", s::<CatOutput>()),
        ("write", s::<WriteOutput>()),
        ("mkdir", s::<PathsOutput>()),
        ("rm", s::<PathsOutput>()),
        ("cp", s::<MoveOutput>()),
        ("mv", s::<MoveOutput>()),
        ("ln", s::<NodeInfo>()),
        ("chmod", s::<PathsOutput>()),
        ("tree", s::<TreeNode>()),
        ("stat", s::<NodeInfo>()),
        ("find", s::<Vec<FoundEntry>>()),
        ("grep", s::<Vec<GrepMatch>>()),
        ("log", s::<Vec<PathVersion>>()),
        ("tag", s::<NodeInfo>()),
        ("untag", s::<NodeInfo>()),
        ("meta get", s::<MetaOutput>()),
        ("meta set", s::<MetaOutput>()),
        ("meta unset", s::<MetaOutput>()),
        ("import", s::<TransferReport>()),
        ("export", s::<ExportOutput>()),
        ("diff", s::<DiffOutput>()),
        ("merge", s::<MergeReport>()),
        ("op log", s::<Vec<OpInfo>>()),
        ("op restore", s::<OpInfo>()),
        ("undo", s::<OpInfo>()),
        ("redo", s::<OpInfo>()),
        ("prune", s::<PruneOutput>()),
        ("apply", s::<ApplyReport>()),
        ("mount", s::<MountRecord>()),
        ("unmount", s::<UnmountOutput>()),
        ("mounts", s::<Vec<MountRecord>>()),
        (
            "policy show",
            s::<crate::service::policy::PolicyShowOutput>(),
        ),
        (
            "policy test",
            s::<crate::service::policy::PolicyTestOutput>(),
        ),
        ("proxy check", s::<crate::service::policy::Decision>()),
        ("proxy exec", s::<crate::service::proxy::Envelope>()),
        ("rollback", s::<OpInfo>()),
        ("completions", s::<CompletionsOutput>()),
        ("man", s::<ManOutput>()),
        ("shell", s::<ShellOutput>()),
        (
            "session start",
            s::<crate::service::session::SessionRecord>(),
        ),
        ("session stop", s::<crate::service::session::StopReport>()),
        (
            "session list",
            s::<Vec<crate::service::session::SessionRecord>>(),
        ),
        ("quota show", s::<Quota>()),
        ("quota set", s::<Quota>()),
        ("audit", s::<Vec<AuditRecord>>()),
        ("stats", s::<StatsReport>()),
        ("gc", s::<GcReport>()),
        ("compact", s::<CompactOutput>()),
        ("schema", json!({ "type": "object" })),
    ]
}

/// The whole contract: the envelope, the error shape and each command's data.
pub fn document() -> Value {
    let commands: serde_json::Map<String, Value> = commands()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let mut envelope = envelope();
    close_objects(&mut envelope);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "avfs --json output",
        "description": "Every avfs command run with --json prints exactly one document matching `envelope`. On success `data` matches `commands[command]`.",
        "envelope": envelope,
        "commands": commands,
    })
}

/// The envelope every `--json` document matches: success with `data`, or failure with a
/// typed `error`.
fn envelope() -> Value {
    json!({
            "oneOf": [
                {
                    "type": "object",
                    "required": ["ok", "command", "data"],
                    "properties": {
                        "ok": { "const": true },
                        "command": { "type": "string" },
                        "data": {}
                    }
                },
                {
                    "type": "object",
                    "required": ["ok", "command", "error"],
                    "properties": {
                        "ok": { "const": false },
                        "command": { "type": "string" },
                        "error": {
                            "type": "object",
                            "required": ["kind", "message", "details"],
                            "properties": {
                                "kind": { "type": "string", "pattern": "^[a-z_]+$" },
                                "message": { "type": "string" },
                                "details": { "type": "object" }
                            }
                        }
                    }
                }
            ]
    })
}
