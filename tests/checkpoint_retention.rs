//! Retention of the automatic checkpoints `proxy exec` takes, through the real binary: the
//! newest N stay, named ones and one a fork was made at always stay, names are never
//! reused, a pruned one says plainly that it is gone and which operation still has its
//! state, undo and rollback keep working across the window, and a format-3 vault's
//! proxy checkpoints are recognised as automatic when it is migrated.

mod common;

use common::history::Env;
use common::skip::require_sandbox;
use serde_json::{Value, json};

fn names(list: &Value, auto: bool) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .filter(|c| c["auto"] == json!(auto))
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

fn exec(env: &Env, ws: &str, script: &str) -> Value {
    let v = env.data(ws, &["proxy", "exec", "--shell", script]);
    assert_eq!(v["exit_code"], 0, "{v}");
    v
}

#[test]
fn the_newest_automatic_checkpoints_stay_and_a_pruned_one_says_where_its_state_is() {
    if !require_sandbox() {
        return;
    }
    let env = Env::new();
    env.create("r");
    env.data("r", &["checkpoint", "save", "mine", "-m", "by hand"]);
    let r = env.data("r", &["checkpoint", "retention"]);
    assert_eq!(r, json!({"keep_auto": 20, "default_keep_auto": 20}));
    env.data("r", &["checkpoint", "retention", "--keep-auto", "3"]);
    // Bad numbers are typed errors and change nothing.
    env.fail(
        Some("r"),
        &["checkpoint", "retention", "--keep-auto", "0"],
        5,
        "invalid_argument",
    );
    env.fail(
        Some("r"),
        &["checkpoint", "retention", "--keep-auto", "-1"],
        2,
        "usage",
    );
    env.fail(
        Some("r"),
        &[
            "checkpoint",
            "retention",
            "--keep-auto",
            "18446744073709551616",
        ],
        2,
        "usage",
    );
    assert_eq!(env.data("r", &["checkpoint", "retention"])["keep_auto"], 3);

    let mut envelopes = Vec::new();
    for i in 1..=5 {
        envelopes.push(exec(&env, "r", &format!("echo {i} > f{i}")));
    }
    let cps: Vec<&str> = envelopes
        .iter()
        .map(|e| e["checkpoint"].as_str().unwrap())
        .collect();
    assert_eq!(cps, ["cp-1", "cp-2", "cp-3", "cp-4", "cp-5"]);
    let list = env.data("r", &["checkpoint", "list"]);
    assert_eq!(names(&list, false), ["mine"]);
    assert_eq!(names(&list, true), ["cp-3", "cp-4", "cp-5"]);
    let human = env.ok("r", &["checkpoint", "list"]);
    assert!(
        human.contains("automatic, taken before proxied commands (3 of at most 3 kept"),
        "{human}"
    );

    // A pruned checkpoint is gone, plainly, with the operation that still has its state.
    let gone = env.fail(
        Some("r"),
        &["checkpoint", "restore", "cp-2"],
        3,
        "checkpoint_gone",
    );
    assert_eq!(gone["details"]["keep"], 3);
    let op = gone["details"]["operation"].as_i64().unwrap();
    env.fail(Some("r"), &["diff", "cp-1"], 3, "checkpoint_gone");
    env.fail(
        Some("r"),
        &["cat", "f1", "--at", "cp-1"],
        3,
        "checkpoint_gone",
    );
    env.fail(Some("r"), &["ls", "--at", "cp-2"], 3, "checkpoint_gone");
    // A name that never existed is still just not found.
    env.fail(
        Some("r"),
        &["checkpoint", "restore", "cp-99"],
        3,
        "checkpoint_not_found",
    );

    // Undo and rollback do not need the checkpoints: roll back the first command, whose
    // checkpoint is pruned, then undo that.
    let first = envelopes[0]["exec_id"].to_string();
    env.data("r", &["rollback", &first]);
    env.fail(Some("r"), &["cat", "f1"], 3, "path_not_found");
    assert_eq!(env.ok("r", &["cat", "f5"]), "5\n");
    env.data("r", &["undo"]);
    assert_eq!(env.ok("r", &["cat", "f1"]), "1\n");
    // The operation named in the error reaches cp-2's state (f1 only).
    env.data("r", &["op", "restore", &op.to_string()]);
    let files: Vec<String> = env
        .data("r", &["ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(files, ["f1"]);

    // Names are never reused: the next ones continue after cp-5, by hand or not.
    assert_eq!(env.data("r", &["checkpoint", "save"])["name"], "cp-6");
    assert_eq!(exec(&env, "r", "echo 7 > f7")["checkpoint"], "cp-7");
    // A hand-saved cp-N is not automatic: only proxy checkpoints are pruned.
    let list = env.data("r", &["checkpoint", "list"]);
    assert_eq!(names(&list, false), ["mine", "cp-6"]);
    assert_eq!(names(&list, true), ["cp-4", "cp-5", "cp-7"]);
}

#[test]
fn a_checkpoint_a_fork_was_made_at_is_kept() {
    if !require_sandbox() {
        return;
    }
    let env = Env::new();
    env.create("r");
    env.data("r", &["checkpoint", "retention", "--keep-auto", "1"]);
    exec(&env, "r", "echo 1 > a");
    env.ok("r", &["vault", "fork", "r", "from-cp1", "--at", "cp-1"]);
    exec(&env, "r", "echo 2 > b");
    exec(&env, "r", "echo 3 > c");
    let list = env.data("r", &["checkpoint", "list"]);
    assert_eq!(names(&list, true), ["cp-1", "cp-3"], "{list}");
}

#[test]
fn a_format_3_vault_is_migrated_and_its_proxy_checkpoints_become_automatic() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    if !require_sandbox() {
        return;
    }
    let env = Env::new();
    env.create("old");
    env.data(
        "old",
        &["checkpoint", "save", "mine", "-m", "before: by hand, named"],
    );
    // A hand-saved look-alike of a proxy checkpoint: no proxy run names it, so it stays.
    env.data("old", &["checkpoint", "save", "-m", "before: echo 1"]);
    let ran = exec(&env, "old", "echo 1 > a");
    assert_eq!(ran["checkpoint"], "cp-2", "{ran}");
    env.data("old", &["checkpoint", "save", "-m", "a plain unnamed save"]);
    let path = env.data("old", &["vault", "info"])["path"]
        .as_str()
        .unwrap()
        .to_string();
    // Back to format 3: the column did not exist.
    common::history::downgrade_to_format_3(&path, "");
    let list = env.data("old", &["checkpoint", "list"]);
    assert_eq!(names(&list, true), ["cp-2"], "{list}");
    assert_eq!(names(&list, false), ["mine", "cp-1", "cp-3"], "{list}");
    assert_eq!(
        env.data("old", &["vault", "info"])["format_version"],
        agentvfs::store::FORMAT_VERSION
    );
}
