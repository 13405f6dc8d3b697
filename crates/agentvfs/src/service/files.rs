//! File operations for adapters (`ls`, `cat`, `write`, `mkdir`, `rm`, `cp`, `mv`, `ln`,
//! `chmod`, `tree`, tags and metadata) with their rules and defaults, and the serializable
//! shapes they report: a CLI or MCP tool parses, calls one of these and renders the result.

use std::collections::BTreeMap;

use base64::Engine;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::node::{Node, NodeKind};
use crate::model::path::VPath;
use crate::model::{View, Workspace, WriteOptions};

/// The mode of a directory made without an explicit one.
pub const DEFAULT_DIR_MODE: u32 = 0o755;

/// A node as adapters show it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct NodeInfo {
    pub path: String,
    pub name: String,
    /// `file`, `dir`, `symlink`, `fifo`, `chardev`, `blockdev` or `socket`.
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    /// Permission bits, e.g. 493 for 0o755.
    pub mode: u32,
    /// Number of names of the node: more than 1 for a hard-linked file.
    pub nlink: u64,
    /// `ls -l` style, e.g. `-rwxr-xr-x`.
    pub mode_string: String,
    pub uid: u32,
    pub gid: u32,
    /// Nanoseconds since the Unix epoch.
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub content_id: Option<String>,
    /// Symlink target.
    pub target: Option<String>,
    /// A device node's number; `None` for anything else.
    pub device: Option<DeviceNumber>,
    pub tags: Vec<String>,
    pub meta: BTreeMap<String, String>,
    /// Extended attribute names and base64 values.
    pub xattrs: BTreeMap<String, String>,
}

/// A device node's major and minor number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct DeviceNumber {
    pub major: u32,
    pub minor: u32,
}

impl NodeInfo {
    pub fn new(path: &VPath, node: &Node) -> Self {
        NodeInfo {
            path: path.display(),
            name: if path.is_root() {
                "/".into()
            } else {
                path.name().to_string()
            },
            kind: node.type_name().into(),
            size: node.size(),
            mode: node.attrs.mode,
            nlink: node.nlink(),
            mode_string: mode_string(node),
            uid: node.attrs.uid,
            gid: node.attrs.gid,
            atime: node.attrs.atime,
            mtime: node.attrs.mtime,
            ctime: node.attrs.ctime,
            content_id: node.content_id().map(|i| i.to_hex()),
            target: match &node.kind {
                NodeKind::Symlink { target } => Some(target.clone()),
                _ => None,
            },
            device: matches!(
                node.kind,
                NodeKind::CharDevice { .. } | NodeKind::BlockDevice { .. }
            )
            .then(|| DeviceNumber {
                major: rustix::fs::major(node.rdev()),
                minor: rustix::fs::minor(node.rdev()),
            }),
            tags: node.tags.iter().cloned().collect(),
            meta: node.meta.clone(),
            xattrs: node
                .xattrs
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        base64::engine::general_purpose::STANDARD.encode(v),
                    )
                })
                .collect(),
        }
    }
}

/// `drwxr-xr-x` style mode string, with setuid/setgid/sticky letters.
pub fn mode_string(node: &Node) -> String {
    let ty = node.kind.type_letter();
    let m = node.attrs.mode;
    let mut s = String::with_capacity(10);
    s.push(ty);
    for (shift, special, lower, upper) in [
        (6, 0o4000, 's', 'S'),
        (3, 0o2000, 's', 'S'),
        (0, 0o1000, 't', 'T'),
    ] {
        let bits = (m >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let x = bits & 1 != 0;
        s.push(match (m & special != 0, x) {
            (true, true) => lower,
            (true, false) => upper,
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// An octal permission mode (`644`, `0o755`): octal digits only, at most `7777`.
pub fn parse_mode(s: &str) -> Result<u32> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    // from_str_radix takes a sign (`+5`); a mode is octal digits only.
    Some(digits)
        .filter(|d| !d.is_empty() && d.bytes().all(|b| (b'0'..=b'7').contains(&b)))
        .and_then(|d| u32::from_str_radix(d, 8).ok())
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| Error::invalid(format!("`{s}` is not an octal mode like 644 or 755")))
}

// `cat` data: the content as UTF-8 text when it is, else base64.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CatOutput {
    pub path: String,
    pub size: u64,
    /// `utf8` or `base64`.
    pub encoding: String,
    pub content: String,
}

impl CatOutput {
    pub fn new(path: &VPath, bytes: Vec<u8>) -> CatOutput {
        let size = bytes.len() as u64;
        let (encoding, content) = match String::from_utf8(bytes) {
            Ok(s) => ("utf8", s),
            Err(e) => (
                "base64",
                base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            ),
        };
        CatOutput {
            path: path.display(),
            size,
            encoding: encoding.into(),
            content,
        }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct WriteOutput {
    pub path: String,
    pub size: u64,
    pub content_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PathsOutput {
    pub paths: Vec<String>,
}

impl PathsOutput {
    fn of(list: &[VPath]) -> PathsOutput {
        PathsOutput {
            paths: list.iter().map(VPath::display).collect(),
        }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MoveOutput {
    pub from: String,
    pub to: String,
}

/// A directory tree for `avfs tree --json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TreeNode {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub children: Vec<TreeNode>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MetaOutput {
    pub path: String,
    pub meta: BTreeMap<String, String>,
}

impl From<NodeInfo> for MetaOutput {
    fn from(info: NodeInfo) -> MetaOutput {
        MetaOutput {
            path: info.path,
            meta: info.meta,
        }
    }
}

fn parse_all(ws: &Workspace, op: &str, list: &[String]) -> Result<Vec<VPath>> {
    list.iter().map(|p| ws.parse_path(op, p)).collect()
}

/// A directory's entries (hidden ones only with `all`), or the node itself if not a directory.
pub fn ls(ws: &Workspace, path: &str, all: bool, at: Option<&str>) -> Result<Vec<NodeInfo>> {
    let p = ws.resolve_path(path)?;
    ws.read_at(at, |v| {
        let node = v.get(&p)?;
        if !node.is_dir() {
            return Ok(vec![NodeInfo::new(&p, &node)]);
        }
        Ok(v.list(&p)?
            .into_iter()
            .filter(|c| all || !c.name.starts_with('.'))
            .map(|c| NodeInfo::new(&p.join(&c.name), &c.node))
            .collect())
    })
}

/// A node's metadata, live or as of a checkpoint.
pub fn stat(ws: &Workspace, path: &str, at: Option<&str>) -> Result<NodeInfo> {
    let p = ws.resolve_path(path)?;
    let node = ws.read_at(at, |v| v.get(&p))?;
    Ok(NodeInfo::new(&p, &node))
}

/// A file's bytes, live or as of a checkpoint, with the path they were read at.
pub fn read(ws: &Workspace, path: &str, at: Option<&str>) -> Result<(VPath, Vec<u8>)> {
    let p = ws.resolve_path(path)?;
    let bytes = ws.read_at(at, |v| v.read(&p))?;
    Ok((p, bytes))
}

/// `read` as `cat --json` reports it.
pub fn cat(ws: &Workspace, path: &str, at: Option<&str>) -> Result<CatOutput> {
    let (p, bytes) = read(ws, path, at)?;
    Ok(CatOutput::new(&p, bytes))
}

/// Write (or append to) a file.
pub fn write(ws: &Workspace, path: &str, data: &[u8], opts: WriteOptions) -> Result<WriteOutput> {
    let p = ws.parse_path("write", path)?;
    let node = ws.edit("write", &[&p], |e| {
        e.write_file(&p, data, opts)?;
        e.view().get(&p)
    })?;
    Ok(WriteOutput {
        path: p.display(),
        size: node.size(),
        content_id: node.content_id().map(|i| i.to_hex()),
    })
}

/// Make directories, with mode [`DEFAULT_DIR_MODE`] unless one is given.
pub fn mkdir(
    ws: &Workspace,
    paths: &[String],
    parents: bool,
    mode: Option<u32>,
) -> Result<PathsOutput> {
    let ps = parse_all(ws, "mkdir", paths)?;
    let refs: Vec<&VPath> = ps.iter().collect();
    ws.edit("mkdir", &refs, |e| {
        for p in &ps {
            e.mkdir(p, parents, mode.unwrap_or(DEFAULT_DIR_MODE))?;
        }
        Ok(())
    })?;
    Ok(PathsOutput::of(&ps))
}

/// Remove paths (directories only with `recursive`). With `force` a missing path is
/// skipped, not an error; the output lists only what was removed.
pub fn remove(
    ws: &Workspace,
    paths: &[String],
    recursive: bool,
    force: bool,
) -> Result<PathsOutput> {
    let ps = parse_all(ws, "rm", paths)?;
    let refs: Vec<&VPath> = ps.iter().collect();
    let removed = ws.edit("rm", &refs, |e| {
        let mut removed = Vec::new();
        for p in &ps {
            if force && e.view().lookup(p)?.is_none() {
                continue;
            }
            e.remove(p, recursive)?;
            removed.push(p.clone());
        }
        Ok(removed)
    })?;
    Ok(PathsOutput::of(&removed))
}

/// Copy a file (or a directory with `recursive`); content is shared, not duplicated.
pub fn copy(ws: &Workspace, src: &str, dst: &str, recursive: bool) -> Result<MoveOutput> {
    let (src, dst) = (ws.parse_path("cp", src)?, ws.parse_path("cp", dst)?);
    let to = ws.edit("cp", &[&src, &dst], |e| e.copy(&src, &dst, recursive))?;
    Ok(MoveOutput {
        from: src.display(),
        to: to.display(),
    })
}

/// Move with rename(2) semantics: a file never moves "into" a directory by accident.
pub fn rename(ws: &Workspace, src: &str, dst: &str) -> Result<MoveOutput> {
    let (src, dst) = (ws.parse_path("mv", src)?, ws.parse_path("mv", dst)?);
    ws.edit("mv", &[&src, &dst], |e| e.rename(&src, &dst))?;
    Ok(MoveOutput {
        from: src.display(),
        to: dst.display(),
    })
}

/// A hard link to file `target`, or with `symbolic` a symlink whose target is stored verbatim.
pub fn link(ws: &Workspace, target: &str, link: &str, symbolic: bool) -> Result<NodeInfo> {
    let link = ws.parse_path("ln", link)?;
    let node = if symbolic {
        ws.edit("ln", &[&link], |e| {
            e.symlink(&link, target)?;
            e.view().get(&link)
        })?
    } else {
        let target = ws.parse_path("ln", target)?;
        ws.edit("ln", &[&target, &link], |e| e.link(&target, &link))?
    };
    Ok(NodeInfo::new(&link, &node))
}

/// Set the permission bits of paths.
pub fn chmod(ws: &Workspace, mode: u32, paths: &[String]) -> Result<PathsOutput> {
    let ps = parse_all(ws, "chmod", paths)?;
    let refs: Vec<&VPath> = ps.iter().collect();
    ws.edit("chmod", &refs, |e| {
        for p in &ps {
            e.update(p, |n| {
                n.attrs.mode = mode;
                Ok(())
            })?;
        }
        Ok(())
    })?;
    Ok(PathsOutput::of(&ps))
}

fn build_tree(v: &View<'_>, p: &VPath, node: &Node, depth: Option<usize>) -> Result<TreeNode> {
    let mut children = Vec::new();
    if node.is_dir() && depth != Some(0) {
        for c in v.list(p)? {
            children.push(build_tree(
                v,
                &p.join(&c.name),
                &c.node,
                depth.map(|d| d - 1),
            )?);
        }
    }
    Ok(TreeNode {
        name: if p.is_root() {
            "/".into()
        } else {
            p.name().to_string()
        },
        kind: node.type_name().into(),
        size: node.size(),
        children,
    })
}

/// The tree under `path`, at most `depth` levels deep; with the path it was read at.
pub fn tree(
    ws: &Workspace,
    path: &str,
    depth: Option<usize>,
    at: Option<&str>,
) -> Result<(VPath, TreeNode)> {
    let p = ws.resolve_path(path)?;
    let tree = ws.read_at(at, |v| {
        let node = v.get(&p)?;
        build_tree(v, &p, &node, depth)
    })?;
    Ok((p, tree))
}

fn update_node(
    ws: &Workspace,
    op: &str,
    p: &str,
    f: impl FnOnce(&mut Node) -> Result<()>,
) -> Result<NodeInfo> {
    let p = ws.parse_path(op, p)?;
    let node = ws.edit(op, &[&p], |e| e.update(&p, f))?;
    Ok(NodeInfo::new(&p, &node))
}

/// A tag is non-empty and has no whitespace.
pub fn check_tag(tag: &str) -> Result<()> {
    if tag.is_empty() || tag.contains(char::is_whitespace) {
        return Err(Error::InvalidName {
            name: tag.to_string(),
            reason: "tags are non-empty and contain no whitespace".into(),
        });
    }
    Ok(())
}

/// Add tags to a path (`add`) or remove them; every tag is checked before anything changes.
pub fn tag(ws: &Workspace, path: &str, tags: Vec<String>, add: bool) -> Result<NodeInfo> {
    for t in &tags {
        check_tag(t)?;
    }
    update_node(ws, if add { "tag" } else { "untag" }, path, |n| {
        for t in tags {
            if add {
                n.tags.insert(t);
            } else {
                n.tags.remove(&t);
            }
        }
        Ok(())
    })
}

/// All metadata of a path, or only `key` (an error if it is not set).
pub fn meta_get(ws: &Workspace, path: &str, key: Option<String>) -> Result<MetaOutput> {
    let vp = VPath::parse(path)?;
    let node = ws.read(|v| v.get(&vp))?;
    let info = NodeInfo::new(&vp, &node);
    match key {
        None => Ok(info.into()),
        Some(k) => {
            let value =
                info.meta.get(&k).cloned().ok_or_else(|| {
                    Error::invalid(format!("no metadata key `{k}` on {}", info.path))
                })?;
            Ok(MetaOutput {
                path: info.path,
                meta: BTreeMap::from([(k, value)]),
            })
        }
    }
}

/// Set a metadata key.
pub fn meta_set(ws: &Workspace, path: &str, key: String, value: String) -> Result<MetaOutput> {
    update_node(ws, "meta.set", path, |n| {
        n.meta.insert(key, value);
        Ok(())
    })
    .map(Into::into)
}

/// Remove a metadata key; removing one that is not set is an error.
pub fn meta_unset(ws: &Workspace, path: &str, key: &str) -> Result<MetaOutput> {
    update_node(ws, "meta.unset", path, |n| {
        n.meta
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| Error::invalid(format!("no metadata key `{key}`")))
    })
    .map(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::testing;

    fn write_text(ws: &Workspace, path: &str, text: &str) {
        let opts = WriteOptions {
            mode: None,
            parents: true,
            append: false,
        };
        write(ws, path, text.as_bytes(), opts).unwrap();
    }

    #[test]
    fn a_tag_with_whitespace_is_refused_and_changes_nothing() {
        let h = testing::home();
        write_text(&h.ws, "/a.txt", "x");
        let err = tag(&h.ws, "/a.txt", vec!["ok".into(), "not ok".into()], true).unwrap_err();
        assert_eq!(err.kind(), "invalid_name");
        assert!(tag(&h.ws, "/a.txt", vec![String::new()], true).is_err());
        assert!(stat(&h.ws, "/a.txt", None).unwrap().tags.is_empty());
        let info = tag(&h.ws, "/a.txt", vec!["ok".into()], true).unwrap();
        assert_eq!(info.tags, vec!["ok".to_string()]);
        let info = tag(&h.ws, "/a.txt", vec!["ok".into()], false).unwrap();
        assert!(info.tags.is_empty());
    }

    #[test]
    fn rm_force_skips_missing_paths_and_reports_only_what_it_removed() {
        let h = testing::home();
        write_text(&h.ws, "/a.txt", "x");
        let paths = vec!["/missing".to_string(), "/a.txt".to_string()];
        assert_eq!(
            remove(&h.ws, &paths, false, false).unwrap_err().kind(),
            "path_not_found"
        );
        assert!(stat(&h.ws, "/a.txt", None).is_ok(), "nothing half-removed");
        let out = remove(&h.ws, &paths, false, true).unwrap();
        assert_eq!(out.paths, vec!["/a.txt".to_string()]);
        assert!(stat(&h.ws, "/a.txt", None).is_err());
    }

    #[test]
    fn mkdir_defaults_to_755_and_takes_an_explicit_mode() {
        let h = testing::home();
        mkdir(&h.ws, &["/d".into()], false, None).unwrap();
        mkdir(&h.ws, &["/q".into()], false, Some(0o700)).unwrap();
        assert_eq!(stat(&h.ws, "/d", None).unwrap().mode & 0o7777, 0o755);
        assert_eq!(stat(&h.ws, "/q", None).unwrap().mode & 0o7777, 0o700);
    }

    #[test]
    fn modes_are_octal_digits_only() {
        assert_eq!(parse_mode("644").unwrap(), 0o644);
        assert_eq!(parse_mode("0o4755").unwrap(), 0o4755);
        for bad in ["", "9", "+5", "17777", "rw"] {
            assert_eq!(parse_mode(bad).unwrap_err().kind(), "invalid_argument");
        }
    }

    #[test]
    fn cat_reports_binary_content_as_base64() {
        let h = testing::home();
        write_text(&h.ws, "/t.txt", "hi");
        let text = cat(&h.ws, "/t.txt", None).unwrap();
        assert_eq!(
            (text.encoding.as_str(), text.content.as_str()),
            ("utf8", "hi")
        );
        let opts = WriteOptions {
            mode: None,
            parents: false,
            append: false,
        };
        write(&h.ws, "/b.bin", &[0xff, 0x00], opts).unwrap();
        let bin = cat(&h.ws, "/b.bin", None).unwrap();
        assert_eq!(
            (bin.encoding.as_str(), bin.content.as_str()),
            ("base64", "/wA=")
        );
    }

    #[test]
    fn meta_unset_of_a_missing_key_is_an_error() {
        let h = testing::home();
        write_text(&h.ws, "/a", "");
        meta_set(&h.ws, "/a", "k".into(), "v".into()).unwrap();
        assert_eq!(
            meta_get(&h.ws, "/a", Some("k".into())).unwrap().meta["k"],
            "v"
        );
        assert!(meta_unset(&h.ws, "/a", "nope").is_err());
        assert!(meta_unset(&h.ws, "/a", "k").unwrap().meta.is_empty());
    }
}
