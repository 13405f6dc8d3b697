//! `vault check`: whether a vault is sound. Every object hashes to its id and its
//! references exist, every pending-changes marker names a root, and every workspace's hard
//! links agree with their inodes.

use std::collections::BTreeMap;

use serde::Serialize;

use super::inode::{inodes_dir, is_reserved};
use super::node::{NodeKind, object_id, references};
use super::path::VPath;
use super::vault::{MAIN, Vault, roots};
use super::view::View;
use super::workspace::marker_problem;
use crate::error::Result;

/// One problem found by `vault check`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Problem {
    pub object: Option<String>,
    pub problem: String,
}

/// `vault check`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CheckReport {
    pub ok: bool,
    pub objects_checked: u64,
    pub problems: Vec<Problem>,
}

impl Vault {
    /// Verify every stored object hashes to its id, every referenced object exists, and
    /// each workspace's hard links are consistent.
    pub fn check(&self) -> Result<CheckReport> {
        let engine: Vec<Problem> = self
            .store
            .integrity_problems()?
            .into_iter()
            .map(|p| Problem {
                object: None,
                problem: format!("storage: {p}"),
            })
            .collect();
        self.store.read_verified(|r| {
            let mut problems = engine;
            let ids = r.object_ids()?;
            for (id, k, _) in &ids {
                let Some(o) = r.object(id)? else { continue };
                if object_id(*k, &o.data) != *id {
                    problems.push(Problem {
                        object: Some(id.to_hex()),
                        problem: "content does not match its id".into(),
                    });
                    continue;
                }
                match references(*k, &o.data) {
                    Ok(refs) => {
                        for child in refs {
                            if !r.has_object(&child)? {
                                problems.push(Problem {
                                    object: Some(child.to_hex()),
                                    problem: format!("missing, referenced by {}", id.short()),
                                });
                            }
                        }
                    }
                    Err(e) => problems.push(Problem {
                        object: Some(id.to_hex()),
                        problem: format!("cannot be decoded: {e}"),
                    }),
                }
            }
            let workspaces = r.workspaces()?;
            if !workspaces.iter().any(|ws| ws.name == MAIN) {
                // A create cut short between making the vault and its first write.
                problems.push(Problem {
                    object: None,
                    problem: "the vault has no main workspace: its creation did not finish; \
                              delete it (`avfs vault delete NAME --yes`) and create it again"
                        .into(),
                });
            }
            for ws in workspaces {
                if let Some(problem) = marker_problem(r, ws.id)? {
                    problems.push(Problem {
                        object: None,
                        problem: format!("workspace {}: {problem}", ws.name),
                    });
                }
            }
            if problems.is_empty() {
                // Hard links of each live state (objects are known to be sound by now).
                for ws in r.workspaces()? {
                    let view = View {
                        r,
                        cache: &self.cache,
                        overlay: Some(ws.id),
                        base: ws.base,
                    };
                    for problem in verify(&view)? {
                        problems.push(Problem {
                            object: None,
                            problem: format!("workspace {}: {problem}", ws.name),
                        });
                    }
                }
            }
            for root in roots(r)? {
                if !r.has_object(&root)? {
                    problems.push(Problem {
                        object: Some(root.to_hex()),
                        problem: "missing root of a workspace, checkpoint or operation".into(),
                    });
                }
            }
            Ok(CheckReport {
                ok: problems.is_empty(),
                objects_checked: ids.len() as u64,
                problems,
            })
        })
    }
}

/// Problems with the hard links of one state: a name whose inode is missing, an inode
/// whose link count differs from its names, an inode without names. Walks the state when
/// it has hard links; free otherwise.
pub(crate) fn verify(view: &View<'_>) -> Result<Vec<String>> {
    let dir = inodes_dir();
    let Some((node, overlaid)) = view.lookup_raw(&dir)? else {
        return Ok(Vec::new());
    };
    let mut names: BTreeMap<u64, u64> = BTreeMap::new();
    let mut problems = Vec::new();
    view.walk_raw(&VPath::root(), &mut |p, n| {
        if let NodeKind::Link { inode } = n.kind {
            *names.entry(inode).or_default() += 1;
            if is_reserved(p) {
                problems.push(format!("hard-link name {p} inside the reserved directory"));
            }
        }
        Ok(())
    })?;
    for c in view.children_raw(&dir, &node, overlaid)? {
        let inode = u64::from_str_radix(&c.name, 16).ok();
        let count = inode.and_then(|i| names.remove(&i)).unwrap_or(0);
        let mut kind = c.node.kind;
        match kind.nlink_mut() {
            Some(nlink) if *nlink == count && count > 0 => {}
            Some(nlink) => problems.push(format!(
                "hard-linked inode {} has link count {nlink} but {count} names",
                c.name
            )),
            None => problems.push(format!("reserved entry {} is not an inode", c.name)),
        }
        if let NodeKind::Shared { kind, .. } = &kind
            && (kind.is_shared_body()
                || matches!(
                    **kind,
                    NodeKind::File { .. } | NodeKind::Dir { .. } | NodeKind::Link { .. }
                ))
        {
            problems.push(format!(
                "hard-linked inode {} holds a {} body",
                c.name,
                kind.type_name()
            ));
        }
    }
    for inode in names.keys() {
        problems.push(format!(
            "hard-link names of inode {inode:016x}, which is missing"
        ));
    }
    Ok(problems)
}
