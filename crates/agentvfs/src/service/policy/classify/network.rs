//! Network clients: `curl`, `wget`, `ssh`, `scp`, `rsync`.

use super::getopt;
use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Role, Scope, Stdin, snippet};

impl Analyzer<'_> {
    pub(super) fn curl(&mut self, args: &[Arg], scope: &mut Scope) {
        let o = getopt(
            &args[1..],
            "oTdFKEbcDeHXAuxmwrCtYyzQPUhiz",
            &[
                "output",
                "upload-file",
                "data",
                "data-binary",
                "data-ascii",
                "data-raw",
                "data-urlencode",
                "json",
                "form",
                "form-string",
                "config",
                "cert",
                "key",
                "cacert",
                "capath",
                "cookie",
                "cookie-jar",
                "dump-header",
                "header",
                "request",
                "user-agent",
                "user",
                "proxy",
                "max-time",
                "write-out",
                "range",
                "continue-at",
                "url",
                "output-dir",
                "trace",
                "trace-ascii",
                "stderr",
                "netrc-file",
                "resolve",
                "connect-to",
                "retry",
                "connect-timeout",
                "referer",
                "oauth2-bearer",
                "interface",
                "limit-rate",
                "max-filesize",
                "proxy-user",
                "unix-socket",
                "abstract-unix-socket",
                "etag-save",
                "etag-compare",
                "hsts",
                "alt-svc",
                "libcurl",
                "krb",
                "pinnedpubkey",
                "quote",
                "telnet-option",
                "time-cond",
                "variable",
                "expand-url",
                "aws-sigv4",
            ],
            false,
        );
        self.cat(
            C::Networked,
            "curl",
            format!("`{}` talks to the network", snippet(args)),
            Some("curl"),
        );
        let outs = o.values(&[
            "-o",
            "--output",
            "--output-dir",
            "-D",
            "--dump-header",
            "-c",
            "--cookie-jar",
            "--trace",
            "--trace-ascii",
            "--stderr",
            "--etag-save",
            "--libcurl",
            "--hsts",
            "--alt-svc",
        ]);
        let outs: Vec<&Arg> = outs.into_iter().filter(|a| a.text != "-").collect();
        if !outs.is_empty() || o.has(&["-O", "--remote-name", "--remote-name-all", "-J"]) {
            self.cat(
                C::Mutating,
                "curl",
                "`curl` saves what it downloads to a file".into(),
                None,
            );
        }
        self.paths_of("curl", &outs, Role::Write, scope);
        self.paths_of(
            "curl",
            &o.values(&[
                "-T",
                "--upload-file",
                "-K",
                "--config",
                "-E",
                "--cert",
                "--key",
                "--cacert",
                "--capath",
                "--netrc-file",
                "--unix-socket",
                "--etag-compare",
                "-z",
                "--time-cond",
            ]),
            Role::Read,
            scope,
        );
        for v in o.values(&[
            "-d",
            "--data",
            "--data-binary",
            "--data-ascii",
            "--data-urlencode",
            "--json",
            "-F",
            "--form",
            "-b",
            "--cookie",
        ]) {
            let t = v.text.as_str();
            let file = t
                .strip_prefix('@')
                .or_else(|| t.split_once("=@").map(|x| x.1))
                .or_else(|| t.split_once("=<").map(|x| x.1))
                .map(|f| f.split(';').next().unwrap_or(f));
            if let Some(f) = file
                && f != "-"
            {
                let d = Arg {
                    raw: v.raw.clone(),
                    ..v.derived(f)
                };
                self.path("curl", &d, Role::Read, scope);
            }
        }
        for a in o.operands().into_iter().chain(o.values(&["--url"])) {
            if a.text.starts_with("file://") {
                self.path("curl", a, Role::Read, scope);
            }
        }
    }

    pub(super) fn wget(&mut self, args: &[Arg], scope: &mut Scope) {
        let o = getopt(
            &args[1..],
            "OPoaieUtTwlARDBQ",
            &[
                "output-document",
                "directory-prefix",
                "output-file",
                "append-output",
                "input-file",
                "execute",
                "user-agent",
                "tries",
                "timeout",
                "wait",
                "level",
                "accept",
                "reject",
                "domains",
                "base",
                "quota",
                "post-data",
                "post-file",
                "body-data",
                "body-file",
                "header",
                "user",
                "password",
                "load-cookies",
                "save-cookies",
                "ca-certificate",
                "certificate",
                "private-key",
                "limit-rate",
                "method",
                "referer",
            ],
            false,
        );
        self.cat(
            C::Networked,
            "wget",
            format!("`{}` talks to the network", snippet(args)),
            Some("wget"),
        );
        let doc = o.values(&["-O", "--output-document"]);
        let to_stdout = doc.iter().any(|d| d.text == "-");
        if !to_stdout && !o.has(&["--spider"]) {
            self.cat(
                C::Mutating,
                "wget",
                "`wget` saves what it downloads to a file".into(),
                None,
            );
        }
        let outs: Vec<&Arg> = doc
            .into_iter()
            .filter(|d| d.text != "-")
            .chain(o.values(&[
                "-P",
                "--directory-prefix",
                "-o",
                "--output-file",
                "-a",
                "--append-output",
                "--save-cookies",
            ]))
            .collect();
        self.paths_of("wget", &outs, Role::Write, scope);
        self.paths_of(
            "wget",
            &o.values(&[
                "-i",
                "--input-file",
                "--post-file",
                "--body-file",
                "--load-cookies",
                "--ca-certificate",
                "--certificate",
                "--private-key",
            ]),
            Role::Read,
            scope,
        );
    }

    pub(super) fn ssh(&mut self, args: &[Arg], scope: &mut Scope, stdin: &Stdin) {
        let o = getopt(&args[1..], "bcDEeFIiJLlmOoPpQRSWw", &[], true);
        self.cat(
            C::Networked,
            "ssh",
            format!("`{}` connects to another host", snippet(args)),
            Some("ssh"),
        );
        self.paths_of("ssh", &o.values(&["-i", "-F", "-S"]), Role::Read, scope);
        self.paths_of("ssh", &o.values(&["-E"]), Role::Write, scope);
        let ops = o.operands();
        if ops.len() <= 1 && !o.has(&["-N", "-V", "-G", "-Q"]) && matches!(stdin, Stdin::Inherit) {
            self.cat(
                C::Interactive,
                "ssh",
                "`ssh` without a remote command opens an interactive session".into(),
                Some("ssh"),
            );
        }
    }

    pub(super) fn copy_remote(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let o = if name == "scp" {
            getopt(rest, "cFiJloPSDX", &[], false)
        } else {
            getopt(
                rest,
                "eBfTM",
                &[
                    "rsh",
                    "exclude",
                    "include",
                    "exclude-from",
                    "include-from",
                    "files-from",
                    "filter",
                    "log-file",
                    "password-file",
                    "block-size",
                    "bwlimit",
                    "chmod",
                    "chown",
                    "backup-dir",
                    "partial-dir",
                    "temp-dir",
                    "compare-dest",
                    "link-dest",
                    "copy-dest",
                    "max-size",
                    "min-size",
                    "timeout",
                    "port",
                    "remote-option",
                    "info",
                    "debug",
                    "out-format",
                    "iconv",
                    "suffix",
                    "rsync-path",
                    "usermap",
                    "groupmap",
                    "contimeout",
                    "sockopts",
                    "max-delete",
                    "modify-window",
                    "checksum-choice",
                    "compress-choice",
                    "skip-compress",
                    "outbuf",
                    "stop-after",
                    "stop-at",
                    "write-batch",
                    "read-batch",
                    "only-write-batch",
                    "address",
                    "protocol",
                    "log-file-format",
                    "sparse-block",
                    "preallocate",
                ],
                false,
            )
        };
        let ops = o.operands();
        let remote = |a: &Arg| {
            let t = a.text.as_str();
            t.starts_with("rsync://")
                || t.split_once(':')
                    .is_some_and(|(h, _)| !h.is_empty() && !h.contains('/'))
        };
        let any_remote = name == "scp" || ops.iter().any(|a| remote(a));
        if any_remote {
            self.cat(
                C::Networked,
                name,
                format!("`{}` copies to or from another host", snippet(args)),
                Some(name),
            );
        }
        self.cat(
            C::Mutating,
            name,
            format!("`{}` writes files", snippet(args)),
            None,
        );
        if o.has(&[
            "--delete",
            "--delete-before",
            "--delete-during",
            "--delete-after",
            "--delete-delay",
            "--delete-excluded",
            "--del",
            "--remove-source-files",
        ]) {
            self.cat(
                C::Destructive,
                name,
                format!("`{name} --delete` deletes files at the destination"),
                Some("--delete"),
            );
        }
        self.paths_of(
            name,
            &o.values(&[
                "-i",
                "-F",
                "--exclude-from",
                "--include-from",
                "--files-from",
                "--password-file",
                "--compare-dest",
                "--link-dest",
                "--copy-dest",
                "--read-batch",
            ]),
            Role::Read,
            scope,
        );
        self.paths_of(
            name,
            &o.values(&[
                "--log-file",
                "--backup-dir",
                "--partial-dir",
                "--temp-dir",
                "-T",
                "--write-batch",
                "--only-write-batch",
            ]),
            Role::Write,
            scope,
        );
        let n = ops.len();
        for (k, a) in ops.iter().enumerate() {
            if remote(a) {
                continue;
            }
            let role = if k + 1 == n && n > 1 {
                Role::Write
            } else {
                Role::Read
            };
            self.path(name, a, role, scope);
        }
    }
}
