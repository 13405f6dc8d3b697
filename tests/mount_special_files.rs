//! Hard links, device nodes, sockets and FIFOs on a real FUSE mount: links made in the
//! mount are kept in the vault, every kind of file and link survives, and `apply` and
//! `export` carry special files to the host without opening a host device.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::mount::Mounted;

/// `ln` in the mount makes a real hard link in the vault: after unmounting, the CLI shows
/// two names of one file, and a new mount gives both names one inode again.
#[test]
fn hard_links_made_in_the_mount_are_kept_in_the_vault() {
    let Some(m) = Mounted::new("hardlinks") else {
        return;
    };
    m.sh("printf 'one\\n' > a && ln a b && printf 'two\\n' >> b && mkdir sub && ln b sub/c");
    m.unmount();
    let stat = |p: &str| -> serde_json::Value {
        let out = common::mount::ok(m.avfs(&["--workspace", "hardlinks", "--json", "stat", p]));
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["data"].clone()
    };
    for p in ["a", "b", "sub/c"] {
        assert_eq!(stat(p)["nlink"], 3, "{p}");
    }
    let cat = common::mount::ok(m.avfs(&["--workspace", "hardlinks", "cat", "sub/c"]));
    assert_eq!(cat, "one\ntwo\n");

    // Mounted again: one inode number for every name.
    common::mount::ok(m.avfs(&["mount", "hardlinks", m.dir.to_str().unwrap()]));
    let (ma, mc) = (
        fs::metadata(m.dir.join("a")).unwrap(),
        fs::metadata(m.dir.join("sub/c")).unwrap(),
    );
    assert_eq!(ma.ino(), mc.ino());
    assert_eq!(ma.nlink(), 3);
    fs::remove_file(m.dir.join("b")).unwrap();
    assert_eq!(fs::metadata(m.dir.join("a")).unwrap().nlink(), 2);
    assert_eq!(fs::read(m.dir.join("a")).unwrap(), b"one\ntwo\n");
    m.unmount();
    assert_eq!(stat("a")["nlink"], 2);
    assert_eq!(stat("sub/c")["nlink"], 2);
}

/// Device nodes, sockets, and hard links to every kind but a directory: made in the mount,
/// they keep their type, device number and link count in the vault, after a remount, and
/// through export and import. A device node never opens: the mount is `nodev`.
#[test]
fn special_files_and_links_to_every_kind_are_kept() {
    let Some(m) = Mounted::new("special") else {
        return;
    };
    m.sh(
        "umask 022 && mknod c1 c 1 3 && mknod b1 b 7 5 && mkfifo p1 && ln -s target sl \
          && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' \
          && for n in c1 b1 p1 sl sock; do ln $n $n.2; done",
    );
    let shown = "stat -c '%n %F %t:%T %h %a' c1 c1.2 b1 b1.2 p1.2 sl.2 sock.2";
    let want = "c1 character special file 1:3 2 644\n\
                c1.2 character special file 1:3 2 644\n\
                b1 block special file 7:5 2 644\n\
                b1.2 block special file 7:5 2 644\n\
                p1.2 fifo 0:0 2 644\n\
                sl.2 symbolic link 0:0 2 777\n\
                sock.2 socket 0:0 2 755\n";
    // (A socket takes 0777 less the umask: sh's 022 here.)
    assert_eq!(m.sh(shown), want);
    assert_eq!(m.sh("readlink sl.2"), "target\n");
    // nodev: opening a device node through the mount is refused, for root too.
    let open = fs::File::open(m.dir.join("c1")).map_err(|e| e.raw_os_error());
    assert_eq!(open.err(), Some(Some(libc_eacces())));
    let same_ino = |a: &str, b: &str| {
        let (x, y) = (
            fs::symlink_metadata(m.dir.join(a)).unwrap(),
            fs::symlink_metadata(m.dir.join(b)).unwrap(),
        );
        x.ino() == y.ino() && x.nlink() == 2
    };
    for n in ["c1", "b1", "p1", "sl", "sock"] {
        assert!(same_ino(n, &format!("{n}.2")), "{n}");
    }
    m.unmount();

    // In the vault, and mounted again.
    let stat = |vault: &str, p: &str| -> serde_json::Value {
        let out = common::mount::ok(m.avfs(&["--workspace", vault, "--json", "stat", p]));
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["data"].clone()
    };
    let b = stat("special", "b1.2");
    assert_eq!(
        (b["type"].as_str(), b["nlink"].as_u64()),
        (Some("blockdev"), Some(2))
    );
    assert_eq!(b["device"], serde_json::json!({"major": 7, "minor": 5}));
    assert_eq!(stat("special", "sock")["type"], "socket");
    assert_eq!(stat("special", "sl")["target"], "target");
    common::mount::ok(m.avfs(&["--workspace", "special", "vault", "check"]));
    common::mount::ok(m.avfs(&["mount", "special", m.dir.to_str().unwrap()]));
    assert_eq!(m.sh(shown), want);
    for n in ["c1", "b1", "p1", "sl", "sock"] {
        assert!(same_ino(n, &format!("{n}.2")), "{n} after a remount");
    }
    // The last other name goes: the node stands alone again, and the vault stays sound.
    m.sh("rm c1.2 sl");
    assert_eq!(m.sh("stat -c '%n %h' c1 sl.2"), "c1 1\nsl.2 1\n");
    m.unmount();
    common::mount::ok(m.avfs(&["--workspace", "special", "vault", "check"]));

    // Export with --devices makes them on the host, hard links included; import brings
    // them back.
    let host = tempfile::tempdir().unwrap();
    let out = host.path().join("x");
    common::mount::ok(m.avfs(&[
        "--workspace",
        "special",
        "export",
        "--devices",
        "/",
        out.to_str().unwrap(),
    ]));
    let host_stat = std::process::Command::new("stat")
        .args(["-c", "%n %F %t:%T %h"])
        .args(["b1", "b1.2", "c1", "p1", "sock", "sl.2"])
        .current_dir(&out)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&host_stat.stdout),
        "b1 block special file 7:5 2\n\
         b1.2 block special file 7:5 2\n\
         c1 character special file 1:3 1\n\
         p1 fifo 0:0 2\n\
         sock socket 0:0 2\n\
         sl.2 symbolic link 0:0 1\n"
    );
    common::mount::ok(m.avfs(&["vault", "create", "back"]));
    common::mount::ok(m.avfs(&["--workspace", "back", "import", out.to_str().unwrap(), "/"]));
    let p = stat("back", "p1.2");
    assert_eq!(
        (p["type"].as_str(), p["nlink"].as_u64()),
        (Some("fifo"), Some(2))
    );
    assert_eq!(
        stat("back", "c1")["device"],
        serde_json::json!({"major": 1, "minor": 3})
    );
    common::mount::ok(m.avfs(&["--workspace", "back", "vault", "check"]));
}

fn libc_eacces() -> i32 {
    rustix::io::Errno::ACCESS.raw_os_error()
}

/// Review finding: `apply` compares a FIFO, device node or socket with the host by type and
/// device number only, so a mode change made in the fork (say a device locked down to 0600)
/// is reported `unchanged` and never reaches the host, while the same chmod of a regular
/// file is carried over.
#[test]
fn apply_carries_a_mode_change_of_a_socket_or_device() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| common::mount::ok(common::mount::avfs_in(home.path(), args));
    let host = home.path().join("proj");
    fs::create_dir(&host).unwrap();
    fs::write(host.join("f"), b"x").unwrap();
    fs::set_permissions(host.join("f"), fs::Permissions::from_mode(0o644)).unwrap();
    let sock = std::os::unix::net::UnixListener::bind(host.join("sock")).unwrap();
    drop(sock);
    fs::set_permissions(host.join("sock"), fs::Permissions::from_mode(0o644)).unwrap();
    let names = ["f", "sock", "dev"];
    // A device node needs CAP_MKNOD on the host: the suite runs as root.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        host.join("dev"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o644),
        rustix::fs::makedev(1, 3),
    )
    .expect("mknod on the host (the suite runs as root)");
    fs::set_permissions(host.join("dev"), fs::Permissions::from_mode(0o644)).unwrap();
    run(&["vault", "create", "v"]);
    run(&["--workspace", "v", "import", host.to_str().unwrap(), "/"]);
    run(&["vault", "fork", "v", "task"]);
    for n in &names {
        run(&["--workspace", "task", "chmod", "600", &format!("/{n}")]);
    }
    let mode = |n: &str| fs::symlink_metadata(host.join(n)).unwrap().mode() & 0o7777;
    // Without --devices the device is left alone and listed as skipped.
    let out = run(&[
        "--workspace",
        "task",
        "--json",
        "apply",
        "--dry-run",
        host.to_str().unwrap(),
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report["data"]["skipped"],
        serde_json::json!(["/dev: a device node, not made on the host (see --devices)"])
    );
    assert_eq!(
        report["data"]["mode_changed"],
        serde_json::json!(["/f", "/sock"])
    );
    let out = run(&[
        "--workspace",
        "task",
        "--json",
        "apply",
        "--devices",
        host.to_str().unwrap(),
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got: Vec<(String, u32)> = names.iter().map(|n| (n.to_string(), mode(n))).collect();
    let want: Vec<(String, u32)> = names.iter().map(|n| (n.to_string(), 0o600)).collect();
    assert_eq!(got, want, "apply report: {report}");
}

/// Review finding (security): a device node an agent makes in the `nodev` mount is "metadata
/// only" there, but `export` (and `apply`) run by root make it a live host device on a file
/// system that is not `nodev`, with the mode the agent chose. Here `c 1 11` (/dev/kmsg, 0644
/// root on the host) made 0666 in the mount comes out as a node any user may write to the
/// kernel log through. A device should not reach the host unless the caller asks for it.
#[test]
fn export_does_not_turn_an_agent_made_device_into_an_open_host_device() {
    let Some(m) = Mounted::new("devexport") else {
        return;
    };
    m.sh("mknod kmsg c 1 11 && chmod 666 kmsg");
    // In the mount it never opens (nodev).
    assert!(
        fs::OpenOptions::new()
            .write(true)
            .open(m.dir.join("kmsg"))
            .is_err()
    );
    m.unmount();
    let host = tempfile::tempdir().unwrap();
    let out = host.path().join("x");
    let report = common::mount::ok(m.avfs(&[
        "--workspace",
        "devexport",
        "--json",
        "export",
        "/",
        out.to_str().unwrap(),
    ]));
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(
        report["data"]["skipped"],
        serde_json::json!(["/kmsg: a device node, not made on the host (see --devices)"])
    );
    let made = fs::symlink_metadata(out.join("kmsg"));
    use std::os::unix::fs::FileTypeExt;
    assert!(
        !made
            .as_ref()
            .is_ok_and(|md| md.file_type().is_char_device()),
        "export made a live character device 1,11 mode {:o} on the host",
        made.map(|md| md.mode()).unwrap_or(0)
    );
}
