//! Standing approvals through the real binary: a grant lets matching single commands the
//! policy would ask about run in its fork until it lapses or is revoked; it never covers a
//! denied command, another fork or a compound command; grants, revocations and the runs
//! they allow are in the audit log; bad input is a typed error that grants nothing.

mod common;

use common::history::Env;
use common::skip::require_sandbox;
use serde_json::{Value, json};

fn exec(env: &Env, ws: &str, args: &[&str]) -> (Value, i32) {
    let mut full = vec!["proxy", "exec"];
    full.extend_from_slice(args);
    let (doc, code) = env.json(Some(ws), &full);
    (doc["data"].clone(), code)
}

#[test]
fn a_grant_answers_ask_for_matching_single_commands_in_its_fork_only() {
    if !require_sandbox() {
        return;
    }
    let env = Env::new();
    env.create("a");
    env.fork("a", "t");
    // `curl` to a closed local port: networked, so the policy asks; run, it fails fast.
    let curl = ["--", "curl", "-s", "http://127.0.0.1:9/"];
    let (v, code) = exec(&env, "t", &curl);
    assert_eq!(
        (code, v["outcome"].as_str()),
        (125, Some("approval_required")),
        "{v}"
    );

    let g = env.data(
        "t",
        &[
            "approvals",
            "grant",
            "curl -s http://127.0.0.1:*",
            "--for",
            "10m",
        ],
    );
    assert_eq!(g["workspace"], "t");
    assert_eq!(g["pattern"], "curl -s http://127.0.0.1:*");
    let ttl = g["expires_at"].as_i64().unwrap() - g["created_at"].as_i64().unwrap();
    assert_eq!(ttl, 600_000_000_000);
    assert!(g["expires_at_iso"].is_string());

    let (v, code) = exec(&env, "t", &curl);
    assert_eq!(v["ran"], true, "{v}");
    assert_ne!(code, 125, "{v}");
    let reason = v["decision"]["reason"].as_str().unwrap();
    assert!(reason.contains("standing approval 1"), "{reason}");
    // Not in another fork, not for another command, not compound, never a denial.
    assert_eq!(exec(&env, "a", &curl).1, 125);
    assert_eq!(
        exec(&env, "t", &["--", "wget", "http://127.0.0.1:9/"]).1,
        125
    );
    let (v, code) = exec(
        &env,
        "t",
        &["--shell", "curl -s http://127.0.0.1:9/ && true"],
    );
    assert_eq!(code, 125, "{v}");
    let (v, code) = exec(&env, "t", &["--shell", "curl -s http://127.0.0.1:9/ | sh"]);
    assert_eq!(code, 126, "{v}");

    let list = env.data("t", &["approvals", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    // The audit log has the grant and the run it allowed.
    let audit = env.data("t", &["audit", "--limit", "100"]);
    let ops: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["operation"].as_str().unwrap())
        .collect();
    assert!(ops.contains(&"approval.grant"), "{ops:?}");
    let allowed = audit.as_array().unwrap().iter().any(|r| {
        r["detail"]
            .as_str()
            .is_some_and(|d| d.contains("standing approval 1"))
    });
    assert!(allowed, "{audit:#}");

    env.data("t", &["approvals", "revoke", "1"]);
    assert_eq!(exec(&env, "t", &curl).1, 125);
    assert_eq!(env.data("t", &["approvals", "list"]), json!([]));
}

#[test]
fn bad_grants_are_typed_errors_and_grant_nothing() {
    let env = Env::new();
    env.create("a");
    for (args, code, kind) in [
        (
            vec!["approvals", "grant", "pip install *", "--for", "0s"],
            5,
            "invalid_argument",
        ),
        (
            vec!["approvals", "grant", "pip install *", "--for", "1000y"],
            5,
            "invalid_argument",
        ),
        (
            vec!["approvals", "grant", "pip install *", "--for", "-1h"],
            2,
            "usage",
        ),
        (
            vec!["approvals", "grant", "pip install *", "--for", "soon"],
            5,
            "invalid_argument",
        ),
        (
            vec!["approvals", "grant", "pip install x; *", "--for", "1h"],
            5,
            "invalid_argument",
        ),
        (
            vec!["approvals", "grant", "", "--for", "1h"],
            5,
            "invalid_argument",
        ),
        (
            vec!["approvals", "grant", "a[", "--for", "1h"],
            5,
            "invalid_argument",
        ),
        (vec!["approvals", "revoke", "7"], 5, "invalid_argument"),
        (vec!["approvals", "revoke", "-1"], 2, "usage"),
    ] {
        env.fail(Some("a"), &args, code, kind);
    }
    assert_eq!(env.data("a", &["approvals", "list"]), json!([]));
    let audit = env.data("a", &["audit"]);
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["operation"] != "approval.grant"),
        "{audit:#}"
    );
}

#[test]
fn grants_made_at_once_get_ids_of_their_own() {
    let env = Env::new();
    env.create("a");
    let ids: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let env = &env;
                s.spawn(move || {
                    let pattern = format!("cmd{i} *");
                    env.data("a", &["approvals", "grant", &pattern, "--for", "1h"])["id"]
                        .as_u64()
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), 8, "{ids:?}");
    assert_eq!(
        env.data("a", &["approvals", "list"])
            .as_array()
            .unwrap()
            .len(),
        8
    );
}

/// A grant goes with its fork: deleting the fork deletes the grant, so a fork made later
/// under the same name does not inherit it. Other forks' grants stay.
#[test]
fn grants_die_with_their_fork() {
    let env = Env::new();
    env.create("a");
    env.fork("a", "t");
    env.fork("a", "u");
    env.data("t", &["approvals", "grant", "pip install *", "--for", "1h"]);
    env.data("u", &["approvals", "grant", "npm ci", "--for", "1h"]);
    assert_eq!(
        env.data("a", &["approvals", "list"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    env.ok("a", &["vault", "delete", "t", "--yes"]);
    env.fork("a", "t");
    let list = env.data("t", &["approvals", "list"]);
    let left: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["workspace"].as_str().unwrap())
        .collect();
    assert_eq!(left, ["u"], "{list}");
    // A revoked id is gone for good; the other fork's grant can be revoked from anywhere.
    env.fail(
        Some("t"),
        &["approvals", "revoke", "1"],
        5,
        "invalid_argument",
    );
    env.data("t", &["approvals", "revoke", "2"]);
    assert_eq!(env.data("a", &["approvals", "list"]), json!([]));
}
