//! The materialized tree cache, the default lower layer of an overlay run: after every
//! kind of change a command can make, the tree a command reads must show exactly what a
//! FUSE view of the same root shows; a tree is updated from the fork's previous one, not
//! rewritten, and a command's new files are moved into it from its layer; secrets never reach the host disk; a tree in use is never changed or
//! evicted; what a crashed build left is removed; and without /dev/fuse the overlay still
//! runs. Real binary, real overlay mounts, real `sh` and `python3`.

mod common;

use common::mount::{ProxyEnv, avfs_json, ok};
use serde_json::Value;

/// Lists every entry of the workspace with its type, mode, owner, size, mtime, link
/// target, extended attributes and a digest of its content (sorted, one per line).
const PROBE: &str = r#"import os, hashlib, stat
out = []
for top, dirs, files in os.walk(".", followlinks=False):
    dirs.sort()
    for name in [top] + [os.path.join(top, n) for n in sorted(dirs + files)]:
        if name == top and top != ".":
            continue
        st = os.lstat(name)
        kind = stat.S_IFMT(st.st_mode)
        line = [name, oct(st.st_mode), str(st.st_uid), str(st.st_gid), str(st.st_mtime_ns)]
        try:
            if stat.S_ISREG(kind):
                line += [str(st.st_size), hashlib.sha256(open(name, "rb").read()).hexdigest()[:16]]
            if stat.S_ISLNK(kind):
                line.append("-> " + os.readlink(name))
            else:
                line += sorted(f"{k}={os.getxattr(name, k)!r}" for k in os.listxattr(name))
        except OSError as e:
            line.append(os.strerror(e.errno))
        out.append(" ".join(line))
print("\n".join(sorted(set(out))))
"#;

fn env() -> Option<ProxyEnv> {
    if !common::skip::require_sandbox() || !common::skip::require_root() {
        return None;
    }
    let e = ProxyEnv::new()?;
    ok(e.avfs(&["write", "/probe.py", PROBE]));
    Some(e)
}

/// `proxy exec` with `args`; the envelope's data, which must have run in an overlay.
fn exec(e: &ProxyEnv, args: &[&str]) -> Value {
    let mut full = vec![
        "proxy",
        "exec",
        "--checkpoint",
        "never",
        "--mode",
        "overlay",
    ];
    full.extend_from_slice(args);
    let (v, code) = avfs_json(e.home.path(), &full);
    assert_eq!(code, 0, "{full:?}: {v}");
    let d = v["data"].clone();
    assert_eq!(d["mode"], "overlay", "{d}");
    d
}

/// What the probe sees, read-only, on a lower layer of `lower`; and how the layer was had.
fn probe(e: &ProxyEnv, lower: &str) -> (String, String) {
    let d = exec(
        e,
        &["--readonly", "--lower", lower, "--", "python3", "probe.py"],
    );
    assert_eq!(d["exit_code"], 0, "{d}");
    (
        d["stdout"]["text"].as_str().unwrap().to_string(),
        d["sandbox"]["lower"].as_str().unwrap().to_string(),
    )
}

fn trees(e: &ProxyEnv) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(e.home.path().join("trees"))
        .map(|rd| {
            rd.flatten()
                .map(|d| d.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.ends_with(".lock") && !n.ends_with(".json"))
                .filter(|n| !n.starts_with(".last-"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn after_every_kind_of_change_the_tree_shows_what_a_fuse_view_shows() {
    let Some(e) = env() else { return };
    // Secrets, which a tree leaves out and the sandbox lists unreadable over it.
    ok(e.avfs(&["write", "/.env", "TOKEN=1\n"]));
    ok(e.avfs(&["mkdir", "/.ssh"]));
    ok(e.avfs(&["write", "/.ssh/id_ed25519", "key"]));
    // (the change, whether the next tree may be updated from the previous one)
    let steps: &[(&str, bool)] = &[
        (
            "echo a > a; mkdir -p d/e; echo b > d/e/b; ln -s a l; mkfifo p; echo k > keep",
            true,
        ),
        ("chmod 600 a; touch -d 2001-01-01 d/e/b", true),
        ("rm -r d; mkdir d; echo f > d/f", true),
        ("rm a; mkdir a; echo in > a/x", true),
        ("rm -r a; echo file > a", true),
        ("ln -sfn d l", true),
        (
            "python3 -c \"import os; os.setxattr('a', 'user.k', b'v')\"",
            true,
        ),
        ("chmod 700 d; touch -d 2002-02-02 d", true),
        ("mv d dd; mkdir -p x/y/z", true),
        ("truncate -s 1M sparse; echo tail >> sparse", true),
        (
            "python3 -c \"import os; os.setxattr('dd', 'user.d', b'w')\"",
            false,
        ),
        // A hard-linked file that comes or goes whole is an update; one that changes
        // (its body, or its number of names) is a whole write.
        ("ln keep hard", true),
        ("echo more >> hard", false),
        ("ln hard hard2", false),
        ("rm hard hard2; echo plain > keep2", false),
        ("mkdir -p t/a t/b; echo x > t/a/x; ln t/a/x t/b/y", true),
        ("rm -r t", true),
        ("rm -r dd x; rm l p", true),
        ("mkdir -p conf/deep; echo c > conf/deep/c", true),
        // The next secret comes from outside the sandbox, below.
        ("echo settings > conf/settings", true),
        // Refused at ingest: the fork keeps its secret, and the root does not change.
        ("rm .env", false),
    ];
    let (mut updated, mut written) = (0, 0);
    for (i, (change, may_update)) in steps.iter().enumerate() {
        let d = exec(&e, &["--lower", "tree", "--shell", change]);
        assert_eq!(d["exit_code"], 0, "step {i} `{change}`: {d}");
        if change.starts_with("mkdir -p conf") {
            ok(e.avfs(&["write", "/conf/deep/.env", "TOKEN=2\n"]));
        }
        let (tree, how) = probe(&e, "tree");
        let (fuse, fuse_how) = probe(&e, "fuse");
        assert_eq!(fuse_how, "fuse");
        assert_eq!(tree, fuse, "step {i} `{change}`: the tree differs");
        written += usize::from(how == "tree (written)");
        // The command's own end moved the tree on, taking its files from its layer;
        // a write from outside a command is taken in by the next lease, from the vault.
        if *may_update {
            let outside = change.starts_with("mkdir -p conf");
            let expect = if outside { "updated" } else { "cached" };
            assert_eq!(how, format!("tree ({expect})"), "step {i} `{change}`");
            updated += 1;
        }
        // The command that changes the fork next starts on the tree just made.
        assert_eq!(
            exec(&e, &["--lower", "tree", "--", "true"])["sandbox"]["lower"],
            "tree (cached)"
        );
    }
    assert!(updated >= 15, "{updated}");
    // The fork's previous trees were taken over, not kept beside the new one; a tree
    // that could not be updated (rather than found unfit half way) stays for its root.
    let kept = trees(&e).len();
    assert!(
        (1..=1 + written).contains(&kept),
        "{kept} trees, {written} written whole"
    );
}

#[test]
fn secrets_never_reach_the_tree_on_disk() {
    let Some(e) = env() else { return };
    let canary = format!("canary-{}", std::process::id());
    ok(e.avfs(&["write", "/.env", &format!("TOKEN={canary}\n")]));
    ok(e.avfs(&["mkdir", "/.ssh"]));
    ok(e.avfs(&["write", "/.ssh/id_ed25519", &canary]));
    ok(e.avfs(&["write", "/open.txt", "readable\n"]));
    let d = exec(
        &e,
        &[
            "--shell",
            "cat open.txt; cat .env .ssh/id_ed25519 2>/dev/null || echo refused",
        ],
    );
    assert_eq!(d["stdout"]["text"], "readable\nrefused\n", "{d}");
    assert!(d["sandbox"]["lower"].as_str().unwrap().starts_with("tree"));
    let found = std::process::Command::new("grep")
        .args(["-r", "-l", &canary])
        .arg(e.home.path().join("trees"))
        .output()
        .unwrap();
    assert!(
        found.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&found.stdout)
    );
    // The fork keeps them.
    assert!(ok(e.avfs(&["cat", "/.env"])).contains(&canary));
}

#[test]
fn a_tree_in_use_is_not_taken_over_and_the_cache_keeps_its_budget() {
    let Some(e) = env() else { return };
    ok(e.avfs(&["write", "/base.txt", "base\n"]));
    let policy = e.home.path().join("small.toml");
    std::fs::write(&policy, "[sandbox]\ntree_cache_mb = 0\n").unwrap();
    let policy = policy.to_str().unwrap().to_string();
    // Two commands at once on the same tree, each making its own file.
    let spawn = |n: u32| {
        common::mount::avfs_command(e.home.path())
            .args([
                "--json",
                "proxy",
                "exec",
                "--checkpoint",
                "never",
                "--policy",
                &policy,
                "--shell",
            ])
            .arg(format!("cat base.txt; sleep 1; echo {n} > made{n}.txt"))
            .output()
            .unwrap()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| spawn(1));
        let b = s.spawn(|| spawn(2));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (n, out) in [(1, a), (2, b)] {
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let d = &v["data"];
        assert_eq!(d["exit_code"], 0, "{v}");
        assert_eq!(d["stdout"]["text"], "base\n", "{v}");
        let changes: Vec<&str> = d["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["path"].as_str().unwrap())
            .collect();
        assert_eq!(changes, [format!("/made{n}.txt")], "{v}");
    }
    // The next command sees both, on a tree of its own; with no budget, the trees nobody
    // uses any more are gone.
    let (v, code) = avfs_json(
        e.home.path(),
        &[
            "proxy",
            "exec",
            "--policy",
            &policy,
            "--readonly",
            "--",
            "cat",
            "made1.txt",
            "made2.txt",
        ],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["stdout"]["text"], "1\n2\n", "{v}");
    assert_eq!(trees(&e).len(), 1, "{:?}", trees(&e));
}

#[test]
fn what_a_crashed_build_left_is_removed() {
    let Some(e) = env() else { return };
    ok(e.avfs(&["write", "/f", "x"]));
    exec(&e, &["--", "true"]);
    let dir = e.home.path().join("trees");
    // A build by a process that no longer runs, and an eviction cut short.
    for left in [".build-999999999-1-2", ".build-999999999-3-4-gone"] {
        std::fs::create_dir_all(dir.join(left).join("sub")).unwrap();
        std::fs::write(dir.join(left).join("sub/file"), "x").unwrap();
    }
    exec(&e, &["--", "true"]);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with(".build-") || n.starts_with(".gone-")),
        "{names:?}"
    );
}

#[test]
fn without_dev_fuse_auto_runs_an_overlay_on_a_tree() {
    let Some(e) = env() else { return };
    if !common::skip::require_tool("unshare") {
        return;
    }
    ok(e.avfs(&["write", "/f", "from the fork\n"]));
    // A /dev without `fuse`, as in a container, for avfs and everything it starts.
    let script = r#"set -e
d=$(mktemp -d)
for n in null zero full random urandom tty; do touch $d/$n; mount --bind /dev/$n $d/$n; done
mount --rbind $d /dev
test ! -e /dev/fuse
"$AVFS" --json proxy exec --checkpoint never --shell 'cat f; echo new > g' > "$OUT1"
"$AVFS" --json proxy exec --checkpoint never --lower fuse -- true > "$OUT2"
"#;
    let out1 = e.home.path().join("out1.json");
    let out2 = e.home.path().join("out2.json");
    let status = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .env("AVFS", common::BIN)
        .env("AVFS_HOME", e.home.path())
        .env("AVFS_ACTOR", "test")
        .env("OUT1", &out1)
        .env("OUT2", &out2)
        .status()
        .unwrap();
    assert!(status.success());
    let v: Value = serde_json::from_slice(&std::fs::read(&out1).unwrap()).unwrap();
    let d = &v["data"];
    assert_eq!(d["mode"], "overlay", "{v}");
    assert_eq!(d["sandbox"]["kind"], "namespace", "{v}");
    assert!(d["sandbox"]["lower"].as_str().unwrap().starts_with("tree"));
    assert_eq!(d["stdout"]["text"], "from the fork\n", "{v}");
    assert_eq!(d["changes"][0]["path"], "/g", "{v}");
    // Asked for a FUSE lower, auto falls back to a copy.
    let v: Value = serde_json::from_slice(&std::fs::read(&out2).unwrap()).unwrap();
    assert_eq!(v["data"]["mode"], "copy", "{v}");
}

#[test]
fn a_bad_lower_in_the_policy_or_on_the_command_line_is_a_typed_error() {
    let Some(e) = env() else { return };
    let policy = e.home.path().join("bad.toml");
    for bad in [
        "[sandbox]\nlower = \"disk\"\n",
        "[sandbox]\ntree_cache_mb = -1\n",
    ] {
        std::fs::write(&policy, bad).unwrap();
        let (v, code) = avfs_json(
            e.home.path(),
            &[
                "proxy",
                "exec",
                "--policy",
                policy.to_str().unwrap(),
                "--",
                "true",
            ],
        );
        assert_ne!(code, 0, "{v}");
        assert_eq!(v["ok"], false, "{v}");
        assert!(v["error"]["kind"].is_string(), "{v}");
    }
    let (v, code) = avfs_json(
        e.home.path(),
        &["proxy", "exec", "--lower", "disk", "--", "true"],
    );
    assert_ne!(code, 0, "{v}");
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(trees(&e), Vec::<String>::new());
}

#[test]
fn hard_linked_files_in_subdirectories_stay_true_in_the_tree() {
    // Regression: a hard-linked file's body lives apart from its names, so a change to it
    // left the directories holding its names unchanged; the updated tree showed the old
    // content, and a write through the other name then lost the fork's new content.
    let Some(e) = env() else { return };
    ok(e.avfs(&["mkdir", "/c"]));
    ok(e.avfs(&["mkdir", "/d"]));
    ok(e.avfs(&["write", "/c/f", "one"]));
    ok(e.avfs(&["ln", "/c/f", "/d/g"]));
    exec(&e, &["--", "true"]);
    ok(e.avfs(&["write", "/c/f", "TWO-fresh"]));
    assert_eq!(probe(&e, "tree").0, probe(&e, "fuse").0);
    let d = exec(&e, &["--shell", "echo appended >> d/g"]);
    assert_eq!(d["exit_code"], 0, "{d}");
    assert_eq!(ok(e.avfs(&["cat", "/c/f"])), "TWO-freshappended\n");
    assert_eq!(probe(&e, "tree").0, probe(&e, "fuse").0);
}

#[test]
fn a_new_name_for_a_linked_file_keeps_every_name_on_one_file() {
    // Regression: the command's new name (`a`, sorting before `h2`) was taken in first as a
    // new file, and `h2` was then linked to it, leaving `h1` alone with the old content.
    for lower in ["tree", "fuse"] {
        let Some(e) = env() else { return };
        ok(e.avfs(&["write", "/h1", "shared\n"]));
        ok(e.avfs(&["ln", "/h1", "/h2"]));
        let d = exec(
            &e,
            &["--lower", lower, "--shell", "ln h2 a && echo more >> h2"],
        );
        assert_eq!(d["exit_code"], 0, "{d}");
        for name in ["/a", "/h1", "/h2"] {
            assert_eq!(
                ok(e.avfs(&["cat", name])),
                "shared\nmore\n",
                "{lower} {name}"
            );
        }
        // Still one file: a write through any name shows in the others.
        ok(e.avfs(&["write", "/h1", "one\n"]));
        assert_eq!(ok(e.avfs(&["cat", "/a"])), "one\n", "{lower}");
        assert_eq!(probe(&e, "tree").0, probe(&e, "fuse").0);
    }
}

#[test]
fn a_name_relinked_to_another_file_leaves_its_old_partner_alone() {
    // Regression: b1 and b2 one file, g1 and g2 another. `ln -f g1 b1` makes b1 a name of
    // g1's file; the ingest wrote g1's content through b1's old link into b2.
    for script in ["ln -f g1 b1", "ln -f g1 b1 && ln g1 a"] {
        let Some(e) = env() else { return };
        ok(e.avfs(&["write", "/b1", "B"]));
        ok(e.avfs(&["ln", "/b1", "/b2"]));
        ok(e.avfs(&["write", "/g1", "G"]));
        ok(e.avfs(&["ln", "/g1", "/g2"]));
        let d = exec(&e, &["--shell", script]);
        assert_eq!(d["exit_code"], 0, "{d}");
        assert_eq!(
            ok(e.avfs(&["cat", "/b2"])),
            "B",
            "{script}: b2 was overwritten"
        );
        for name in ["/b1", "/g1", "/g2"] {
            assert_eq!(ok(e.avfs(&["cat", name])), "G", "{script} {name}");
        }
    }
}

#[test]
fn a_name_made_secret_by_a_rename_is_not_readable_through_its_hard_link() {
    // Regression: after `mv /b /.ssh`, the other name of a file hard-linked into the new
    // secret directory stayed readable in the updated tree.
    let Some(e) = env() else { return };
    ok(e.avfs(&["mkdir", "/a"]));
    ok(e.avfs(&["mkdir", "/b"]));
    ok(e.avfs(&["write", "/b/y", "v1"]));
    ok(e.avfs(&["ln", "/b/y", "/a/x"]));
    exec(&e, &["--", "true"]);
    ok(e.avfs(&["mv", "/b", "/.ssh"]));
    let read = "cat a/x 2>/dev/null || echo refused";
    for lower in ["tree", "fuse"] {
        let d = exec(&e, &["--lower", lower, "--shell", read]);
        assert_eq!(d["stdout"]["text"], "refused\n", "{lower}: {d}");
    }
}

#[test]
fn set_id_bits_reach_the_tree_and_a_touch_keeps_them() {
    // Regression: the tree's files were chowned after their mode was set, which clears
    // set-user-ID and set-group-ID; a `touch` then copied the stripped mode up and into
    // the fork.
    let Some(e) = env() else { return };
    ok(e.avfs(&["write", "/su.sh", "echo\n"]));
    ok(e.avfs(&["chmod", "4755", "/su.sh"]));
    ok(e.avfs(&["write", "/sg.sh", "echo\n"]));
    ok(e.avfs(&["chmod", "2750", "/sg.sh"]));
    for lower in ["tree", "fuse"] {
        let d = exec(
            &e,
            &[
                "--readonly",
                "--lower",
                lower,
                "--",
                "stat",
                "-c",
                "%a",
                "su.sh",
                "sg.sh",
            ],
        );
        assert_eq!(d["stdout"]["text"], "4755\n2750\n", "{lower}: {d}");
    }
    let d = exec(&e, &["--shell", "touch su.sh"]);
    let changes = d["changes"].as_array().unwrap();
    assert!(changes.iter().all(|c| c["mode_changed"] == false), "{d}");
    let (v, _) = avfs_json(e.home.path(), &["stat", "/su.sh"]);
    assert_eq!(v["data"]["mode_string"], "-rwsr-xr-x", "{v}");
}

#[test]
fn a_commands_new_files_move_into_the_next_tree_and_keep_no_overlay_bookkeeping() {
    let Some(e) = env() else { return };
    // A file the overlay copies up (it carries the overlay's `origin` bookkeeping, and
    // keeps showing its lower inode) and new ones, which report their inode in the upper
    // layer (every layer is on one file system).
    ok(e.avfs(&["write", "/old", "old\n"]));
    let made = exec(&e, &["--lower", "tree", "--", "true"]);
    assert_eq!(made["sandbox"]["lower"], "tree (written)", "{made}");
    let write = "head -c 3000000 /dev/urandom > big; mkdir -p d/e; echo x > d/e/small; \
                 echo more >> old; stat -c %i big d/e/small";
    let d = exec(&e, &["--lower", "tree", "--shell", write]);
    assert_eq!(d["exit_code"], 0, "{d}");
    let inodes = d["stdout"]["text"].as_str().unwrap().to_string();
    let d = exec(
        &e,
        &[
            "--readonly",
            "--lower",
            "tree",
            "--",
            "stat",
            "-c",
            "%i",
            "big",
            "d/e/small",
        ],
    );
    assert_eq!(d["sandbox"]["lower"], "tree (cached)", "{d}");
    assert_eq!(d["stdout"]["text"], inodes, "the files were written again");
    // On disk, the tree's files hold none of the overlay's attributes.
    let tree = e.home.path().join("trees").join(&trees(&e)[0]);
    for name in ["big", "d/e/small", "old", "d", "d/e"] {
        let listed = std::process::Command::new("python3")
            .args([
                "-c",
                "import os,sys; print(os.listxattr(sys.argv[1], follow_symlinks=False))",
            ])
            .arg(tree.join(name))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&listed.stdout);
        assert!(
            listed.status.success() && !text.contains("overlay"),
            "{name}: {text}"
        );
    }
    // And the tree reads what a FUSE view of the root reads.
    assert_eq!(probe(&e, "tree").0, probe(&e, "fuse").0);
}

/// The inode flags of a host file at `path` (FS_IOC_GETFLAGS).
fn inode_flags(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import array, fcntl, os, sys\n\
             fd = os.open(sys.argv[1], os.O_RDONLY)\n\
             b = array.array('l', [0]); fcntl.ioctl(fd, 0x80086601, b); print(b[0])",
        ])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn inode_flags_the_vault_does_not_keep_stay_out_of_the_tree() {
    let Some(e) = env() else { return };
    exec(&e, &["--lower", "tree", "--", "true"]);
    // FS_NODUMP_FL, set by the command on a file it wrote.
    let set = "echo x > f; python3 -c \"import array, fcntl, os\n\
               fd = os.open('f', os.O_RDONLY); b = array.array('l', [0])\n\
               fcntl.ioctl(fd, 0x80086601, b); b[0] |= 0x40; fcntl.ioctl(fd, 0x40086602, b)\"; \
               echo y > g";
    let d = exec(&e, &["--lower", "tree", "--shell", set]);
    assert_eq!(d["exit_code"], 0, "setting the nodump flag: {d}");
    let d = exec(
        &e,
        &["--readonly", "--lower", "tree", "--", "cat", "f", "g"],
    );
    assert_eq!(d["sandbox"]["lower"], "tree (cached)", "{d}");
    assert_eq!(d["stdout"]["text"], "x\ny\n");
    let tree = e.home.path().join("trees").join(&trees(&e)[0]);
    assert_eq!(
        inode_flags(&tree.join("f")) & 0x40,
        0,
        "the flag reached the tree"
    );
}
