//! The built-in program tables: which programs only read, write, build, destroy, reach the
//! network, need privileges, are interactive, escape to the host, or are shells and
//! interpreters.

/// Only read; their operands are paths.
#[rustfmt::skip]
pub(super) const READ_ONLY: &[&str] = &[
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
pub(super) const READ_ONLY_TEXT: &[&str] = &[
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
pub(super) const WRITES: &[&str] = &[
    "touch", "mkdir", "cp", "mv", "ln", "install", "link", "mkfifo", "mknod", "rename", "prename",
    "dos2unix", "unix2dos", "sponge", "setfacl", "ed", "ex", "mktemp", "csplit", "split", "ar",
    "cpio", "zip", "gpg", "age", "convert", "magick", "ffmpeg", "pandoc",
];

/// Build tools, compilers, test runners, formatters: change the workspace and run project
/// code; their operands are read.
#[rustfmt::skip]
pub(super) const BUILD: &[&str] = &[
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
pub(super) const DESTRUCTIVE: &[&str] = &[
    "unlink", "shred", "srm", "wipe", "wipefs", "mkfs", "mkswap", "fdisk", "sfdisk", "cfdisk",
    "gdisk", "sgdisk", "parted", "blkdiscard", "truncate",
];

/// Talk to the network.
#[rustfmt::skip]
pub(super) const NETWORKED: &[&str] = &[
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
pub(super) const PRIVILEGED: &[&str] = &[
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
pub(super) const INTERACTIVE: &[&str] = &[
    "vi", "vim", "nvim", "view", "vimdiff", "nano", "pico", "micro", "joe", "mcedit", "ne", "kak",
    "hx", "helix", "less", "more", "most", "pg", "man", "info", "pinfo", "htop", "btop", "atop",
    "iotop", "iftop", "nethogs", "glances", "nmon", "tmux", "screen", "byobu", "mc", "ranger",
    "nnn", "lf", "vifm", "fzf", "sk", "dialog", "whiptail", "ncdu", "tig", "lazygit", "gitui",
    "irb", "pry", "ghci", "iex", "utop", "fc", "zellij", "gdb", "lldb", "cgdb", "visidata", "vd",
    "emacsclient",
];

/// Act on the host outside the workspace.
#[rustfmt::skip]
pub(super) const HOST_ESCAPE: &[&str] = &[
    "pkill", "killall", "at", "batch", "atrm", "open", "xdg-open", "osascript", "pbcopy",
    "pbpaste", "xclip", "xsel", "wl-copy", "wl-paste", "notify-send", "wall", "write", "logger",
    "gio", "gsettings", "defaults", "xdotool",
];

#[rustfmt::skip]
pub(super) const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "fish", "tcsh", "csh", "rbash",
];

#[rustfmt::skip]
pub(super) const INTERPRETERS: &[&str] = &[
    "python", "pypy", "node", "ruby", "perl", "php", "deno", "bun",
];
