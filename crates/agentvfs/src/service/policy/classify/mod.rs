//! What each program does: the built-in knowledge of common tools, wrappers, shells,
//! interpreters, `git`, package managers, and the getopt-style parsing their flags need.

mod archives;
mod embedded;
mod exec;
mod files;
mod find;
mod git;
mod git_config;
mod network;
mod packages;
mod text;
mod wrappers;

use super::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{
    Arg, MAX_DEPTH, Resolved, Role, SYSTEM_BIN_DIRS, Scope, Stdin, looks_like_path, resolve,
    snippet,
};

// ---- option parsing ----------------------------------------------------------------------

/// One parsed command-line element.
#[derive(Debug, Clone)]
pub(super) enum Opt {
    /// `-x` or `--name` (names keep their dashes).
    Flag(String),
    /// An option with its value (`-o FILE`, `-oFILE`, `--out=FILE`, `--out FILE`).
    Value(String, Arg),
    Operand(Arg),
}

/// Parsed arguments.
#[derive(Debug, Clone, Default)]
pub(super) struct Opts(pub Vec<Opt>);

impl Opts {
    pub fn has(&self, names: &[&str]) -> bool {
        self.0.iter().any(|o| match o {
            Opt::Flag(n) | Opt::Value(n, _) => names.contains(&n.as_str()),
            Opt::Operand(_) => false,
        })
    }

    pub fn values(&self, names: &[&str]) -> Vec<&Arg> {
        self.0
            .iter()
            .filter_map(|o| match o {
                Opt::Value(n, v) if names.contains(&n.as_str()) => Some(v),
                _ => None,
            })
            .collect()
    }

    pub fn operands(&self) -> Vec<&Arg> {
        self.0
            .iter()
            .filter_map(|o| match o {
                Opt::Operand(a) => Some(a),
                _ => None,
            })
            .collect()
    }

    /// Values of options not listed in `skip` (their values may still be paths).
    pub fn other_values(&self, skip: &[&str]) -> Vec<&Arg> {
        self.0
            .iter()
            .filter_map(|o| match o {
                Opt::Value(n, v) if !skip.contains(&n.as_str()) => Some(v),
                _ => None,
            })
            .collect()
    }
}

/// getopt_long-style parsing. `short_val`: letters that take a value; `long_val`: long names
/// (without `--`) that take a value; `posix`: options end at the first operand.
pub(super) fn getopt(args: &[Arg], short_val: &str, long_val: &[&str], posix: bool) -> Opts {
    let mut out = Vec::new();
    let mut i = 0;
    let mut only_operands = false;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if only_operands || !a.is_flag() {
            if posix {
                only_operands = true;
            }
            out.push(Opt::Operand(a.clone()));
            continue;
        }
        let t = a.text.as_str();
        if t == "--" {
            only_operands = true;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            // GNU getopt takes any unambiguous prefix of a long option (`--use-compress-prog`).
            let full = |n: &str| -> String {
                let mut hits = long_val.iter().filter(|l| l.starts_with(n));
                match (long_val.contains(&n), hits.next(), hits.next()) {
                    (false, Some(only), None) if !n.is_empty() => (*only).to_string(),
                    _ => n.to_string(),
                }
            };
            if let Some((n, v)) = long.split_once('=') {
                out.push(Opt::Value(format!("--{}", full(n)), a.derived(v)));
            } else if long_val.contains(&full(long).as_str()) {
                let t = format!("--{}", full(long));
                match args.get(i) {
                    Some(v) => {
                        out.push(Opt::Value(t, v.clone()));
                        i += 1;
                    }
                    None => out.push(Opt::Flag(t)),
                }
            } else {
                out.push(Opt::Flag(t.to_string()));
            }
            continue;
        }
        let chars: Vec<char> = t[1..].chars().collect();
        for (k, c) in chars.iter().enumerate() {
            if short_val.contains(*c) {
                let rest: String = chars[k + 1..].iter().collect();
                if !rest.is_empty() {
                    out.push(Opt::Value(format!("-{c}"), a.derived(&rest)));
                } else if let Some(v) = args.get(i) {
                    out.push(Opt::Value(format!("-{c}"), v.clone()));
                    i += 1;
                } else {
                    out.push(Opt::Flag(format!("-{c}")));
                }
                break;
            }
            out.push(Opt::Flag(format!("-{c}")));
        }
    }
    Opts(out)
}

/// The program's subcommand, for `[[rule]] subcommand` (after git's / cargo's global options).
pub(super) fn subcommand(name: &str, rest: &[Arg]) -> Option<String> {
    let mut i = 0;
    while i < rest.len() {
        let a = &rest[i];
        let t = a.known()?;
        match name {
            "git" if matches!(t, "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace") => {
                i += 2;
                continue;
            }
            "cargo" if t.starts_with('+') => {
                i += 1;
                continue;
            }
            "cargo" if matches!(t, "--color" | "-Z" | "--config" | "-C") => {
                i += 2;
                continue;
            }
            _ => {}
        }
        if t.starts_with('-') {
            i += 1;
            continue;
        }
        return Some(t.to_string());
    }
    None
}

/// `-rf`, `--force`, `--delete`…: flags that make an unknown command word dangerous.
fn destructive_flag(a: &Arg) -> bool {
    let Some(t) = a.known() else { return false };
    if let Some(long) = t.strip_prefix("--") {
        let n = long.split('=').next().unwrap_or(long);
        return matches!(
            n,
            "force" | "recursive" | "delete" | "no-preserve-root" | "hard" | "prune" | "mirror"
        ) || n.starts_with("force")
            || n.starts_with("delete")
            || n.starts_with("remove");
    }
    if t == "-delete" {
        return true;
    }
    t.len() > 1
        && t.starts_with('-')
        && t[1..].chars().all(|c| c.is_ascii_alphabetic())
        && t[1..].chars().any(|c| matches!(c, 'r' | 'R' | 'f'))
}

fn basename(s: &str) -> &str {
    s.trim_end_matches('/').rsplit('/').next().unwrap_or(s)
}

/// `python3.12` → `python`, `pip3` → `pip`, `mkfs.ext4` → `mkfs`, `nodejs` → `node`.
fn normalize(name: &str) -> String {
    for base in [
        "python", "pip", "ruby", "perl", "php", "lua", "node", "pypy",
    ] {
        if let Some(rest) = name.strip_prefix(base)
            && rest.chars().all(|c| c.is_ascii_digit() || c == '.')
        {
            return base.to_string();
        }
    }
    if name == "nodejs" {
        return "node".into();
    }
    if name.starts_with("mkfs.") || name.starts_with("mke2fs") {
        return "mkfs".into();
    }
    if name.starts_with("qemu-system-") {
        return "qemu-system".into();
    }
    name.to_string()
}

// ---- program tables ----------------------------------------------------------------------

/// Only read; their operands are paths.
#[rustfmt::skip]
const READ_ONLY: &[&str] = &[
    "ls", "dir", "vdir", "ll", "cat", "tac", "head", "tail", "wc", "stat", "file", "du", "tree",
    "nl", "rev", "fold", "fmt", "column", "paste", "join", "expand", "unexpand", "od", "hexdump",
    "strings", "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum",
    "b3sum", "cksum", "sum", "diff", "diff3", "sdiff", "cmp", "comm", "realpath", "readlink",
    "base32", "base64", "basenc", "zcat", "bzcat", "xzcat", "zstdcat", "lz4cat", "zgrep", "lsattr",
    "getfacl", "namei", "bat", "batcat", "exa", "eza", "lsd", "cut", "tsort", "pr", "look",
    "colordiff", "wdiff", "diffstat", "hexyl", "tokei", "cloc", "scc", "shellcheck", "hadolint",
    "yamllint", "flake8", "pylint", "pyflakes", "pycodestyle", "pydocstyle", "bandit", "codespell",
    "cspell", "markdownlint", "jsonlint", "xmllint", "tidy", "pdftotext", "identify", "exiftool",
    "mediainfo", "ffprobe", "nm", "objdump", "readelf", "ldd", "size", "addr2line", "c++filt",
    "rustfilt", "sqlformat", "bc", "dc", "csvlook", "csvstat", "xsv", "mlr", "lsof", "vmstat",
    "iostat", "mpstat", "pidstat", "ss", "netstat", "printenv", "md5", "shasum", "sha1", "fgrep",
    "egrep",
];

/// Only read, and their operands are text, not paths.
#[rustfmt::skip]
const READ_ONLY_TEXT: &[&str] = &[
    "echo", "printf", "true", "false", ":", "sleep", "seq", "yes", "expr", "basename", "dirname",
    "which", "whereis", "type", "whoami", "id", "groups", "uname", "uptime", "free", "df", "ps",
    "pgrep", "nproc", "lscpu", "lsblk", "lsusb", "lspci", "lsmod", "arch", "tty", "locale",
    "getconf", "pwd", "tr", "factor", "numfmt", "cal", "clear", "tput", "dircolors", "envsubst",
    "gettext", "ngettext", "export", "unset", "set", "shopt", "declare", "typeset", "local",
    "readonly", "shift", "getopts", "wait", "read", "return", "exit", "break", "continue", "let",
    "unalias", "hash", "jobs", "dirs", "times", "umask", "ulimit", "history", "disown", "caller",
    "compgen", "complete", "compopt", "enable", "help", "bind", "logout", "apropos", "whatis",
    "users", "who", "w", "last", "logname", "hostid", "date", "sync", "mapfile", "readarray",
    "journalctl", "stty",
];

/// Change the workspace; their operands are written.
#[rustfmt::skip]
const WRITES: &[&str] = &[
    "touch", "mkdir", "cp", "mv", "ln", "install", "link", "mkfifo", "mknod", "rename", "prename",
    "dos2unix", "unix2dos", "sponge", "setfacl", "ed", "ex", "mktemp", "csplit", "split", "ar",
    "cpio", "zip", "gpg", "age", "convert", "magick", "ffmpeg", "pandoc",
];

/// Build tools, compilers, test runners, formatters: change the workspace and run project
/// code; their operands are read.
#[rustfmt::skip]
const BUILD: &[&str] = &[
    "make", "gmake", "cmake", "ninja", "meson", "bazel", "bazelisk", "buck", "buck2", "scons",
    "gcc", "g++", "cc", "c++", "clang", "clang++", "ld", "lld", "as", "rustc", "javac", "java",
    "kotlinc", "kotlin", "scalac", "scala", "sbt", "mvn", "mvnw", "gradle", "gradlew", "ant",
    "dotnet", "swift", "swiftc", "zig", "ghc", "cabal", "stack", "tsc", "esbuild", "webpack",
    "vite", "rollup", "parcel", "babel", "jest", "vitest", "mocha", "ava", "tap", "playwright",
    "cypress", "pytest", "py.test", "tox", "nox", "coverage", "mypy", "pyright", "ruff", "black",
    "isort", "autopep8", "yapf", "prettier", "eslint", "stylelint", "biome", "rustfmt",
    "clang-format", "clang-tidy", "gofmt", "goimports", "golangci-lint", "protoc", "flatc", "just",
    "task", "mage", "pre-commit", "dune", "elixir", "mix", "erlc", "escript", "rake", "rspec",
    "phpunit", "ctest", "cargo-nextest", "maturin", "wasm-pack", "trunk", "lua", "luajit",
    "Rscript", "julia", "groovy", "swipl", "ocaml", "tclsh", "hugo", "jekyll", "mdbook",
    "sphinx-build", "mkdocs", "doxygen", "latexmk", "pdflatex", "xelatex", "lualatex", "tectonic",
    "typst", "direnv", "autoreconf", "autoconf", "automake", "libtool", "pkg-config", "configure",
    "strip", "objcopy", "patchelf", "jar", "node-gyp",
];

/// Delete or overwrite their operands.
#[rustfmt::skip]
const DESTRUCTIVE: &[&str] = &[
    "unlink", "shred", "srm", "wipe", "wipefs", "mkfs", "mkswap", "fdisk", "sfdisk", "cfdisk",
    "gdisk", "sgdisk", "parted", "blkdiscard", "truncate",
];

/// Talk to the network.
#[rustfmt::skip]
const NETWORKED: &[&str] = &[
    "nc", "ncat", "netcat", "socat", "telnet", "ftp", "tftp", "lftp", "ping", "ping6",
    "traceroute", "tracepath", "mtr", "dig", "nslookup", "host", "whois", "nmap", "http", "https",
    "xh", "httpie", "aria2c", "axel", "gh", "hub", "glab", "aws", "gcloud", "gsutil", "az",
    "kubectl", "helm", "terraform", "tofu", "pulumi", "heroku", "flyctl", "fly", "vercel",
    "netlify", "doctl", "s3cmd", "rclone", "ngrok", "iperf", "iperf3", "youtube-dl", "yt-dlp",
    "sftp", "mosh", "ansible", "ansible-playbook", "vagrant", "packer", "wrangler", "firebase",
    "supabase", "npx", "pnpx", "bunx", "uvx", "pipx", "nix", "nix-shell", "opam", "conda", "mamba",
    "micromamba", "twine", "ollama",
];

/// Need root or act on the host's kernel, services or daemons.
#[rustfmt::skip]
const PRIVILEGED: &[&str] = &[
    "chroot", "mount", "umount", "nsenter", "unshare", "setcap", "capsh", "insmod", "rmmod",
    "modprobe", "sysctl", "iptables", "ip6tables", "nft", "ufw", "firewall-cmd", "service",
    "shutdown", "reboot", "halt", "poweroff", "init", "telinit", "useradd", "userdel", "usermod",
    "groupadd", "groupdel", "groupmod", "passwd", "chpasswd", "chsh", "chfn", "visudo", "vipw",
    "docker", "docker-compose", "podman", "nerdctl", "ctr", "crictl", "lxc", "virsh",
    "qemu-system", "apt", "apt-get", "aptitude", "yum", "dnf", "pacman", "zypper", "apk", "snap",
    "flatpak", "emerge", "swapon", "swapoff", "losetup", "cryptsetup", "dmsetup", "mdadm",
    "hdparm", "setenforce", "launchctl", "hostnamectl", "timedatectl", "localectl", "loginctl",
    "kexec", "efibootmgr", "grub-install", "update-grub", "ldconfig", "depmod", "chattr",
    "systemd-run", "chrt", "route", "ifconfig", "ifup", "ifdown", "iwconfig", "nmcli", "tc",
    "setfattr", "renice", "dmesg", "sudoedit", "pkexec", "run0", "newgrp", "sg", "runuser",
    "fusermount", "fusermount3", "mkinitramfs", "update-initramfs", "dpkg-reconfigure",
];

/// Need a terminal.
#[rustfmt::skip]
const INTERACTIVE: &[&str] = &[
    "vi", "vim", "nvim", "view", "vimdiff", "nano", "pico", "micro", "joe", "mcedit", "ne", "kak",
    "hx", "helix", "less", "more", "most", "pg", "man", "info", "pinfo", "htop", "btop", "atop",
    "iotop", "iftop", "nethogs", "glances", "nmon", "tmux", "screen", "byobu", "mc", "ranger",
    "nnn", "lf", "vifm", "fzf", "sk", "dialog", "whiptail", "ncdu", "tig", "lazygit", "gitui",
    "irb", "pry", "ghci", "iex", "utop", "fc", "zellij", "gdb", "lldb", "cgdb", "visidata", "vd",
    "emacsclient",
];

/// Act on the host outside the workspace.
#[rustfmt::skip]
const HOST_ESCAPE: &[&str] = &[
    "pkill", "killall", "at", "batch", "atrm", "open", "xdg-open", "osascript", "pbcopy",
    "pbpaste", "xclip", "xsel", "wl-copy", "wl-paste", "notify-send", "wall", "write", "logger",
    "gio", "gsettings", "defaults", "xdotool",
];

#[rustfmt::skip]
const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "fish", "tcsh", "csh", "rbash",
];

#[rustfmt::skip]
const INTERPRETERS: &[&str] = &[
    "python", "pypy", "node", "ruby", "perl", "php", "deno", "bun",
];

// ---- classification ----------------------------------------------------------------------

impl Analyzer<'_> {
    /// Classify one simple command given as words (argv requests, wrappers, substitutions).
    pub fn classify_argv(&mut self, args: Vec<Arg>, scope: &mut Scope, stdin: Stdin) {
        if args.is_empty() {
            return;
        }
        if self.depth >= MAX_DEPTH {
            self.hard(
                &[C::Unknown],
                "builtin/too-deep",
                format!(
                    "`{}` nests wrappers and shells too deeply to analyze",
                    snippet(&args)
                ),
                &args[0].raw,
            );
            return;
        }
        let head = &args[0];
        if head.dynamic {
            self.dynamic_command(&args, scope);
            return;
        }
        let word = head.text.clone();
        let mut local = false;
        let name = if word.contains('/') {
            if !SYSTEM_BIN_DIRS.iter().any(|d| word.starts_with(d)) {
                match resolve(&word, &scope.cwd) {
                    Resolved::Inside(_) => local = true,
                    _ => self.path(&word, head, Role::Exec, scope),
                }
            }
            normalize(basename(&word))
        } else {
            normalize(&word)
        };
        self.invoked.push(name.clone());
        let start = self.facts.len();
        self.depth += 1;
        self.program(&name, &args, scope, stdin, local);
        self.depth -= 1;
        self.apply_rules(&name, &args, scope, start);
    }

    fn dynamic_command(&mut self, args: &[Arg], scope: &mut Scope) {
        let head = &args[0];
        if head.networked {
            self.hard(
                &[C::Networked, C::Unknown],
                "builtin/remote-code",
                format!(
                    "the command name `{}` comes from the network and is run",
                    head.raw
                ),
                &head.raw,
            );
        }
        if let Some(f) = args[1..].iter().find(|a| destructive_flag(a)) {
            self.hard(
                &[C::Unknown, C::Destructive],
                "builtin/dynamic-command",
                format!(
                    "the command name `{}` is only known at run time and it is given `{}`",
                    head.raw, f.raw
                ),
                &head.raw,
            );
        } else {
            self.push(
                &[C::Unknown],
                "builtin/dynamic-command",
                format!("the command name `{}` is only known at run time", head.raw),
                Some(&head.raw),
                None,
            );
        }
        self.generic_paths(&head.raw, &args[1..], Role::Read, scope);
    }

    /// Check every operand (and `=` values) of `prog` as paths in `role`.
    pub fn generic_paths(&mut self, prog: &str, args: &[Arg], role: Role, scope: &Scope) {
        let mut after_dd = false;
        for a in args {
            if !after_dd && a.known() == Some("--") {
                after_dd = true;
                continue;
            }
            if !after_dd && a.is_flag() {
                self.eq_value(prog, a, Role::Read, scope);
                continue;
            }
            self.path(prog, a, role, scope);
            if !a.dynamic && a.text.contains('=') {
                self.eq_value(prog, a, role, scope);
            }
        }
    }

    fn paths_of(&mut self, prog: &str, args: &[&Arg], role: Role, scope: &Scope) {
        for a in args {
            self.path(prog, a, role, scope);
        }
    }

    /// Values of unlisted options that look like paths leaving the workspace.
    fn stray_values(&mut self, prog: &str, opts: &Opts, skip: &[&str], scope: &Scope) {
        for v in opts.other_values(skip) {
            if looks_like_path(&v.text) {
                self.path(prog, v, Role::Read, scope);
            }
        }
    }

    fn program(&mut self, name: &str, args: &[Arg], scope: &mut Scope, stdin: Stdin, local: bool) {
        let rest = &args[1..];
        if scope.functions.contains(name) {
            self.push(
                &[C::ReadOnly],
                "builtin/read-only",
                format!("calls shell function `{name}` (classified where it is defined)"),
                None,
                Some(name),
            );
            self.generic_paths(name, rest, Role::Read, scope);
            return;
        }
        match name {
            n if SHELLS.contains(&n) => self.shell_program(n, args, scope, stdin),
            n if INTERPRETERS.contains(&n) => self.interpreter(n, args, scope, stdin),
            "busybox" | "toybox" => {
                if rest.is_empty() {
                    self.read_only(name);
                } else {
                    self.classify_argv(rest.to_vec(), scope, stdin);
                }
            }
            "env" => self.env(args, scope, stdin),
            "sudo" | "doas" => self.sudo(name, args, scope, stdin),
            "su" => self.su(args, scope),
            "nice" | "nohup" | "timeout" | "time" | "stdbuf" | "ionice" | "setsid" | "exec"
            | "command" | "builtin" | "unbuffer" | "taskset" | "strace" | "ltrace" | "flock"
            | "catchsegv" | "faketime" | "fakeroot" | "xvfb-run" | "dbus-run-session"
            | "firejail" | "proxychains" | "proxychains4" | "torsocks" | "caffeinate"
            | "systemd-inhibit" | "valgrind" | "perf" | "hyperfine" | "entr" | "chronic" | "ts"
            | "pv" | "direnv-exec" => self.wrapper(name, args, scope, stdin),
            "watch" => self.watch(args, scope),
            "xargs" | "parallel" => self.xargs(name, args, scope),
            "find" => self.find(args, scope),
            "fd" | "fdfind" => self.fd(name, args, scope),
            "eval" => self.eval(args, scope),
            "source" | "." => self.source(name, args, scope, stdin),
            "trap" => self.trap(args, scope),
            "alias" => self.alias(args, scope),
            "cd" | "pushd" | "chdir" => self.cd(name, args, scope),
            "export" | "declare" | "typeset" | "local" | "readonly" => {
                self.read_only(name);
                for a in rest.iter().filter(|a| !a.is_flag()) {
                    if let Some((k, v)) = a.text.split_once('=')
                        && !k.is_empty()
                        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        let val = a.derived(v);
                        self.env_assignment(k, &val);
                        scope.vars.insert(k.to_string(), val);
                    }
                }
            }
            "unset" => {
                self.read_only(name);
                for a in rest.iter().filter(|a| !a.is_flag()) {
                    scope.vars.remove(&a.text);
                }
            }
            "popd" => {
                scope.cwd = super::words::Cwd::Unknown;
                self.read_only(name);
            }
            "test" | "[" => self.test_cmd(name, rest, scope),
            "kill" => self.kill(args),
            "rm" => self.rm(args, scope),
            "rmdir" => {
                self.cat(
                    C::Mutating,
                    name,
                    format!("`{}` removes empty directories", snippet(args)),
                    None,
                );
                self.generic_paths(name, rest, Role::Delete, scope);
            }
            "dd" => self.dd(args, scope),
            "chmod" | "chown" | "chgrp" => self.chmod(name, args, scope),
            "tee" => self.tee(args, scope),
            "sed" => self.sed(args, scope),
            "awk" | "gawk" | "mawk" | "nawk" => self.awk(name, args, scope),
            "grep" | "rg" | "ag" | "ack" | "ugrep" | "pcregrep" => self.grep(name, args, scope),
            "jq" | "yq" | "gojq" | "jaq" => self.jq(name, args, scope),
            "sort" | "shuf" | "iconv" | "uniq" | "xxd" => {
                self.filter_with_output(name, args, scope)
            }
            "tar" | "bsdtar" | "gtar" => self.tar(args, scope),
            "gzip" | "gunzip" | "bzip2" | "bunzip2" | "xz" | "unxz" | "zstd" | "unzstd" | "lz4"
            | "compress" | "uncompress" | "brotli" | "pigz" => self.compress(name, args, scope),
            "unzip" | "7z" | "7za" | "7zr" | "unrar" => self.unarchive(name, args, scope),
            "patch" => {
                let o = getopt(
                    rest,
                    "iodprBzDFVY",
                    &["input", "output", "directory", "reject-file"],
                    false,
                );
                self.cat(
                    C::Mutating,
                    name,
                    format!("`{}` changes files", snippet(args)),
                    None,
                );
                self.paths_of(name, &o.values(&["-i", "--input"]), Role::Read, scope);
                self.paths_of(
                    name,
                    &o.values(&["-o", "--output", "-r", "--reject-file", "-d", "--directory"]),
                    Role::Write,
                    scope,
                );
                self.paths_of(name, &o.operands(), Role::Write, scope);
            }
            "curl" => self.curl(args, scope),
            "wget" => self.wget(args, scope),
            "ssh" => self.ssh(args, scope, &stdin),
            "scp" | "rsync" => self.copy_remote(name, args, scope),
            "git" => self.git(args, scope),
            "cargo" => self.cargo(args, scope),
            "npm" | "yarn" | "pnpm" => self.node_pm(name, args, scope),
            "pip" | "pip-sync" => self.pip(name, rest, scope),
            "uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye" => self.py_pm(name, args, scope),
            "go" => self.go(args, scope),
            "gem" | "bundle" | "bundler" | "composer" | "brew" | "rustup" | "cabal-install"
            | "dotnet-tool" => self.other_pm(name, args, scope),
            "emacs" => {
                if rest
                    .iter()
                    .any(|a| matches!(a.known(), Some("--batch" | "-batch" | "--script")))
                {
                    self.cat(
                        C::Mutating,
                        name,
                        "`emacs --batch` runs Lisp that can change files".into(),
                        None,
                    );
                } else {
                    self.cat(
                        C::Interactive,
                        name,
                        "`emacs` needs a terminal".into(),
                        Some(name),
                    );
                }
                self.generic_paths(name, rest, Role::Write, scope);
            }
            "top" => {
                if rest
                    .iter()
                    .any(|a| a.known().is_some_and(|t| t.starts_with("-b") || t == "-l"))
                {
                    self.read_only(name);
                } else {
                    self.cat(
                        C::Interactive,
                        name,
                        "`top` needs a terminal (use `top -b -n 1`)".into(),
                        Some(name),
                    );
                }
            }
            "sqlite3" | "sqlite" | "duckdb" => {
                let o = getopt(
                    rest,
                    "",
                    &["cmd", "init", "separator", "newline", "nullvalue"],
                    false,
                );
                let ops = o.operands();
                if ops.len() < 2 && matches!(stdin, Stdin::Inherit) {
                    self.cat(
                        C::Interactive,
                        name,
                        format!("`{name}` without SQL opens an interactive prompt"),
                        Some(name),
                    );
                } else {
                    self.cat(
                        C::Mutating,
                        name,
                        format!("`{name}` runs SQL that can change the database"),
                        None,
                    );
                }
                if let Some(db) = ops.first() {
                    self.path(name, db, Role::Write, scope);
                }
            }
            "psql" | "mysql" | "mariadb" | "redis-cli" | "mongo" | "mongosh" | "cqlsh"
            | "clickhouse-client" | "sqlcmd" => {
                self.cat(
                    C::Networked,
                    name,
                    format!("`{name}` talks to a database server"),
                    Some(name),
                );
                let scripted = rest.iter().any(|a| {
                    a.known().is_some_and(|t| {
                        matches!(
                            t,
                            "-c" | "-e"
                                | "--command"
                                | "--execute"
                                | "--eval"
                                | "-f"
                                | "--file"
                                | "-Q"
                        ) || t.starts_with("--command=")
                            || t.starts_with("--execute=")
                            || t.starts_with("--eval=")
                    })
                });
                if !scripted && matches!(stdin, Stdin::Inherit) {
                    self.cat(
                        C::Interactive,
                        name,
                        format!("`{name}` without a command opens an interactive prompt"),
                        Some(name),
                    );
                }
            }
            "openssl" => {
                let sub = rest.first().and_then(|a| a.known()).unwrap_or("");
                match sub {
                    "s_client" | "s_server" | "s_time" | "ocsp" => {
                        self.cat(
                            C::Networked,
                            name,
                            format!("`openssl {sub}` talks to the network"),
                            Some(name),
                        );
                    }
                    "version" | "help" | "list" | "" => self.read_only(name),
                    _ => self.cat(
                        C::Mutating,
                        name,
                        format!("`openssl {sub}` can write files"),
                        None,
                    ),
                }
                for a in rest {
                    if looks_like_path(&a.text) || a.dynamic {
                        self.path(name, a, Role::Read, scope);
                    }
                }
            }
            "hostname" => {
                if rest.iter().any(|a| !a.is_flag()) {
                    self.cat(
                        C::Privileged,
                        name,
                        "`hostname NAME` changes the host's name".into(),
                        Some(name),
                    );
                } else {
                    self.read_only(name);
                }
            }
            "systemctl" => {
                let sub = subcommand(name, rest).unwrap_or_default();
                if sub.starts_with("list")
                    || sub.starts_with("is-")
                    || matches!(sub.as_str(), "status" | "show" | "cat" | "help")
                {
                    self.read_only(name);
                } else {
                    self.cat(
                        C::Privileged,
                        name,
                        format!("`systemctl {sub}` changes host services"),
                        Some(name),
                    );
                }
            }
            "ip" => {
                let read = rest
                    .iter()
                    .filter(|a| !a.is_flag())
                    .nth(1)
                    .and_then(|a| a.known());
                if rest.len() <= 1 || matches!(read, None | Some("show" | "list" | "ls" | "get")) {
                    self.read_only(name);
                } else {
                    self.cat(
                        C::Privileged,
                        name,
                        format!("`{}` changes the host's network", snippet(args)),
                        Some(name),
                    );
                }
            }
            "dpkg" | "rpm" => {
                let query = rest.iter().any(|a| {
                    a.known().is_some_and(|t| {
                        matches!(
                            t,
                            "-l" | "-L"
                                | "-s"
                                | "-S"
                                | "-q"
                                | "-qa"
                                | "-qi"
                                | "-ql"
                                | "-qf"
                                | "--list"
                                | "--listfiles"
                                | "--status"
                                | "--search"
                                | "--query"
                                | "--print-architecture"
                        )
                    })
                });
                if query {
                    self.read_only(name);
                } else {
                    self.cat(
                        C::Privileged,
                        name,
                        format!("`{name}` installs or removes host packages"),
                        Some(name),
                    );
                }
            }
            "apt-cache" | "apt-file" => self.read_only(name),
            "crontab" => {
                if rest.iter().any(|a| a.known() == Some("-l")) {
                    self.read_only(name);
                } else {
                    self.cat(
                        C::HostEscape,
                        name,
                        "`crontab` schedules commands on the host".into(),
                        Some(name),
                    );
                }
            }
            n if READ_ONLY.contains(&n) => {
                self.read_only(n);
                self.generic_paths(n, rest, Role::Read, scope);
            }
            n if READ_ONLY_TEXT.contains(&n) => {
                self.read_only(n);
                for a in rest {
                    if a.is_flag() {
                        self.eq_value(n, a, Role::Read, scope);
                    }
                }
            }
            n if WRITES.contains(&n) => {
                self.cat(
                    C::Mutating,
                    n,
                    format!("`{}` changes files in the workspace", snippet(args)),
                    None,
                );
                self.generic_paths(n, rest, Role::Write, scope);
            }
            n if BUILD.contains(&n) => self.build_tool(n, args, scope),
            n if DESTRUCTIVE.contains(&n) => {
                self.cat(
                    C::Destructive,
                    n,
                    format!("`{}` destroys data; inside the workspace the checkpoint taken first makes it recoverable", snippet(args)),
                    rest.iter().find(|a| !a.is_flag()).map(|a| a.raw.as_str()),
                );
                self.generic_paths(n, rest, Role::Delete, scope);
            }
            n if NETWORKED.contains(&n) => {
                self.cat(
                    C::Networked,
                    n,
                    format!("`{n}` talks to the network"),
                    Some(n),
                );
                if matches!(
                    n,
                    "npx" | "pnpx" | "bunx" | "uvx" | "pipx" | "nix" | "nix-shell"
                ) {
                    self.cat(
                        C::Mutating,
                        n,
                        format!("`{n}` downloads and runs a package"),
                        None,
                    );
                }
                if matches!(n, "telnet" | "ftp" | "lftp" | "sftp" | "mosh")
                    && matches!(stdin, Stdin::Inherit)
                    && !rest.iter().any(|a| a.known() == Some("-b"))
                {
                    self.cat(
                        C::Interactive,
                        n,
                        format!("`{n}` opens an interactive session"),
                        Some(n),
                    );
                }
                for a in rest {
                    if looks_like_path(&a.text) {
                        self.path(n, a, Role::Read, scope);
                    }
                }
            }
            n if PRIVILEGED.contains(&n) => {
                self.cat(
                    C::Privileged,
                    n,
                    format!("`{n}` needs root or acts on the host's kernel, services or daemons"),
                    Some(n),
                );
                self.generic_paths(n, rest, Role::Read, scope);
            }
            n if INTERACTIVE.contains(&n) => {
                self.cat(
                    C::Interactive,
                    n,
                    format!("`{n}` needs a terminal"),
                    Some(n),
                );
                self.generic_paths(n, rest, Role::Read, scope);
            }
            n if HOST_ESCAPE.contains(&n) => {
                self.cat(
                    C::HostEscape,
                    n,
                    format!("`{}` acts on the host outside the workspace", snippet(args)),
                    Some(n),
                );
            }
            n => {
                let what = if local {
                    format!(
                        "runs `{}` from the workspace; the policy cannot see what it does",
                        args[0].raw
                    )
                } else {
                    format!("`{n}` is not a program the policy knows")
                };
                self.push(
                    &[C::Unknown],
                    "builtin/unknown",
                    what,
                    Some(&args[0].raw),
                    Some(n),
                );
                self.generic_paths(n, rest, Role::Read, scope);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::text::{awk_writes, sed_writes};
    use super::*;

    #[test]
    fn sed_scripts() {
        assert!(!sed_writes("s/a/b/g"));
        assert!(!sed_writes("s/e/x/"));
        assert!(sed_writes("s/a/b/w out.txt"));
        assert!(sed_writes("1e rm -rf /"));
        assert!(sed_writes("s/x/y/e"));
        assert!(sed_writes("/foo/w out"));
        assert!(!sed_writes("/home/d"));
    }

    #[test]
    fn awk_programs() {
        assert!(!awk_writes("{print $1}"));
        assert!(!awk_writes("$3 > 100 {print}"));
        assert!(awk_writes("{print $1 > \"out\"}"));
        assert!(awk_writes("{system(\"rm x\")}"));
    }

    #[test]
    fn getopt_bundles() {
        let args: Vec<Arg> = ["-sSLo", "out", "url", "--data=@f"]
            .iter()
            .map(|s| Arg::literal(s))
            .collect();
        let o = getopt(&args, "o", &["data"], false);
        assert!(o.has(&["-s", "-S", "-L"]));
        assert_eq!(o.values(&["-o"])[0].text, "out");
        assert_eq!(o.values(&["--data"])[0].text, "@f");
        assert_eq!(o.operands()[0].text, "url");
        // Unambiguous prefixes of long options, with = and without.
        let args: Vec<Arg> = ["--use-compress-prog=x", "--to-com", "y", "--r=z"]
            .iter()
            .map(|s| Arg::literal(s))
            .collect();
        let o = getopt(
            &args,
            "",
            &["use-compress-program", "to-command", "record-size", "rsh"],
            false,
        );
        assert_eq!(o.values(&["--use-compress-program"])[0].text, "x");
        assert_eq!(o.values(&["--to-command"])[0].text, "y");
        // Ambiguous: left as written.
        assert_eq!(o.values(&["--r"])[0].text, "z");
    }
}
