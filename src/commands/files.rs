//! File commands: ls, cat, write, mkdir, rm, cp, mv, ln, chmod, tree, stat, find, grep,
//! log, tag/untag, meta.

use std::collections::BTreeMap;
use std::io::Read;

use base64::Engine;
use clap::{Args, Subcommand};
use serde::Serialize;

use agentvfs::model::node::{Node, NodeKind};
use agentvfs::model::path::VPath;
use agentvfs::model::{PathVersion, View, Workspace, WriteOptions};
use agentvfs::service::files::NodeInfo;
use agentvfs::service::search::{self, FindQuery, FoundEntry, GrepMatch, SizeFilter};
use agentvfs::{Error, Result};

use super::{Ctx, path};
use crate::output::{Reply, quote_name, size, table, time};

#[derive(Args)]
pub struct LsArgs {
    /// Long format: mode, link count, size, modification time.
    #[arg(short, long)]
    pub long: bool,
    /// Include entries whose names start with `.`.
    #[arg(short, long)]
    pub all: bool,
    #[arg(default_value = "/")]
    pub path: String,
    /// List as of this checkpoint.
    #[arg(long)]
    pub at: Option<String>,
}

#[derive(Args)]
pub struct CatArgs {
    pub path: String,
    /// Read the file as of this checkpoint.
    #[arg(long)]
    pub at: Option<String>,
}

#[derive(Args)]
pub struct WriteArgs {
    pub path: String,
    /// The content; read from stdin when absent (binary-safe).
    pub content: Option<String>,
    /// Create missing parent directories.
    #[arg(short, long)]
    pub parents: bool,
    /// Append instead of replacing.
    #[arg(short, long)]
    pub append: bool,
    /// Permission bits for a new file, in octal (default 644).
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<u32>,
}

#[derive(Args)]
pub struct MkdirArgs {
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// Create parents as needed; an existing directory is not an error.
    #[arg(short, long)]
    pub parents: bool,
    /// Permission bits in octal (default 755).
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<u32>,
}

#[derive(Args)]
pub struct RmArgs {
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// Remove directories and their contents.
    #[arg(short, long)]
    pub recursive: bool,
    /// Ignore paths that do not exist.
    #[arg(short, long)]
    pub force: bool,
}

#[derive(Args)]
pub struct CpArgs {
    pub src: String,
    pub dst: String,
    /// Copy directories recursively.
    #[arg(short, long)]
    pub recursive: bool,
}

#[derive(Args)]
pub struct MvArgs {
    pub src: String,
    pub dst: String,
}

#[derive(Args)]
#[command(after_help = "\
A hard link (the default) is another name for a regular file: both names show the same \
content, mode, owner, times and xattrs, a change through one is seen through the other, \
and removing one leaves the rest. Directories, symlinks and FIFOs cannot be hard-linked \
(error kind hard_link_not_allowed). Examples:
  avfs ln notes.txt notes-again.txt      hard link: `avfs stat` shows 2 links
  avfs ln -s ../shared/config cfg        symbolic link, target stored verbatim")]
pub struct LnArgs {
    /// Create a symbolic link instead of a hard link.
    #[arg(short = 's', long)]
    pub symbolic: bool,
    /// The existing file (hard link), or what the symlink points to (stored verbatim).
    pub target: String,
    /// The new name.
    pub link: String,
}

#[derive(Args)]
pub struct ChmodArgs {
    /// Octal permission bits, e.g. 755.
    #[arg(value_parser = parse_mode)]
    pub mode: u32,
    #[arg(required = true)]
    pub paths: Vec<String>,
}

#[derive(Args)]
pub struct TreeArgs {
    #[arg(default_value = "/")]
    pub path: String,
    /// Descend at most this many levels.
    #[arg(short = 'L', long)]
    pub depth: Option<usize>,
    #[arg(long)]
    pub at: Option<String>,
}

#[derive(Args)]
pub struct StatArgs {
    pub path: String,
    #[arg(long)]
    pub at: Option<String>,
}

#[derive(Args)]
pub struct FindArgs {
    /// Name glob, e.g. '*.rs' (quote it from your shell).
    pub pattern: String,
    /// Where to search.
    #[arg(default_value = "/")]
    pub path: String,
    /// f (file), d (directory), l (symlink), p (fifo), c (character device), b (block
    /// device) or s (socket).
    #[arg(short = 't', long = "type")]
    pub kind: Option<char>,
    /// +N (more than), -N (less than) or N bytes; k, M, G suffixes allowed.
    #[arg(short, long, allow_hyphen_values = true)]
    pub size: Option<String>,
}

#[derive(Args)]
pub struct GrepArgs {
    pub regex: String,
    #[arg(default_value = "/")]
    pub path: String,
    #[arg(short, long)]
    pub ignore_case: bool,
}

#[derive(Args)]
pub struct LogArgs {
    pub path: String,
}

#[derive(Args)]
pub struct TagArgs {
    pub path: String,
    #[arg(required = true)]
    pub tags: Vec<String>,
}

#[derive(Subcommand)]
pub enum MetaCmd {
    /// Print all metadata of a path, or one key.
    Get { path: String, key: Option<String> },
    /// Set a key.
    Set {
        path: String,
        key: String,
        value: String,
    },
    /// Remove a key.
    Unset { path: String, key: String },
}

fn parse_mode(s: &str) -> std::result::Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    // from_str_radix takes a sign (`+5`); a mode is octal digits only.
    Some(digits)
        .filter(|d| !d.is_empty() && d.bytes().all(|b| (b'0'..=b'7').contains(&b)))
        .and_then(|d| u32::from_str_radix(d, 8).ok())
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("`{s}` is not an octal mode like 644 or 755"))
}

fn entry_row(info: &NodeInfo, long: bool) -> Vec<String> {
    let shown = quote_name(&info.name);
    let name = match &info.target {
        Some(t) => format!("{shown} -> {}", quote_name(t)),
        None if info.kind == "dir" => format!("{shown}/"),
        None => shown.into_owned(),
    };
    if long {
        vec![
            info.mode_string.clone(),
            info.nlink.to_string(),
            // A device shows its number where a size would be, as `ls -l` does.
            match info.device {
                Some(d) => format!("{}, {}", d.major, d.minor),
                None => info.size.to_string(),
            },
            time(info.mtime),
            name,
        ]
    } else {
        vec![name]
    }
}

pub fn cmd_ls(ctx: &Ctx, a: LsArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let p = ws.resolve_path(&a.path)?;
    let entries: Vec<NodeInfo> = ws.read_at(a.at.as_deref(), |v| {
        let node = v.get(&p)?;
        if !node.is_dir() {
            return Ok(vec![NodeInfo::new(&p, &node)]);
        }
        Ok(v.list(&p)?
            .into_iter()
            .filter(|c| a.all || !c.name.starts_with('.'))
            .map(|c| NodeInfo::new(&p.join(&c.name), &c.node))
            .collect())
    })?;
    let rows: Vec<Vec<String>> = entries.iter().map(|e| entry_row(e, a.long)).collect();
    Ok(Reply::new(&entries, table(&rows)))
}

#[derive(Serialize, schemars::JsonSchema)]
pub struct CatOutput {
    pub path: String,
    pub size: u64,
    /// `utf8` or `base64`.
    pub encoding: String,
    pub content: String,
}

pub fn cmd_cat(ctx: &Ctx, a: CatArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let p = ws.resolve_path(&a.path)?;
    let bytes = ws.read_at(a.at.as_deref(), |v| v.read(&p))?;
    if !ctx.json {
        return Ok(Reply::bytes(&(), bytes));
    }
    let size = bytes.len() as u64;
    let (encoding, content) = match String::from_utf8(bytes) {
        Ok(s) => ("utf8", s),
        Err(e) => (
            "base64",
            base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
        ),
    };
    let out = CatOutput {
        path: p.display(),
        size,
        encoding: encoding.into(),
        content,
    };
    Ok(Reply::new(&out, ""))
}

#[derive(Serialize, schemars::JsonSchema)]
pub struct WriteOutput {
    pub path: String,
    pub size: u64,
    pub content_id: Option<String>,
}

pub fn cmd_write(ctx: &Ctx, a: WriteArgs) -> Result<Reply> {
    let data = match a.content {
        Some(c) => c.into_bytes(),
        None => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| Error::invalid(format!("reading stdin: {e}")))?;
            buf
        }
    };
    let (_, ws) = ctx.open()?;
    let p = ws.parse_path("write", &a.path)?;
    let opts = WriteOptions {
        mode: a.mode,
        parents: a.parents,
        append: a.append,
    };
    let node = ws.edit("write", &[&p], |e| {
        e.write_file(&p, &data, opts)?;
        e.view().get(&p)
    })?;
    let out = WriteOutput {
        path: p.display(),
        size: node.size(),
        content_id: node.content_id().map(|i| i.to_hex()),
    };
    let human = format!("wrote {} ({})", out.path, size(out.size));
    Ok(Reply::new(&out, human))
}

#[derive(Serialize, schemars::JsonSchema)]
pub struct PathsOutput {
    pub paths: Vec<String>,
}

fn paths(ws: &Workspace, op: &str, list: &[String]) -> Result<Vec<VPath>> {
    list.iter().map(|p| ws.parse_path(op, p)).collect()
}

fn paths_output(list: &[VPath]) -> PathsOutput {
    PathsOutput {
        paths: list.iter().map(VPath::display).collect(),
    }
}

pub fn cmd_mkdir(ctx: &Ctx, a: MkdirArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let ps = paths(&ws, "mkdir", &a.paths)?;
    let refs: Vec<&VPath> = ps.iter().collect();
    ws.edit("mkdir", &refs, |e| {
        for p in &ps {
            e.mkdir(p, a.parents, a.mode.unwrap_or(0o755))?;
        }
        Ok(())
    })?;
    Ok(Reply::new(&paths_output(&ps), ""))
}

pub fn cmd_rm(ctx: &Ctx, a: RmArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let ps = paths(&ws, "rm", &a.paths)?;
    let refs: Vec<&VPath> = ps.iter().collect();
    let removed = ws.edit("rm", &refs, |e| {
        let mut removed = Vec::new();
        for p in &ps {
            if a.force && e.view().lookup(p)?.is_none() {
                continue;
            }
            e.remove(p, a.recursive)?;
            removed.push(p.clone());
        }
        Ok(removed)
    })?;
    Ok(Reply::new(&paths_output(&removed), ""))
}

#[derive(Serialize, schemars::JsonSchema)]
pub struct MoveOutput {
    pub from: String,
    pub to: String,
}

pub fn cmd_cp(ctx: &Ctx, a: CpArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let (src, dst) = (ws.parse_path("cp", &a.src)?, ws.parse_path("cp", &a.dst)?);
    let to = ws.edit("cp", &[&src, &dst], |e| e.copy(&src, &dst, a.recursive))?;
    let out = MoveOutput {
        from: src.display(),
        to: to.display(),
    };
    Ok(Reply::new(&out, ""))
}

pub fn cmd_mv(ctx: &Ctx, a: MvArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let (src, dst) = (ws.parse_path("mv", &a.src)?, ws.parse_path("mv", &a.dst)?);
    // rename(2) semantics: a file never moves "into" a directory by accident.
    let to = ws.edit("mv", &[&src, &dst], |e| {
        e.rename(&src, &dst)?;
        Ok(dst.clone())
    })?;
    let out = MoveOutput {
        from: src.display(),
        to: to.display(),
    };
    Ok(Reply::new(&out, ""))
}

pub fn cmd_ln(ctx: &Ctx, a: LnArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let link = ws.parse_path("ln", &a.link)?;
    let node = if a.symbolic {
        ws.edit("ln", &[&link], |e| {
            e.symlink(&link, &a.target)?;
            e.view().get(&link)
        })?
    } else {
        let target = ws.parse_path("ln", &a.target)?;
        ws.edit("ln", &[&target, &link], |e| e.link(&target, &link))?
    };
    Ok(Reply::new(&NodeInfo::new(&link, &node), ""))
}

pub fn cmd_chmod(ctx: &Ctx, a: ChmodArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let ps = paths(&ws, "chmod", &a.paths)?;
    let refs: Vec<&VPath> = ps.iter().collect();
    ws.edit("chmod", &refs, |e| {
        for p in &ps {
            e.update(p, |n| {
                n.attrs.mode = a.mode;
                Ok(())
            })?;
        }
        Ok(())
    })?;
    Ok(Reply::new(&paths_output(&ps), ""))
}

/// A directory tree for `avfs tree --json`.
#[derive(Serialize, schemars::JsonSchema)]
pub struct TreeNode {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub children: Vec<TreeNode>,
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

fn render_tree(t: &TreeNode, prefix: &str, out: &mut String, counts: &mut (u64, u64)) {
    for (i, c) in t.children.iter().enumerate() {
        let last = i + 1 == t.children.len();
        let suffix = if c.kind == "dir" { "/" } else { "" };
        out.push_str(&format!(
            "{prefix}{}{}{suffix}\n",
            if last { "└── " } else { "├── " },
            quote_name(&c.name)
        ));
        if c.kind == "dir" {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
        let next = format!("{prefix}{}", if last { "    " } else { "│   " });
        render_tree(c, &next, out, counts);
    }
}

pub fn cmd_tree(ctx: &Ctx, a: TreeArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let p = ws.resolve_path(&a.path)?;
    let tree = ws.read_at(a.at.as_deref(), |v| {
        let node = v.get(&p)?;
        build_tree(v, &p, &node, a.depth)
    })?;
    let mut human = format!("{}\n", p.display());
    let mut counts = (0, 0);
    render_tree(&tree, "", &mut human, &mut counts);
    human.push_str(&format!("\n{} directories, {} files", counts.0, counts.1));
    Ok(Reply::new(&tree, human))
}

pub fn cmd_stat(ctx: &Ctx, a: StatArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let p = ws.resolve_path(&a.path)?;
    let node = ws.read_at(a.at.as_deref(), |v| v.get(&p))?;
    let info = NodeInfo::new(&p, &node);
    let mut rows = vec![
        vec!["path".into(), info.path.clone()],
        vec!["type".into(), info.kind.clone()],
        vec![
            "size".into(),
            format!("{} ({})", info.size, size(info.size)),
        ],
        vec![
            "mode".into(),
            format!("{:04o} {}", info.mode, info.mode_string),
        ],
        vec!["links".into(), info.nlink.to_string()],
        vec!["owner".into(), format!("{}:{}", info.uid, info.gid)],
        vec!["modified".into(), time(info.mtime)],
        vec!["changed".into(), time(info.ctime)],
    ];
    if let NodeKind::Symlink { target } = &node.kind {
        rows.push(vec!["target".into(), target.clone()]);
    }
    if let Some(d) = info.device {
        rows.push(vec!["device".into(), format!("{}, {}", d.major, d.minor)]);
    }
    if let Some(id) = &info.content_id {
        rows.push(vec!["content".into(), id.clone()]);
    }
    if !info.tags.is_empty() {
        rows.push(vec!["tags".into(), info.tags.join(", ")]);
    }
    for (k, v) in &info.meta {
        rows.push(vec![format!("meta.{k}"), v.clone()]);
    }
    for k in info.xattrs.keys() {
        rows.push(vec!["xattr".into(), k.clone()]);
    }
    let human = table(&rows);
    Ok(Reply::new(&info, human))
}

pub fn cmd_find(ctx: &Ctx, a: FindArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let root = ws.resolve_path(&a.path)?;
    let q = FindQuery {
        name: Some(a.pattern),
        kind: a.kind,
        size: a
            .size
            .as_deref()
            .map(str::parse::<SizeFilter>)
            .transpose()?,
    };
    let found: Vec<FoundEntry> = search::find(&ws, &root, &q)?;
    let human = found
        .iter()
        .map(|f| quote_name(&f.path))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Reply::new(&found, human))
}

pub fn cmd_grep(ctx: &Ctx, a: GrepArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let root = ws.resolve_path(&a.path)?;
    let matches: Vec<GrepMatch> = search::grep(&ws, &a.regex, &root, a.ignore_case)?;
    let human = matches
        .iter()
        .map(|m| format!("{}:{}:{}", quote_name(&m.path), m.line, m.text))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Reply::new(&matches, human))
}

pub fn cmd_log(ctx: &Ctx, a: LogArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let p = ws.resolve_path(&a.path)?;
    let versions: Vec<PathVersion> = ws.log(&p)?;
    let mut rows = vec![vec![
        "CHECKPOINT".into(),
        "WHEN".into(),
        "TYPE".into(),
        "SIZE".into(),
        "CONTENT".into(),
    ]];
    for v in &versions {
        rows.push(vec![
            v.checkpoint.clone().unwrap_or_else(|| "(live)".into()),
            time(v.at),
            v.kind.clone(),
            v.size.to_string(),
            v.content_id
                .as_deref()
                .map(|c| c[..12].to_string())
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    Ok(Reply::new(&versions, table(&rows)))
}

fn update_node(
    ctx: &Ctx,
    op: &str,
    p: &str,
    f: impl FnOnce(&mut Node) -> Result<()>,
) -> Result<NodeInfo> {
    let (_, ws) = ctx.open()?;
    let p = ws.parse_path(op, p)?;
    let node = ws.edit(op, &[&p], |e| e.update(&p, f))?;
    Ok(NodeInfo::new(&p, &node))
}

pub fn cmd_tag(ctx: &Ctx, a: TagArgs, add: bool) -> Result<Reply> {
    for t in &a.tags {
        if t.is_empty() || t.contains(char::is_whitespace) {
            return Err(Error::InvalidName {
                name: t.clone(),
                reason: "tags are non-empty and contain no whitespace".into(),
            });
        }
    }
    let info = update_node(ctx, if add { "tag" } else { "untag" }, &a.path, |n| {
        for t in a.tags {
            if add {
                n.tags.insert(t);
            } else {
                n.tags.remove(&t);
            }
        }
        Ok(())
    })?;
    let human = format!("{}: {}", info.path, info.tags.join(", "));
    Ok(Reply::new(&info, human))
}

#[derive(Serialize, schemars::JsonSchema)]
pub struct MetaOutput {
    pub path: String,
    pub meta: BTreeMap<String, String>,
}

pub fn run_meta(ctx: &Ctx, cmd: MetaCmd) -> (&'static str, Result<Reply>) {
    match cmd {
        MetaCmd::Get { path: p, key } => ("meta get", meta_get(ctx, &p, key)),
        MetaCmd::Set {
            path: p,
            key,
            value,
        } => (
            "meta set",
            update_node(ctx, "meta.set", &p, |n| {
                n.meta.insert(key, value);
                Ok(())
            })
            .map(meta_reply),
        ),
        MetaCmd::Unset { path: p, key } => (
            "meta unset",
            update_node(ctx, "meta.unset", &p, |n| {
                n.meta
                    .remove(&key)
                    .map(|_| ())
                    .ok_or_else(|| Error::invalid(format!("no metadata key `{key}`")))
            })
            .map(meta_reply),
        ),
    }
}

fn meta_reply(info: NodeInfo) -> Reply {
    let out = MetaOutput {
        path: info.path,
        meta: info.meta,
    };
    let rows: Vec<Vec<String>> = out
        .meta
        .iter()
        .map(|(k, v)| vec![k.clone(), v.clone()])
        .collect();
    let human = table(&rows);
    Reply::new(&out, human)
}

fn meta_get(ctx: &Ctx, p: &str, key: Option<String>) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let vp = path(p)?;
    let node = ws.read(|v| v.get(&vp))?;
    let info = NodeInfo::new(&vp, &node);
    match key {
        None => Ok(meta_reply(info)),
        Some(k) => {
            let value =
                info.meta.get(&k).cloned().ok_or_else(|| {
                    Error::invalid(format!("no metadata key `{k}` on {}", info.path))
                })?;
            let out = MetaOutput {
                path: info.path,
                meta: BTreeMap::from([(k, value.clone())]),
            };
            Ok(Reply::new(&out, value))
        }
    }
}
