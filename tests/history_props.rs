//! Property tests of the history model through the library API:
//! (a) `undo` after any single change restores the observable tree exactly;
//! (b) the changes `Vault::diff(a, b)` reports, applied to `a`, give `b` (and no change is
//!     reported for a path that is the same on both sides);
//! (c) merging a fork whose changes are disjoint from the parent's gives the union of both
//!     sides' changes; changes to the same path by both sides make `MergeStrategy::Fail`
//!     an error that leaves the parent untouched, and `Ours` / `Theirs` pick a side.
//!
//! Small cases (24 per property, at most 12 operations each) so the suite runs in seconds.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use agentvfs::Error;
use agentvfs::model::diff::{ChangeStatus, StateRef};
use agentvfs::model::merge::{MergeOptions, MergeStrategy};
use agentvfs::model::node::{Node, NodeKind};
use agentvfs::model::path::VPath;
use agentvfs::model::{Actor, Edit, Vault, Workspace, WriteOptions};
use proptest::prelude::*;
use proptest::test_runner::Config;
use tempfile::TempDir;

// ---------------------------------------------------------------------------------------
// Fixtures and the observable tree

struct Fixture {
    vault: Arc<Vault>,
    main: Workspace,
    _dir: TempDir,
}

fn actor() -> Actor {
    Actor {
        actor: "props".into(),
        source: "sdk".into(),
    }
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let vault = Vault::create_in(&dir.path().join("props.avfs"), common::test_engine()).unwrap();
    let main = vault.workspace("main", actor()).unwrap();
    Fixture {
        vault,
        main,
        _dir: dir,
    }
}

/// What a user can observe of a node: its type, permission bits and content.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Obs {
    Dir(u32),
    File(u32, Vec<u8>),
    Symlink(String),
    Special(char, u64, u32),
}

type Tree = BTreeMap<String, Obs>;

fn observe(v: &agentvfs::model::View<'_>) -> Tree {
    let mut nodes: Vec<(VPath, Node)> = Vec::new();
    v.walk(&VPath::root(), &mut |p, n| {
        if !p.is_root() {
            nodes.push((p.clone(), n.clone()));
        }
        Ok(())
    })
    .unwrap();
    nodes
        .into_iter()
        .map(|(p, n)| {
            let obs = match &n.kind {
                NodeKind::Dir { .. } => Obs::Dir(n.attrs.mode),
                NodeKind::File { .. } => Obs::File(n.attrs.mode, v.read_node(&n).unwrap()),
                NodeKind::Symlink { target } => Obs::Symlink(target.clone()),
                kind if kind.is_special() => {
                    Obs::Special(kind.type_letter(), n.rdev(), n.attrs.mode)
                }
                _ => panic!("a view handed out a stored hard-link node at {p}"),
            };
            (p.display(), obs)
        })
        .collect()
}

fn live(ws: &Workspace) -> Tree {
    ws.read(|v| Ok(observe(v))).unwrap()
}

fn at_checkpoint(ws: &Workspace, cp: &str) -> Tree {
    ws.read_at(Some(cp), |v| Ok(observe(v))).unwrap()
}

fn vp(s: &str) -> VPath {
    VPath::parse(s).unwrap()
}

// ---------------------------------------------------------------------------------------
// Operations

/// Candidate paths: files and directories at a few depths, so operations collide.
const PATHS: &[&str] = &["a", "b", "d", "d/a", "d/b", "d/e", "d/e/a", "f", "f/a"];

/// Contents: repeated values make renames detectable; one is binary, one empty.
const CONTENTS: &[&[u8]] = &[
    b"",
    b"x",
    b"hello\n",
    b"one\ntwo\nthree\n",
    b"\0\x01\x02binary\n\xff",
    b"other text\n",
];

#[derive(Debug, Clone)]
enum Op {
    Write(usize, usize),
    Remove(usize),
    Mkdir(usize, u32),
    Rename(usize, usize),
    Chmod(usize, u32),
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..PATHS.len();
    let mode = prop_oneof![Just(0o644u32), Just(0o755), Just(0o600), Just(0o700)];
    prop_oneof![
        4 => (p.clone(), 0..CONTENTS.len()).prop_map(|(p, c)| Op::Write(p, c)),
        2 => p.clone().prop_map(Op::Remove),
        1 => (p.clone(), mode.clone()).prop_map(|(p, m)| Op::Mkdir(p, m)),
        2 => (p.clone(), p.clone())
            .prop_filter("a rename moves something", |(a, b)| a != b)
            .prop_map(|(a, b)| Op::Rename(a, b)),
        1 => (p, mode).prop_map(|(p, m)| Op::Chmod(p, m)),
    ]
}

fn apply_op(e: &mut Edit<'_>, op: &Op) -> agentvfs::Result<()> {
    match *op {
        Op::Write(p, c) => e.write_file(
            &vp(PATHS[p]),
            CONTENTS[c],
            WriteOptions {
                mode: None,
                parents: true,
                ..Default::default()
            },
        ),
        Op::Remove(p) => e.remove(&vp(PATHS[p]), true),
        Op::Mkdir(p, m) => e.mkdir(&vp(PATHS[p]), false, m),
        Op::Rename(a, b) => e.rename(&vp(PATHS[a]), &vp(PATHS[b])),
        Op::Chmod(p, m) => e
            .update(&vp(PATHS[p]), |n| {
                n.attrs.mode = m;
                Ok(())
            })
            .map(|_| ()),
    }
}

/// Run `op` as its own logged change; `true` if it succeeded. Failed operations change
/// nothing (the transaction rolls back).
fn run(ws: &Workspace, op: &Op) -> bool {
    ws.edit("op", &[], |e| apply_op(e, op)).is_ok()
}

/// Run `op` as a batch: no op-log entry, and the change stays pending in the overlay.
fn run_batch(ws: &Workspace, op: &Op) -> bool {
    ws.edit_batch("op", &[], |e| apply_op(e, op)).is_ok()
}

/// 24 cases per property; `PROPTEST_CASES=N` runs more when hunting for bugs.
fn config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(24),
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------------------
// (a) undo

proptest! {
    #![proptest_config(config())]

    #[test]
    fn undo_after_any_single_op_restores_the_tree(
        setup in prop::collection::vec(op(), 0..12),
        last in op(),
    ) {
        let f = fixture();
        for o in &setup {
            run(&f.main, o);
        }
        let before = live(&f.main);
        if !run(&f.main, &last) {
            // The op failed: nothing changed and nothing was logged.
            prop_assert_eq!(live(&f.main), before);
            return Ok(());
        }
        let newest = f.main.op_log(1).unwrap().remove(0);
        prop_assert_eq!(newest.kind.as_str(), "op");
        prop_assert_ne!(&newest.root_before, &newest.root_after, "{:?} changed nothing", last);
        let undo = f.main.undo().unwrap();
        prop_assert_eq!(undo.target, Some(newest.id));
        prop_assert_eq!(live(&f.main), before.clone(), "undo of {:?}", last);
        // And redo brings the change back.
        let after_redo = {
            f.main.redo().unwrap();
            live(&f.main)
        };
        f.main.undo().unwrap();
        prop_assert_eq!(live(&f.main), before);
        f.main.redo().unwrap();
        prop_assert_eq!(live(&f.main), after_redo);
    }
}

// ---------------------------------------------------------------------------------------
// (b) diff

/// Apply `changes` (from `a` to `b`) to tree `a`, taking new content from `b`.
fn apply_changes(a: &Tree, b: &Tree, changes: &[agentvfs::model::diff::Change]) -> Tree {
    let mut out = a.clone();
    for c in changes {
        match c.status {
            ChangeStatus::Deleted => {
                out.remove(&c.path);
            }
            ChangeStatus::Renamed => {
                out.remove(c.old_path.as_deref().expect("a rename has an old path"));
            }
            _ => {}
        }
    }
    for c in changes {
        if c.status != ChangeStatus::Deleted {
            let new = b
                .get(&c.path)
                .unwrap_or_else(|| panic!("{c:?} names a path missing from the new state"));
            out.insert(c.path.clone(), new.clone());
        }
    }
    out
}

fn check_diff(
    f: &Fixture,
    from: &StateRef,
    to: &StateRef,
    a: &Tree,
    b: &Tree,
) -> Result<(), TestCaseError> {
    let changes = f.vault.diff(from, to).unwrap();
    prop_assert_eq!(&apply_changes(a, b, &changes), b, "changes: {:#?}", changes);
    for c in &changes {
        prop_assert_ne!(
            a.get(&c.path),
            b.get(&c.path),
            "{:?} reports no difference",
            c
        );
        if let Some(old) = &c.old_path {
            prop_assert_eq!(c.status, ChangeStatus::Renamed);
            // The old path is gone, or holds something else (a type change).
            prop_assert!(a.contains_key(old) && a.get(old) != b.get(old), "{:?}", c);
        }
    }
    let mut sorted = changes.iter().map(|c| c.path.clone()).collect::<Vec<_>>();
    sorted.sort();
    prop_assert_eq!(
        changes.iter().map(|c| c.path.clone()).collect::<Vec<_>>(),
        sorted
    );
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn diff_applied_to_a_gives_b(
        first in prop::collection::vec(op(), 1..12),
        second in prop::collection::vec((op(), any::<bool>()), 1..12),
    ) {
        let f = fixture();
        for o in &first {
            run(&f.main, o);
        }
        f.main.checkpoint_save(Some("a"), None).unwrap();
        // Some changes folded, some left pending in the overlay.
        for (o, batch) in &second {
            if *batch { run_batch(&f.main, o) } else { run(&f.main, o) };
        }
        let a = at_checkpoint(&f.main, "a");
        let b = live(&f.main);
        let cp = StateRef::Checkpoint { workspace: "main".into(), name: "a".into() };
        let now = StateRef::Live("main".into());
        check_diff(&f, &cp, &now, &a, &b)?;
        check_diff(&f, &now, &cp, &b, &a)?;
        // The same between two checkpoints.
        f.main.checkpoint_save(Some("b"), None).unwrap();
        let cb = StateRef::Checkpoint { workspace: "main".into(), name: "b".into() };
        check_diff(&f, &cp, &cb, &a, &b)?;
        prop_assert!(f.vault.diff(&cb, &now).unwrap().is_empty());
    }
}

// ---------------------------------------------------------------------------------------
// (c) merge

/// Files only the parent touches, files only the fork touches; shared directories.
const PARENT_FILES: &[&str] = &["pa", "d/pa", "d/e/pa", "s/pa", "s/pb"];
const FORK_FILES: &[&str] = &["fa", "d/fa", "d/e/fa", "t/fa", "t/fb"];

#[derive(Debug, Clone)]
enum FileOp {
    Write(usize, usize),
    Remove(usize),
    Rename(usize, usize),
    Chmod(usize, u32),
}

fn file_op() -> impl Strategy<Value = FileOp> {
    let p = 0..PARENT_FILES.len();
    prop_oneof![
        4 => (p.clone(), 0..CONTENTS.len()).prop_map(|(p, c)| FileOp::Write(p, c)),
        2 => p.clone().prop_map(FileOp::Remove),
        1 => (p.clone(), p.clone())
            .prop_filter("a rename moves something", |(a, b)| a != b)
            .prop_map(|(a, b)| FileOp::Rename(a, b)),
        1 => (p, prop_oneof![Just(0o644u32), Just(0o755)]).prop_map(|(p, m)| FileOp::Chmod(p, m)),
    ]
}

fn run_file_op(ws: &Workspace, files: &[&str], op: &FileOp, batch: bool) {
    let go = |e: &mut Edit<'_>| match *op {
        FileOp::Write(p, c) => e.write_file(
            &vp(files[p]),
            CONTENTS[c],
            WriteOptions {
                mode: None,
                parents: true,
                ..Default::default()
            },
        ),
        FileOp::Remove(p) => e.remove(&vp(files[p]), false),
        FileOp::Rename(a, b) => e.rename(&vp(files[a]), &vp(files[b])),
        FileOp::Chmod(p, m) => e
            .update(&vp(files[p]), |n| {
                n.attrs.mode = m;
                Ok(())
            })
            .map(|_| ()),
    };
    // Failures (missing source, missing parent directory) change nothing.
    let _ = if batch {
        ws.edit_batch("op", &[], go)
    } else {
        ws.edit("op", &[], go)
    };
}

/// The reference model of a disjoint merge: the parent's tree with the fork's files (and
/// any directory only the fork created) taken from the fork.
fn union(parent: &Tree, fork: &Tree) -> Tree {
    let is_fork_file = |p: &str| FORK_FILES.contains(&p.trim_start_matches('/'));
    let mut out: Tree = parent
        .iter()
        .filter(|(p, _)| !is_fork_file(p))
        .map(|(p, o)| (p.clone(), o.clone()))
        .collect();
    for (p, o) in fork {
        if is_fork_file(p) {
            out.insert(p.clone(), o.clone());
        } else if matches!(o, Obs::Dir(_)) {
            out.entry(p.clone()).or_insert_with(|| o.clone());
        }
    }
    out
}

/// A base tree with some of both sides' files, and fork `task` of it.
fn merge_fixture(base: &[(bool, usize, usize)]) -> Fixture {
    let f = fixture();
    f.main
        .edit("setup", &[], |e| {
            for &(parent_side, i, c) in base {
                let files = if parent_side {
                    PARENT_FILES
                } else {
                    FORK_FILES
                };
                let opts = WriteOptions {
                    mode: None,
                    parents: true,
                    ..Default::default()
                };
                e.write_file(&vp(files[i]), CONTENTS[c], opts)?;
            }
            Ok(())
        })
        .unwrap();
    f.main.checkpoint_save(Some("base"), None).unwrap();
    f.vault.fork(&f.main, "task", None).unwrap();
    f
}

fn base_files() -> impl Strategy<Value = Vec<(bool, usize, usize)>> {
    prop::collection::vec(
        (any::<bool>(), 0..PARENT_FILES.len(), 0..CONTENTS.len()),
        0..8,
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn merging_disjoint_changes_gives_the_union(
        base in base_files(),
        parent_ops in prop::collection::vec((file_op(), any::<bool>()), 0..12),
        fork_ops in prop::collection::vec((file_op(), any::<bool>()), 0..12),
    ) {
        let f = merge_fixture(&base);
        let task = f.vault.workspace("task", actor()).unwrap();
        for (o, batch) in &parent_ops {
            run_file_op(&f.main, PARENT_FILES, o, *batch);
        }
        for (o, batch) in &fork_ops {
            run_file_op(&task, FORK_FILES, o, *batch);
        }
        let (parent, fork) = (live(&f.main), live(&task));
        let expected = union(&parent, &fork);

        // A dry run reports the merge without applying it.
        let dry = f.vault.merge("task", &f.main, MergeOptions { dry_run: true, ..Default::default() }).unwrap();
        prop_assert!(!dry.applied);
        prop_assert_eq!(&live(&f.main), &parent);

        let report = f.vault.merge("task", &f.main, MergeOptions::default()).unwrap();
        prop_assert!(report.applied);
        prop_assert!(report.conflicts.is_empty(), "{:?}", report.conflicts);
        prop_assert!(report.text_merged.is_empty());
        let merged = live(&f.main);
        prop_assert_eq!(&merged, &expected);
        // The report's changes describe parent -> merged.
        prop_assert_eq!(apply_changes(&parent, &merged, &report.changes), merged.clone());
        prop_assert_eq!(dry.changes, report.changes);
        // The fork is untouched.
        prop_assert_eq!(live(&task), fork);
    }

    #[test]
    fn overlapping_changes_fail_and_leave_the_parent_unchanged(
        base in base_files(),
        base_content in "[0-9]{1,8}",
        // (parent's change, fork's change): Some(content) modifies, None deletes.
        sides in prop_oneof![
            ("[a-z]{1,8}", "[A-Z]{1,8}").prop_map(|(p, f)| (Some(p), Some(f))),
            "[a-z]{1,8}".prop_map(|p| (Some(p), None)),
            "[A-Z]{1,8}".prop_map(|f| (None, Some(f))),
        ],
        binary in any::<bool>(),
        parent_ops in prop::collection::vec((file_op(), any::<bool>()), 0..6),
        fork_ops in prop::collection::vec((file_op(), any::<bool>()), 0..6),
        strategy in prop_oneof![Just(MergeStrategy::Ours), Just(MergeStrategy::Theirs)],
    ) {
        let encode = |s: &str| -> Vec<u8> {
            let mut b = s.as_bytes().to_vec();
            if binary {
                b.push(0);
            }
            b.push(b'\n');
            b
        };
        let f = merge_fixture(&base);
        let shared = vp("d/shared.txt");
        let opts = WriteOptions { mode: None, parents: true, ..Default::default() };
        f.main.edit("w", &[], |e| e.write_file(&shared, &encode(&base_content), opts)).unwrap();
        // Re-fork so the shared file is in the merge base.
        f.vault.delete_fork("task").unwrap();
        f.vault.fork(&f.main, "task", None).unwrap();
        let task = f.vault.workspace("task", actor()).unwrap();

        let change = |ws: &Workspace, side: &Option<String>| match side {
            Some(c) => ws.edit("w", &[], |e| e.write_file(&shared, &encode(c), opts)).unwrap(),
            None => ws.edit("rm", &[], |e| e.remove(&shared, false)).unwrap(),
        };
        change(&f.main, &sides.0);
        change(&task, &sides.1);
        for (o, batch) in &parent_ops {
            run_file_op(&f.main, PARENT_FILES, o, *batch);
        }
        for (o, batch) in &fork_ops {
            run_file_op(&task, FORK_FILES, o, *batch);
        }
        let (parent, fork) = (live(&f.main), live(&task));
        let ops_before = f.main.op_log(usize::MAX >> 1).unwrap().len();

        match f.vault.merge("task", &f.main, MergeOptions::default()) {
            Err(Error::MergeConflict { conflicts }) => {
                prop_assert_eq!(conflicts.len(), 1, "{:?}", conflicts);
                prop_assert_eq!(conflicts[0].path.as_str(), "/d/shared.txt");
                let kind = |s: &Option<String>| if s.is_some() { "modified" } else { "deleted" };
                prop_assert_eq!(conflicts[0].ours.as_str(), kind(&sides.0));
                prop_assert_eq!(conflicts[0].theirs.as_str(), kind(&sides.1));
            }
            other => prop_assert!(false, "expected a merge conflict, got {:?}", other.map(|r| r.changes)),
        }
        prop_assert_eq!(&live(&f.main), &parent);
        prop_assert_eq!(f.main.op_log(usize::MAX >> 1).unwrap().len(), ops_before);
        prop_assert_eq!(&live(&task), &fork);

        // A strategy resolves the conflict with one side; everything else still merges.
        let report = f.vault.merge("task", &f.main, MergeOptions { strategy, ..Default::default() }).unwrap();
        prop_assert_eq!(report.conflicts.len(), 1);
        let mut expected = union(&parent, &fork);
        let key = "/d/shared.txt".to_string();
        let winner = if strategy == MergeStrategy::Theirs { &fork } else { &parent };
        match winner.get(&key) {
            Some(o) => expected.insert(key, o.clone()),
            None => expected.remove(&key),
        };
        prop_assert_eq!(live(&f.main), expected);
    }
}
