//! Property test at the library level: random sequences of write / mkdir / remove / rename /
//! copy / checkpoint / restore on a real vault workspace and on a simple in-memory model
//! must agree after every step: same tree, same contents, same totals, and the same
//! success or error kind for every operation.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use agentvfs::model::node::NodeKind;
use agentvfs::model::path::VPath;
use agentvfs::model::{Actor, Vault, Workspace, WriteOptions};
use proptest::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    File(Vec<u8>),
    Dir,
}

/// The reference: every path (no leading slash) of the live tree.
type Model = BTreeMap<String, Entry>;

/// A path operand: an existing path of the current tree (by index, so operations mostly
/// hit something) or any path from a small universe (so collisions and misses happen too).
#[derive(Clone, Debug)]
enum Pick {
    Existing(usize),
    Any(String),
}

#[derive(Clone, Debug)]
enum Op<P = Pick> {
    Write(P, Vec<u8>, bool),
    Mkdir(P, bool),
    Remove(P, bool),
    Rename(P, P),
    Copy(P, P, bool),
    Save(String),
    Restore(String),
}

fn path_strategy() -> impl Strategy<Value = String> {
    let comps = |n| prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), n);
    prop_oneof![2 => comps(1..=1), 1 => comps(2..=2), 1 => comps(3..=3)].prop_map(|c| c.join("/"))
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        3 => any::<usize>().prop_map(Pick::Existing),
        1 => path_strategy().prop_map(Pick::Any),
    ]
}

fn content_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => Just(Vec::new()),
        6 => prop::collection::vec(any::<u8>(), 1..40),
        // Large enough to be chunked, with a repeated byte so equal contents recur.
        1 => (any::<u8>(), 300_000usize..300_010).prop_map(|(b, n)| vec![b; n]),
    ]
}

fn cp_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["cp0", "cp1", "cp2"]).prop_map(str::to_string)
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (pick(), content_strategy(), any::<bool>()).prop_map(|(p, c, par)| Op::Write(p, c, par)),
        3 => (pick(), any::<bool>()).prop_map(|(p, par)| Op::Mkdir(p, par)),
        2 => (pick(), any::<bool>()).prop_map(|(p, r)| Op::Remove(p, r)),
        3 => (pick(), pick()).prop_map(|(a, b)| Op::Rename(a, b)),
        3 => (pick(), pick(), any::<bool>()).prop_map(|(a, b, r)| Op::Copy(a, b, r)),
        1 => cp_name().prop_map(Op::Save),
        1 => cp_name().prop_map(Op::Restore),
    ]
}

/// Turn picks into concrete paths against the current tree.
fn resolve(op: &Op, m: &Model) -> Op<String> {
    let keys: Vec<&String> = m.keys().collect();
    let r = |p: &Pick| match p {
        Pick::Existing(i) if !keys.is_empty() => keys[i % keys.len()].clone(),
        Pick::Existing(i) => ["a", "b", "c"][i % 3].to_string(),
        Pick::Any(s) => s.clone(),
    };
    match op {
        Op::Write(p, c, par) => Op::Write(r(p), c.clone(), *par),
        Op::Mkdir(p, par) => Op::Mkdir(r(p), *par),
        Op::Remove(p, rec) => Op::Remove(r(p), *rec),
        Op::Rename(a, b) => Op::Rename(r(a), r(b)),
        Op::Copy(a, b, rec) => Op::Copy(r(a), r(b), *rec),
        Op::Save(n) => Op::Save(n.clone()),
        Op::Restore(n) => Op::Restore(n.clone()),
    }
}

/// Short form for failure messages (contents abbreviated).
fn show(op: &Op<String>) -> String {
    match op {
        Op::Write(p, c, par) => format!(
            "write{} {p} ({} bytes)",
            if *par { " -p" } else { "" },
            c.len()
        ),
        other => format!("{other:?}"),
    }
}

// ---- reference semantics (mirroring rename(2)-style rules and the documented errors) ----

type R<T> = Result<T, &'static str>;

fn parent(p: &str) -> Option<&str> {
    p.rfind('/').map(|i| &p[..i])
}

fn name(p: &str) -> &str {
    p.rsplit('/').next().unwrap()
}

fn join(dir: &str, n: &str) -> String {
    if dir.is_empty() {
        n.to_string()
    } else {
        format!("{dir}/{n}")
    }
}

fn is_below(p: &str, base: &str) -> bool {
    p == base || p.starts_with(&format!("{base}/"))
}

/// Resolve without following the last component: a non-directory on the way is an error.
fn lookup<'m>(m: &'m Model, p: &str) -> R<Option<&'m Entry>> {
    let comps: Vec<&str> = p.split('/').collect();
    for i in 1..comps.len() {
        match m.get(&comps[..i].join("/")) {
            Some(Entry::Dir) => {}
            Some(Entry::File(_)) => return Err("not_a_directory"),
            None => return Ok(None),
        }
    }
    Ok(m.get(p))
}

/// The directory (and every ancestor) must exist and be a directory.
fn ensure_dir(m: &Model, dir: &str) -> R<()> {
    if dir.is_empty() {
        return Ok(());
    }
    let comps: Vec<&str> = dir.split('/').collect();
    for i in 1..=comps.len() {
        match m.get(&comps[..i].join("/")) {
            Some(Entry::Dir) => {}
            Some(Entry::File(_)) => return Err("not_a_directory"),
            None => return Err("path_not_found"),
        }
    }
    Ok(())
}

fn has_children(m: &Model, p: &str) -> bool {
    m.keys().any(|k| k.starts_with(&format!("{p}/")))
}

fn subtree(m: &Model, p: &str) -> Vec<(String, Entry)> {
    m.iter()
        .filter(|(k, _)| is_below(k, p))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn remove_subtree(m: &mut Model, p: &str) {
    m.retain(|k, _| !is_below(k, p));
}

fn graft(m: &mut Model, items: Vec<(String, Entry)>, from: &str, to: &str) {
    for (k, v) in items {
        let rest = &k[from.len()..];
        m.insert(format!("{to}{rest}"), v);
    }
}

/// `mkdir -p`: create missing directories; anything else in the way is an error.
fn mkdirs(m: &mut Model, dir: &str) -> R<()> {
    if dir.is_empty() {
        return Ok(());
    }
    let comps: Vec<&str> = dir.split('/').collect();
    for i in 1..=comps.len() {
        let p = comps[..i].join("/");
        match m.get(&p) {
            Some(Entry::Dir) => {}
            Some(Entry::File(_)) => return Err("not_a_directory"),
            None => {
                m.insert(p, Entry::Dir);
            }
        }
    }
    Ok(())
}

fn model_write(m: &mut Model, p: &str, data: &[u8], parents: bool) -> R<()> {
    if parents {
        mkdirs(m, parent(p).unwrap_or(""))?;
    }
    if let Some(Entry::Dir) = lookup(m, p)? {
        return Err("is_a_directory");
    }
    ensure_dir(m, parent(p).unwrap_or(""))?;
    m.insert(p.to_string(), Entry::File(data.to_vec()));
    Ok(())
}

fn model_mkdir(m: &mut Model, p: &str, parents: bool) -> R<()> {
    if parents {
        return mkdirs(m, p);
    }
    if lookup(m, p)?.is_some() {
        return Err("already_exists");
    }
    ensure_dir(m, parent(p).unwrap_or(""))?;
    m.insert(p.to_string(), Entry::Dir);
    Ok(())
}

fn model_remove(m: &mut Model, p: &str, recursive: bool) -> R<()> {
    let e = lookup(m, p)?.ok_or("path_not_found")?;
    if *e == Entry::Dir && !recursive && has_children(m, p) {
        return Err("directory_not_empty");
    }
    remove_subtree(m, p);
    Ok(())
}

fn model_rename(m: &mut Model, src: &str, dst: &str) -> R<()> {
    let node = lookup(m, src)?.ok_or("path_not_found")?.clone();
    if src == dst {
        return Ok(());
    }
    if is_below(dst, src) {
        return Err("invalid_path");
    }
    ensure_dir(m, parent(dst).unwrap_or(""))?;
    if let Some(d) = lookup(m, dst)? {
        match (d, &node) {
            (Entry::Dir, Entry::File(_)) => return Err("is_a_directory"),
            (Entry::Dir, Entry::Dir) if has_children(m, dst) => return Err("directory_not_empty"),
            (Entry::File(_), Entry::Dir) => return Err("not_a_directory"),
            _ => {}
        }
    }
    let items = subtree(m, src);
    remove_subtree(m, src);
    remove_subtree(m, dst);
    graft(m, items, src, dst);
    Ok(())
}

fn model_copy(m: &mut Model, src: &str, dst: &str, recursive: bool) -> R<String> {
    let node = lookup(m, src)?.ok_or("path_not_found")?.clone();
    if node == Entry::Dir && !recursive {
        return Err("is_a_directory");
    }
    let target = match lookup(m, dst)? {
        Some(Entry::Dir) => join(dst, name(src)),
        _ => dst.to_string(),
    };
    if is_below(&target, src) {
        return Err("invalid_path");
    }
    if let Some(existing) = lookup(m, &target)?
        && (*existing == Entry::Dir || node == Entry::Dir)
    {
        return Err("already_exists");
    }
    ensure_dir(m, parent(&target).unwrap_or(""))?;
    let items = subtree(m, src);
    remove_subtree(m, &target);
    graft(m, items, src, &target);
    Ok(target)
}

// ---- the real workspace ----

fn vp(p: &str) -> VPath {
    VPath::parse(p).unwrap()
}

fn kind<T>(r: agentvfs::Result<T>) -> R<T> {
    r.map_err(|e| e.kind())
}

fn apply(ws: &Workspace, op: &Op<String>) -> R<()> {
    match op {
        Op::Write(p, data, parents) => kind(ws.edit("write", &[], |e| {
            let opts = WriteOptions {
                mode: None,
                parents: *parents,
                ..Default::default()
            };
            e.write_file(&vp(p), data, opts)
        })),
        Op::Mkdir(p, parents) => kind(ws.edit("mkdir", &[], |e| e.mkdir(&vp(p), *parents, 0o755))),
        Op::Remove(p, r) => kind(ws.edit("rm", &[], |e| e.remove(&vp(p), *r))),
        Op::Rename(a, b) => kind(ws.edit("mv", &[], |e| e.rename(&vp(a), &vp(b)))),
        Op::Copy(a, b, r) => kind(ws.edit("cp", &[], |e| e.copy(&vp(a), &vp(b), *r))).map(|_| ()),
        Op::Save(n) => kind(ws.checkpoint_save(Some(n), None)).map(|_| ()),
        Op::Restore(n) => kind(ws.checkpoint_restore(n)).map(|_| ()),
    }
}

/// Apply to the model; like a transaction, a failed operation leaves it unchanged.
fn apply_model(m: &mut Model, cps: &mut BTreeMap<String, Model>, op: &Op<String>) -> R<()> {
    let mut next = m.clone();
    let r = match op {
        Op::Write(p, data, parents) => model_write(&mut next, p, data, *parents),
        Op::Mkdir(p, parents) => model_mkdir(&mut next, p, *parents),
        Op::Remove(p, r) => model_remove(&mut next, p, *r),
        Op::Rename(a, b) => model_rename(&mut next, a, b),
        Op::Copy(a, b, r) => model_copy(&mut next, a, b, *r).map(|_| ()),
        Op::Save(n) => {
            if cps.contains_key(n) {
                Err("already_exists")
            } else {
                cps.insert(n.clone(), next.clone());
                Ok(())
            }
        }
        Op::Restore(n) => cps
            .get(n)
            .map(|snapshot| next = snapshot.clone())
            .ok_or("checkpoint_not_found"),
    };
    if r.is_ok() {
        *m = next;
    }
    r
}

/// The live tree as listed by the workspace.
fn listing(ws: &Workspace) -> Model {
    ws.read(|v| {
        let mut out = Model::new();
        v.walk(&VPath::root(), &mut |p, n| {
            if p.is_root() {
                return Ok(());
            }
            let e = match &n.kind {
                NodeKind::Dir { .. } => Entry::Dir,
                NodeKind::File { .. } => Entry::File(v.read_node(n)?),
                other => panic!("unexpected node {other:?} at {p}"),
            };
            out.insert(p.as_str().to_string(), e);
            Ok(())
        })?;
        // Listing each directory gives the same children as the walk.
        for (p, e) in out.clone() {
            if e == Entry::Dir {
                let listed: Vec<String> = v.list(&vp(&p))?.into_iter().map(|c| c.name).collect();
                let expected: Vec<String> = out
                    .keys()
                    .filter(|k| parent(k) == Some(p.as_str()))
                    .map(|k| name(k).to_string())
                    .collect();
                assert_eq!(listed, expected, "list({p})");
            }
        }
        Ok(out)
    })
    .unwrap()
}

fn totals(m: &Model) -> (u64, u64) {
    m.values().fold((0, 0), |(f, b), e| match e {
        Entry::File(d) => (f + 1, b + d.len() as u64),
        Entry::Dir => (f, b),
    })
}

fn brief(m: &Model) -> BTreeMap<String, String> {
    m.iter()
        .map(|(k, v)| {
            let s = match v {
                Entry::Dir => "dir".to_string(),
                Entry::File(d) => format!("file({} bytes, first {:?})", d.len(), d.first()),
            };
            (k.clone(), s)
        })
        .collect()
}

proptest! {
    // No regression file: failing cases hold 300 KB contents; the failure report shows the case.
    #![proptest_config(ProptestConfig {
        cases: 32,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn workspace_matches_reference_model(ops in prop::collection::vec(op_strategy(), 5..=30)) {
        matches_reference_model(&ops, false)?;
    }

    /// The same under group commit, as a mount runs: writes share a transaction, and
    /// an edit takes the workspace row and quota its predecessor left when no other write
    /// came between.
    #[test]
    fn workspace_matches_reference_model_in_group_commit(
        ops in prop::collection::vec(op_strategy(), 5..=30)
    ) {
        matches_reference_model(&ops, true)?;
    }
}

/// A new vault in `dir`, with group commit on or off, and its main workspace.
fn main_of_new_vault(dir: &std::path::Path, batching: bool) -> (Arc<Vault>, Workspace) {
    let vault = Vault::create_in(&dir.join("test.avfs"), common::test_engine()).unwrap();
    vault.set_batching(batching).unwrap();
    let actor = Actor {
        actor: "test".into(),
        source: "test".into(),
    };
    let ws = vault.workspace("main", actor).unwrap();
    (vault, ws)
}

fn matches_reference_model(ops: &[Op], batching: bool) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let (vault, ws) = main_of_new_vault(dir.path(), batching);
    let mut model = Model::new();
    let mut checkpoints: BTreeMap<String, Model> = BTreeMap::new();
    let mut done: Vec<String> = Vec::new();
    for op in ops {
        let op = resolve(op, &model);
        done.push(show(&op));
        let expected = apply_model(&mut model, &mut checkpoints, &op);
        let got = apply(&ws, &op);
        prop_assert_eq!(got, expected, "result of the last of {:#?}", done);
        let live = listing(&ws);
        prop_assert_eq!(brief(&live), brief(&model), "tree after {:#?}", done);
        prop_assert!(live == model, "contents differ after {:#?}", done);
        let info = vault.info("main").unwrap();
        prop_assert_eq!(
            (info.workspace.files, info.workspace.bytes),
            totals(&model),
            "totals after {:#?}",
            done
        );
    }
    // Every checkpoint still reads back as it was saved.
    for (name, snapshot) in &checkpoints {
        let files = ws
            .read_at(Some(name), |v| {
                let mut out = Model::new();
                v.walk(&VPath::root(), &mut |p, n| {
                    if !p.is_root() {
                        let e = match &n.kind {
                            NodeKind::Dir { .. } => Entry::Dir,
                            _ => Entry::File(v.read_node(n)?),
                        };
                        out.insert(p.as_str().to_string(), e);
                    }
                    Ok(())
                })?;
                Ok(out)
            })
            .unwrap();
        prop_assert!(&files == snapshot, "checkpoint {} changed", name);
    }
    let check = vault.check().unwrap();
    prop_assert!(check.ok, "vault check: {:?}", check.problems);
    Ok(())
}

/// Under group commit, a quota set between two edits of one batch (a write of its own,
/// not an edit) holds for the second edit: the edit must not reuse the quota the first
/// one loaded.
#[test]
fn a_quota_set_inside_a_batch_holds_for_the_next_edit() {
    let dir = tempfile::tempdir().unwrap();
    let (vault, ws) = main_of_new_vault(dir.path(), true);
    let write = |name: &str| {
        ws.edit("write", &[], |e| {
            e.write_file(&vp(name), b"x", WriteOptions::default())
        })
    };
    write("a").unwrap();
    write("b").unwrap();
    vault
        .set_quota(&agentvfs::model::Quota {
            max_files: Some(2),
            ..Default::default()
        })
        .unwrap();
    let refused = write("c");
    assert!(
        refused.is_err(),
        "a third file past max_files=2 was written"
    );
    assert_eq!(vault.info("main").unwrap().workspace.files, 2);
}
