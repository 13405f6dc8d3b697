//! `$AVFS_HOME` and vault files belong to their owner alone, whatever the umask: the home
//! directory is 0700, a vault file and SQLite's `-wal`/`-shm` files beside it are 0600.
//! The real binary runs under a permissive umask to show it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use common::mount::{ok, require_fuse};

/// `avfs ARGS` started under `umask MASK`.
fn avfs_umask(mask: &str, home: &Path, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("umask {mask}; exec \"$@\""))
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_avfs"))
        .args(args)
        .env("AVFS_HOME", home)
        .env("AVFS_ACTOR", "test")
        .env_remove("AVFS_WORKSPACE")
        .env_remove("AVFS_VAULT")
        .output()
        .expect("run avfs")
}

/// The permission bits of `p`, in octal as `ls -l` users read them.
fn mode(p: &Path) -> String {
    let m = std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    format!("{:o}", m.permissions().mode() & 0o777)
}

#[test]
fn a_fresh_home_and_its_vault_files_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("avfs-home");
    ok(avfs_umask("022", &home, &["vault", "create", "x"]));
    assert_eq!(mode(&home), "700", "$AVFS_HOME");
    assert_eq!(mode(&home.join("vaults")), "700");
    let vault = home.join("vaults/x.avfs");
    assert_private(&vault);

    // A vault at a path of the user's choosing, under an even looser umask.
    let elsewhere = dir.path().join("elsewhere/y.avfs");
    ok(avfs_umask(
        "000",
        &home,
        &[
            "vault",
            "create",
            "y",
            "--path",
            elsewhere.to_str().unwrap(),
        ],
    ));
    assert_private(&elsewhere);
}

/// A vault file is 0600; a sled vault's directory is 0700 and every file in it 0600.
fn assert_private(vault: &Path) {
    if !vault.is_dir() {
        assert_eq!(mode(vault), "600", "{}", vault.display());
        return;
    }
    assert_eq!(mode(vault), "700", "{}", vault.display());
    for e in std::fs::read_dir(vault).unwrap().flatten() {
        let want = if e.path().is_dir() { "700" } else { "600" };
        assert_eq!(mode(&e.path()), want, "{}", e.path().display());
    }
}

#[test]
fn wal_and_shm_files_of_an_open_vault_are_private() {
    if !require_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("avfs-home");
    ok(avfs_umask("022", &home, &["vault", "create", "x"]));
    // The mount daemon keeps the vault open, so SQLite's side files exist while it runs.
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    ok(avfs_umask(
        "022",
        &home,
        &["mount", "x", mnt.to_str().unwrap()],
    ));
    std::fs::write(mnt.join("a.txt"), "through the mount").unwrap();
    let vault = home.join("vaults/x.avfs");
    // Read before unmounting (which removes them), asserted after (so a failure unmounts).
    // The engine's files beside the vault: SQLite's log and index, LMDB's lock file; a
    // sled vault keeps its files inside its directory.
    if common::skip::engine() == "sled" {
        assert_private(&vault);
    }
    let suffixes: &[&str] = match common::skip::engine().as_str() {
        "lmdb" => &["-lock"],
        "sled" => &[],
        _ => &["-wal", "-shm"],
    };
    let side: Vec<(&str, Option<String>)> = suffixes
        .iter()
        .copied()
        .map(|s| {
            let p = format!("{}{s}", vault.display());
            let m = std::fs::metadata(p).ok();
            (
                s,
                m.map(|m| format!("{:o}", m.permissions().mode() & 0o777)),
            )
        })
        .collect();
    ok(avfs_umask(
        "022",
        &home,
        &["unmount", mnt.to_str().unwrap()],
    ));
    let private = Some("600".to_string());
    let want: Vec<(&str, Option<String>)> =
        suffixes.iter().map(|s| (*s, private.clone())).collect();
    assert_eq!(side, want);
}
