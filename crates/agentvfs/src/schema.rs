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
use crate::service::git::HandbackReport;
use crate::service::search::{FoundEntry, GrepMatch};
use crate::service::transfer::ImportOutput;
use crate::service::{DeleteReport, Target, VaultListEntry};
use crate::store::AuditRecord;

use crate::model::OpInfo;
use crate::model::merge::MergeReport;
use crate::service::apply::ApplyReport;
use crate::service::approvals::Grant;

use crate::service::mounts::MountRecord;

use crate::service::apply::ExportOutput;
use crate::service::files::{
    CatOutput, MetaOutput, MoveOutput, PathsOutput, TreeNode, WriteOutput,
};
use crate::service::history::DiffOutput;
use crate::service::maintenance::{CompactOutput, PruneOutput};
use crate::service::mounts::UnmountOutput;
use crate::service::workspace::{ForkOutput, InfoOutput, RetentionOutput};

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
    iso_time_properties(&mut schema);
    close_objects(&mut schema);
    schema
}

/// Output fields holding a time as nanoseconds since the Unix epoch. In `--json` output each
/// also comes as an RFC 3339 string beside it, `<field>_iso` (`at` and `at_iso`).
pub const TIME_FIELDS: [&str; 7] = [
    "at",
    "atime",
    "ctime",
    "mtime",
    "created_at",
    "since",
    "expires_at",
];
/// Maps with names chosen by users or workspaces (ignore counts, metadata, xattrs): their
/// keys are never time fields.
const FREE_FORM: [&str; 3] = ["ignored", "meta", "xattrs"];

pub use crate::model::iso_time;

/// Add `<field>_iso` beside every time field of an output value (see [`TIME_FIELDS`]).
pub fn add_iso_times(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let mut extra = Vec::new();
            for (k, v) in map.iter_mut() {
                if FREE_FORM.contains(&k.as_str()) {
                    continue;
                }
                if TIME_FIELDS.contains(&k.as_str()) {
                    match v {
                        Value::Number(n) => {
                            if let Some(ns) = n.as_i64() {
                                extra.push((format!("{k}_iso"), Value::String(iso_time(ns))));
                            }
                        }
                        Value::Null => extra.push((format!("{k}_iso"), Value::Null)),
                        _ => {}
                    }
                } else {
                    add_iso_times(v);
                }
            }
            map.extend(extra);
        }
        Value::Array(items) => items.iter_mut().for_each(add_iso_times),
        _ => {}
    }
}

/// The schema side of [`add_iso_times`]: each integer time property gets its string twin,
/// required when the time is.
fn iso_time_properties(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = map.get_mut("properties") {
                let mut added = Vec::new();
                for (k, p) in props.iter() {
                    let is_int = |t: &Value| t == "integer";
                    let (int, nullable) = match p.get("type") {
                        Some(Value::Array(ts)) => {
                            (ts.iter().any(is_int), ts.iter().any(|t| t == "null"))
                        }
                        Some(t) => (is_int(t), false),
                        None => (false, false),
                    };
                    if TIME_FIELDS.contains(&k.as_str()) && int {
                        let ty = if nullable {
                            json!(["string", "null"])
                        } else {
                            json!("string")
                        };
                        let doc = format!("`{k}` as an RFC 3339 UTC time.");
                        added.push((
                            k.clone(),
                            json!({"type": ty, "format": "date-time", "description": doc}),
                        ));
                    }
                }
                for (k, p) in &added {
                    props.insert(format!("{k}_iso"), p.clone());
                }
                if let Some(Value::Array(req)) = map.get_mut("required") {
                    for (k, _) in &added {
                        if req.iter().any(|r| r == k.as_str()) {
                            req.push(Value::String(format!("{k}_iso")));
                        }
                    }
                }
            }
            for (k, v) in map.iter_mut() {
                if !FREE_FORM.contains(&k.as_str()) {
                    iso_time_properties(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(iso_time_properties),
        _ => {}
    }
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
        ("vault attach", s::<Target>()),
        ("vault list", s::<Vec<VaultListEntry>>()),
        ("vault use", s::<Target>()),
        ("vault info", s::<InfoOutput>()),
        ("vault delete", s::<DeleteReport>()),
        ("vault fork", s::<ForkOutput>()),
        ("vault check", s::<CheckReport>()),
        (
            "vault migrate",
            s::<crate::service::migrate::MigrateReport>(),
        ),
        ("checkpoint save", s::<CheckpointInfo>()),
        ("checkpoint list", s::<Vec<CheckpointInfo>>()),
        ("checkpoint info", s::<CheckpointInfo>()),
        ("checkpoint restore", s::<CheckpointInfo>()),
        ("checkpoint delete", s::<CheckpointInfo>()),
        ("checkpoint retention", s::<RetentionOutput>()),
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
        ("import", s::<ImportOutput>()),
        ("handback", s::<HandbackReport>()),
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
        ("approvals list", s::<Vec<Grant>>()),
        ("approvals grant", s::<Grant>()),
        ("approvals revoke", s::<Grant>()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times_sit_beside_time_fields_but_not_inside_free_form_maps() {
        let mut v = json!({
            "at": 1_500_000_000_123_456_789i64,
            "mtime": -1_000_000_000i64,
            "since": null,
            "ignored": {"at": 3},
            "meta": {"mtime": "x"},
            "ops": [{"at": 0}],
        });
        add_iso_times(&mut v);
        assert_eq!(v["at_iso"], "2017-07-14T02:40:00.123456789Z");
        assert_eq!(v["mtime_iso"], "1969-12-31T23:59:59.000000000Z");
        assert_eq!(v["since_iso"], Value::Null);
        assert_eq!(v["ignored"], json!({"at": 3}), "a directory named `at`");
        assert_eq!(v["meta"], json!({"mtime": "x"}));
        assert_eq!(v["ops"][0]["at_iso"], "1970-01-01T00:00:00.000000000Z");
        assert_eq!(iso_time(i64::MIN), "1677-09-21T00:12:43.145224192Z");
        assert_eq!(iso_time(i64::MAX), "2262-04-11T23:47:16.854775807Z");
        assert_eq!(
            iso_time(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
    }
}
