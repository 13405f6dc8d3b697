//! File commands: ls, cat, write, mkdir, rm, cp, mv, ln, chmod, tree, stat, find, grep,
//! log, tag/untag, meta.

use std::io::Read;

use clap::{Args, Subcommand};

use agentvfs::model::{PathVersion, WriteOptions};
use agentvfs::service::files::{self, MetaOutput, NodeInfo, TreeNode};
use agentvfs::service::search::{self, FindQuery, FoundEntry, GrepMatch, SizeFilter};
use agentvfs::{Error, Result};

use super::Ctx;
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
    files::parse_mode(s).map_err(|e| match e {
        Error::InvalidArgument { message } => message,
        e => e.to_string(),
    })
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
    let entries = files::ls(&ws, &a.path, a.all, a.at.as_deref())?;
    let rows: Vec<Vec<String>> = entries.iter().map(|e| entry_row(e, a.long)).collect();
    Ok(Reply::new(&entries, table(&rows)))
}

pub fn cmd_cat(ctx: &Ctx, a: CatArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    if !ctx.json {
        let (_, bytes) = files::read(&ws, &a.path, a.at.as_deref())?;
        return Ok(Reply::bytes(&(), bytes));
    }
    let out = files::cat(&ws, &a.path, a.at.as_deref())?;
    Ok(Reply::new(&out, ""))
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
    let opts = WriteOptions {
        mode: a.mode,
        parents: a.parents,
        append: a.append,
    };
    let out = files::write(&ws, &a.path, &data, opts)?;
    let human = format!("wrote {} ({})", out.path, size(out.size));
    Ok(Reply::new(&out, human))
}

pub fn cmd_mkdir(ctx: &Ctx, a: MkdirArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let out = files::mkdir(&ws, &a.paths, a.parents, a.mode)?;
    Ok(Reply::new(&out, ""))
}

pub fn cmd_rm(ctx: &Ctx, a: RmArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let out = files::remove(&ws, &a.paths, a.recursive, a.force)?;
    Ok(Reply::new(&out, ""))
}

pub fn cmd_cp(ctx: &Ctx, a: CpArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let out = files::copy(&ws, &a.src, &a.dst, a.recursive)?;
    Ok(Reply::new(&out, ""))
}

pub fn cmd_mv(ctx: &Ctx, a: MvArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let out = files::rename(&ws, &a.src, &a.dst)?;
    Ok(Reply::new(&out, ""))
}

pub fn cmd_ln(ctx: &Ctx, a: LnArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let info = files::link(&ws, &a.target, &a.link, a.symbolic)?;
    Ok(Reply::new(&info, ""))
}

pub fn cmd_chmod(ctx: &Ctx, a: ChmodArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let out = files::chmod(&ws, a.mode, &a.paths)?;
    Ok(Reply::new(&out, ""))
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
    let (p, tree) = files::tree(&ws, &a.path, a.depth, a.at.as_deref())?;
    let mut human = format!("{}\n", p.display());
    let mut counts = (0, 0);
    render_tree(&tree, "", &mut human, &mut counts);
    human.push_str(&format!("\n{} directories, {} files", counts.0, counts.1));
    Ok(Reply::new(&tree, human))
}

pub fn cmd_stat(ctx: &Ctx, a: StatArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let info = files::stat(&ws, &a.path, a.at.as_deref())?;
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
    if let Some(target) = &info.target {
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

pub fn cmd_tag(ctx: &Ctx, a: TagArgs, add: bool) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let info = files::tag(&ws, &a.path, a.tags, add)?;
    let human = format!("{}: {}", info.path, info.tags.join(", "));
    Ok(Reply::new(&info, human))
}

pub fn run_meta(ctx: &Ctx, cmd: MetaCmd) -> (&'static str, Result<Reply>) {
    let open = || ctx.open().map(|(_, ws)| ws);
    match cmd {
        MetaCmd::Get { path: p, key } => (
            "meta get",
            open().and_then(|ws| {
                let one = key.is_some();
                let out = files::meta_get(&ws, &p, key)?;
                Ok(match out.meta.values().next() {
                    Some(value) if one => {
                        let value = value.clone();
                        Reply::new(&out, value)
                    }
                    _ => meta_reply(out),
                })
            }),
        ),
        MetaCmd::Set {
            path: p,
            key,
            value,
        } => (
            "meta set",
            open()
                .and_then(|ws| files::meta_set(&ws, &p, key, value))
                .map(meta_reply),
        ),
        MetaCmd::Unset { path: p, key } => (
            "meta unset",
            open()
                .and_then(|ws| files::meta_unset(&ws, &p, &key))
                .map(meta_reply),
        ),
    }
}

fn meta_reply(out: MetaOutput) -> Reply {
    let rows: Vec<Vec<String>> = out
        .meta
        .iter()
        .map(|(k, v)| vec![k.clone(), v.clone()])
        .collect();
    let human = table(&rows);
    Reply::new(&out, human)
}
