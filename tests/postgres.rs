//! Vaults kept in PostgreSQL, through the real binary and a real server: hosts (separate
//! `$AVFS_HOME`s) create, attach and share one vault; concurrent writers on several hosts
//! lose nothing; bad input gives typed errors and changes nothing; a vault moves from
//! SQLite to PostgreSQL and back; large objects live in S3. The server is the one
//! scripts/test.sh starts (`AVFS_TEST_POSTGRES_URL`); a server that stops or goes silent is
//! tests/postgres_outages.rs.

mod common;

use std::io::Write;

use std::path::PathBuf;
use std::process::Output;

use common::check_json_output;
use common::shared::{Host, s3, s3_keys, server, unique, vault_on_hosts};
use serde_json::Value;
#[test]
fn a_vault_made_on_one_host_is_read_and_written_by_another() {
    let Some(url) = server() else { return };
    let (a, b) = (Host::new(&url), Host::new(&url));
    let name = unique("shared");
    let made = a.data(&["vault", "create", &name, "--engine", "postgres"]);
    // The URL came from the environment: the vault file names the variable, not the URL,
    // and only its owner may read it.
    let file = PathBuf::from(made["path"].as_str().unwrap());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        !text.contains(&url),
        "the vault file holds the URL:\n{text}"
    );
    assert!(text.contains("AVFS_POSTGRES_URL"), "{text}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(a.data(&["vault", "info"])["engine"], "postgres");

    a.data(&["write", "notes.txt", "from host a\n"]);
    a.data(&["checkpoint", "save", "first"]);
    b.data(&["vault", "attach", &name]);
    assert_eq!(b.cat("notes.txt"), "from host a\n");
    b.data(&["write", "notes.txt", "changed on host b\n"]);
    b.data(&["mkdir", "-p", "src/lib"]);
    assert_eq!(a.cat("notes.txt"), "changed on host b\n");
    // A checkpoint taken on one host restores on the other.
    b.data(&["checkpoint", "restore", "first"]);
    assert_eq!(a.cat("notes.txt"), "from host a\n");
    // A fork made on one host is there on the other.
    a.data(&["vault", "fork", &name, "task-1"]);
    let forks = b.data(&["vault", "info"]);
    assert!(forks.to_string().contains("task-1"), "{forks}");
    for h in [&a, &b] {
        h.data(&["vault", "check"]);
    }
    // Attached twice on one host, or created twice on one server: refused.
    b.err(&["vault", "attach", &name], "already_exists");
    Host::new(&url).err(
        &["vault", "create", &name, "--engine", "postgres"],
        "already_exists",
    );
    // Deleting it on one host deletes it from the server: the other host's file is left
    // pointing at nothing, and says so.
    a.data(&["vault", "delete", &name, "--yes"]);
    b.err(&["cat", "notes.txt"], "vault_not_found");
}

#[test]
fn writers_on_many_hosts_lose_no_acknowledged_write() {
    let Some(url) = server() else { return };
    let name = unique("writers");
    let (first, hosts) = vault_on_hosts(&url, &name, 4);
    // 4 hosts x 2 processes, 10 writes each, all at once.
    std::thread::scope(|s| {
        for (i, h) in hosts.iter().enumerate() {
            for p in 0..2 {
                s.spawn(move || {
                    for n in 0..10 {
                        let path = format!("h{i}/p{p}/f{n}.txt");
                        let out = h.run(&["write", "-p", &path, &format!("{i} {p} {n}\n")]);
                        assert!(out.status.success(), "{path}: {out:?}");
                    }
                });
            }
        }
    });
    for (i, _) in hosts.iter().enumerate() {
        for p in 0..2 {
            for n in 0..10 {
                let path = format!("h{i}/p{p}/f{n}.txt");
                assert_eq!(first.cat(&path), format!("{i} {p} {n}\n"), "{path}");
            }
        }
    }
    let stats = first.data(&["stats"]);
    assert_eq!(stats["live_files"], 80, "{stats}");
    first.data(&["vault", "check"]);
    first.data(&["vault", "delete", &name, "--yes"]);
}

#[test]
fn thirty_two_writers_on_four_hosts_race_one_head_and_exactly_one_wins_each_version() {
    let Some(url) = server() else { return };
    let name = unique("cas");
    let (first, hosts) = vault_on_hosts(&url, &name, 4);
    let head = |h: &Host| {
        h.data(&["op", "log", "--limit", "1"])[0]["id"]
            .as_i64()
            .unwrap_or(0)
    };
    for version in 0..3 {
        let expected = head(&first).to_string();
        // 32 writers, 8 on each host, all against the same head at once.
        let outcomes: Vec<(String, Value)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..32)
                .map(|w| {
                    let (h, expected) = (&hosts[w % 4], &expected);
                    s.spawn(move || {
                        let content = format!("version {version} writer {w}\n");
                        let args = ["--if-head", expected, "write", "ref.txt", &content];
                        let out = h.run(&args);
                        let doc = check_json_output(&args, &out);
                        (content, doc)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<&String> = outcomes
            .iter()
            .filter(|(_, d)| d["ok"] == true)
            .map(|(c, _)| c)
            .collect();
        assert_eq!(won.len(), 1, "version {version}: {outcomes:?}");
        let now = head(&first);
        for (_, d) in outcomes.iter().filter(|(_, d)| d["ok"] != true) {
            assert_eq!(d["error"]["kind"], "head_moved", "{d}");
            assert_eq!(d["error"]["details"]["head"], now, "{d}");
        }
        for h in &hosts {
            assert_eq!(h.cat("ref.txt"), *won[0]);
        }
    }
    // One operation per version: the losers left nothing in the history.
    let writes = first.data(&["op", "log"]);
    assert_eq!(writes.as_array().map(Vec::len), Some(3), "{writes}");
    first.data(&["vault", "check"]);
    first.data(&["vault", "delete", &name, "--yes"]);
}

#[test]
fn bad_server_input_gets_typed_errors_and_registers_nothing() {
    let Some(url) = server() else { return };
    let h = Host::new(&url);
    let name = unique("bad");
    // No URL anywhere.
    let out = h.run_with(
        &["vault", "create", &name, "--engine", "postgres"],
        &[("AVFS_POSTGRES_URL", None)],
    );
    let doc = check_json_output(&["vault", "create"], &out);
    assert_eq!(doc["error"]["kind"], "invalid_argument", "{doc}");
    for (args, kind) in [
        (vec!["--url", "mysql://x@y/z"], "invalid_argument"),
        (
            vec!["--url", "postgres://avfs@127.0.0.1:1/none"],
            "store_unavailable",
        ),
    ] {
        let mut full = vec!["vault", "create", &name, "--engine", "postgres"];
        full.extend(args);
        h.err(&full, kind);
    }
    // A server URL for a file engine, and attaching a vault the server does not have.
    h.err(
        &[
            "vault", "create", &name, "--engine", "sqlite", "--url", &url,
        ],
        "invalid_argument",
    );
    let missing = h.err(&["vault", "attach", &name], "vault_not_found");
    assert!(
        missing["message"].as_str().unwrap().contains(&name),
        "{missing}"
    );
    let list = h.data(&["vault", "list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");
    // Nothing was left on the server either: the name is free.
    h.data(&["vault", "create", &name, "--engine", "postgres"]);
    h.data(&["vault", "delete", &name, "--yes"]);
}

#[test]
fn a_vault_moves_from_sqlite_to_postgres_and_back() {
    let Some(url) = server() else { return };
    let h = Host::new(&url);
    let name = unique("moving");
    h.data(&["vault", "create", &name, "--engine", "sqlite"]);
    h.data(&["write", "-p", "src/main.rs", "fn main() {}\n"]);
    h.data(&["checkpoint", "save", "one"]);
    h.data(&["write", "src/main.rs", "fn main() { run() }\n"]);
    let moved = h.data(&["vault", "migrate", &name, "--to", "postgres"]);
    assert_eq!(moved["to"], "postgres");
    assert_eq!(h.data(&["vault", "info"])["engine"], "postgres");
    // Another host attaches the moved vault and sees its history.
    let other = Host::new(&url);
    other.data(&["vault", "attach", &name]);
    assert_eq!(other.cat("src/main.rs"), "fn main() { run() }\n");
    other.data(&["checkpoint", "restore", "one"]);
    assert_eq!(h.cat("src/main.rs"), "fn main() {}\n");
    let back = h.data(&["vault", "migrate", &name, "--to", "sqlite"]);
    assert_eq!(back["from"], "postgres");
    assert_eq!(h.data(&["vault", "info"])["engine"], "sqlite");
    assert_eq!(h.cat("src/main.rs"), "fn main() {}\n");
    h.data(&["checkpoint", "restore", "one"]);
    h.data(&["vault", "check"]);
    // Off the server now: the other host's file points at nothing, and says so.
    other.err(&["cat", "src/main.rs"], "vault_not_found");
}

#[test]
fn large_objects_live_in_s3_and_another_host_reads_them_through_its_cache() {
    let (Some(url), Some(endpoint)) = (server(), s3()) else {
        return;
    };
    let name = unique("objects");
    let (a, b) = (Host::new(&url), Host::new(&url));
    a.create_with_objects(&name);
    // 600 KB of varied bytes: three content chunks, each over the 4 KiB inline bound.
    let big: String = (0..600_000u32)
        .map(|i| char::from(b'a' + ((i * 7 + i / 1000) % 26) as u8))
        .collect();
    let src = a.dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big.txt"), &big).unwrap();
    a.data(&["import", src.to_str().unwrap()]);
    a.data(&["write", "small.txt", "small stays in the database\n"]);
    let keys = s3_keys(&endpoint, &name);
    assert_eq!(keys.len(), 3, "only the large chunks go to S3: {keys:?}");
    // The host that wrote them kept them in its cache as it uploaded them: it reads them
    // back with the object store out of reach.
    let own = a.home.join(format!("vaults/{name}.avfs.objects"));
    assert_eq!(std::fs::read_dir(&own).unwrap().count(), 3);
    let dead = [
        ("AWS_ENDPOINT_URL", Some("http://127.0.0.1:9")),
        ("AVFS_SERVER_TIMEOUT_SECS", Some("3")),
    ];
    let out = a.run_with(&["cat", "big.txt"], &dead);
    let doc = check_json_output(&["cat"], &out);
    assert!(out.status.success(), "{doc}");
    assert_eq!(doc["data"]["content"], big.as_str());

    b.data(&["vault", "attach", &name]);
    assert_eq!(b.cat("big.txt"), big);
    assert_eq!(b.cat("small.txt"), "small stays in the database\n");
    let cache = b.home.join(format!("vaults/{name}.avfs.objects"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777,
        0o700,
        "the host cache holds vault content: private"
    );
    let cached: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(cached.len(), 3, "{cached:?}");
    for f in &cached {
        assert_eq!(
            std::fs::metadata(f).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    // A damaged cached copy is never served: it is dropped and fetched again.
    std::fs::write(&cached[0], b"not the object").unwrap();
    assert_eq!(b.cat("big.txt"), big);
    assert_ne!(std::fs::read(&cached[0]).unwrap(), b"not the object");
    for h in [&a, &b] {
        h.data(&["vault", "check"]);
    }
    // An object gone from the store: `vault check` on the host that still holds it in its
    // cache (it uploaded it) says so, as a check of what the store holds must. Reads go on
    // from the cache.
    let gone = &keys[0];
    let deleted = std::process::Command::new("curl")
        .args([
            "-sf",
            "-X",
            "DELETE",
            &format!("{endpoint}/avfs-test/{gone}"),
        ])
        .status()
        .expect("curl runs");
    assert!(deleted.success(), "deleting {gone}");
    assert_eq!(s3_keys(&endpoint, &name).len(), 2);
    let out = a.run_with(&["vault", "check"], &[]);
    let doc = check_json_output(&["vault", "check"], &out);
    assert!(
        !out.status.success() && doc["error"]["kind"] == "corrupt_vault",
        "{doc}"
    );
    assert_eq!(a.cat("big.txt"), big);
    a.data(&["vault", "delete", &name, "--yes"]);
}

#[test]
fn a_move_into_s3_is_checked_against_the_store_and_leaves_no_cache_behind() {
    let (Some(url), Some(endpoint)) = (server(), s3()) else {
        return;
    };
    let name = unique("moves3");
    let h = Host::new(&url);
    h.data(&["vault", "create", &name, "--engine", "sqlite"]);
    let big: String = (0..100_000u32)
        .map(|i| char::from(b'a' + ((i * 11 + i / 777) % 26) as u8))
        .collect();
    h.data(&["write", "big.txt", &big]);
    let objects = format!("s3://avfs-test/{name}");
    h.data(&[
        "vault",
        "migrate",
        &name,
        "--to",
        "postgres",
        "--objects",
        &objects,
    ]);
    assert!(!s3_keys(&endpoint, &name).is_empty());
    // The copy is verified by reading its objects back from the store, not from a cache
    // its own uploads filled: the copy has none, and nothing of it is left beside the vault.
    let left: Vec<String> = std::fs::read_dir(h.home.join("vaults"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("migrating"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(h.cat("big.txt"), big);
    h.data(&["vault", "check"]);
    h.data(&["vault", "delete", &name, "--yes"]);
}

#[test]
fn compact_sweeps_objects_nothing_refers_to_after_the_grace_period() {
    let (Some(url), Some(endpoint)) = (server(), s3()) else {
        return;
    };
    let name = unique("sweep");
    let h = Host::new(&url);
    h.create_with_objects(&name);
    let body: String = (0..100_000u32)
        .map(|i| char::from(b'a' + (i % 23) as u8))
        .collect();
    h.data(&["write", "kept.txt", &body]);
    // What a writer killed between its upload and its commit leaves: an object in the
    // store that no row refers to.
    let schema = h.schema(&name);
    let orphan = format!("{name}/{schema}/{}", "ab".repeat(32));
    // And keys that are not this vault's, in the same bucket and under the same prefix:
    // a sweep must never take them (another vault's folder, a sub-folder, other names).
    let others = [
        format!("{name}/{}", "cd".repeat(32)),
        format!("{name}/avfs_someone_else/{}", "cd".repeat(32)),
        format!("{name}/{schema}/sub/{}", "cd".repeat(32)),
        format!("{name}/{schema}/notes.txt"),
    ];
    for key in std::iter::once(&orphan).chain(&others) {
        let put = std::process::Command::new("curl")
            .args(["-sf", "-X", "PUT", "--data-binary", "not referenced"])
            .arg(format!("{endpoint}/avfs-test/{key}"))
            .output()
            .unwrap();
        assert!(put.status.success(), "{put:?}");
    }
    let before = s3_keys(&endpoint, &name);
    assert!(before.contains(&orphan), "{before:?}");
    // Within the grace period (a write may be about to commit it): kept.
    h.data(&["compact"]);
    assert_eq!(s3_keys(&endpoint, &name), before);
    let out = h.run_with(&["compact"], &[("AVFS_OBJECT_GRACE_SECS", Some("0"))]);
    assert!(out.status.success(), "{out:?}");
    let after = s3_keys(&endpoint, &name);
    assert!(!after.contains(&orphan), "{after:?}");
    for key in &others {
        assert!(
            after.contains(key),
            "the sweep took {key}, which is not this vault's"
        );
    }
    assert_eq!(
        after.len(),
        before.len() - 1,
        "only the orphan went: {after:?}"
    );
    assert_eq!(h.cat("kept.txt"), body);
    h.data(&["vault", "check"]);
    h.data(&["vault", "delete", &name, "--yes"]);
}

#[test]
fn an_unreachable_object_store_is_refused_at_create_and_registers_nothing() {
    let (Some(url), Some(_)) = (server(), s3()) else {
        return;
    };
    let name = unique("nos3");
    let h = Host::new(&url);
    let objects = format!("s3://avfs-test/{name}");
    let out = h.run_with(
        &[
            "vault",
            "create",
            &name,
            "--engine",
            "postgres",
            "--objects",
            &objects,
        ],
        &[("AWS_ENDPOINT_URL", Some("http://127.0.0.1:1"))],
    );
    let doc = check_json_output(&["vault", "create"], &out);
    assert_eq!(doc["error"]["kind"], "store_unavailable", "{doc}");
    for bad in [
        "s3://",
        "s3://UPPER/x",
        "https://bucket/x",
        "s3://avfs-test/../x",
    ] {
        h.err(
            &[
                "vault",
                "create",
                &name,
                "--engine",
                "postgres",
                "--objects",
                bad,
            ],
            "invalid_argument",
        );
    }
    h.err(
        &["vault", "create", &name, "--objects", "s3://avfs-test/x"],
        "invalid_argument",
    );
    assert_eq!(h.data(&["vault", "list"]).as_array().map(Vec::len), Some(0));
    // The name is free on the server again.
    h.data(&["vault", "create", &name, "--engine", "postgres"]);
    h.data(&["vault", "delete", &name, "--yes"]);
}

/// How long the fleet test's agents keep running commands: `AVFS_TEST_FLEET_SECS`, 10 s
/// unless set (every agent runs at least one command however short it is).
fn fleet_seconds() -> u64 {
    std::env::var("AVFS_TEST_FLEET_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
}

#[test]
fn eight_hosts_of_sixteen_agents_run_proxied_commands_then_every_host_checks_the_vault() {
    let Some(url) = server() else { return };
    if !common::skip::require_fuse() {
        return;
    }
    const HOSTS: usize = 8;
    const AGENTS: usize = 16;
    let name = unique("fleet");
    // Hosts: a home (and so an object cache) and a host id each.
    let hosts: Vec<Host> = (0..HOSTS).map(|_| Host::new(&url)).collect();
    let ids: Vec<String> = (0..HOSTS).map(|i| format!("fleet-host-{i}")).collect();
    let on = |i: usize, args: &[&str]| -> (Output, Value) {
        let out = hosts[i].run_with(args, &[("AVFS_HOST_ID", Some(ids[i].as_str()))]);
        let doc = check_json_output(args, &out);
        (out, doc)
    };
    // Large objects in S3 when there is a gateway, so the hosts' caches are in play too.
    if s3().is_some() {
        hosts[0].create_with_objects(&name);
    } else {
        hosts[0].data(&["vault", "create", &name, "--engine", "postgres"]);
    }
    let big = "x".repeat(10_000);
    hosts[0].data(&["write", "-p", "src/lib.rs", "pub fn f() {}\n"]);
    hosts[0].data(&["write", "-p", "assets/big.txt", &big]);
    for h in &hosts[1..] {
        h.data(&["vault", "attach", &name]);
    }
    // Every agent forks main from its host, then runs proxied commands in its fork until
    // the deadline, counting those acknowledged.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(fleet_seconds());
    let name = name.as_str();
    let on = &on;
    let done: Vec<(usize, String, usize)> = std::thread::scope(|s| {
        let agents: Vec<_> = (0..HOSTS)
            .flat_map(|i| (0..AGENTS).map(move |a| (i, a)))
            .map(|(i, a)| {
                s.spawn(move || {
                    let fork = format!("h{i}-a{a}");
                    let (out, doc) = on(i, &["vault", "fork", name, &fork]);
                    assert!(out.status.success(), "fork {fork}: {doc}");
                    let mut n = 0;
                    while n == 0 || std::time::Instant::now() < deadline {
                        let script =
                            format!("echo {n} >> log.txt && cat src/lib.rs assets/big.txt > copy");
                        let (out, doc) = on(
                            i,
                            &[
                                "proxy",
                                "exec",
                                "--workspace",
                                &fork,
                                "--",
                                "sh",
                                "-c",
                                &script,
                            ],
                        );
                        assert!(out.status.success(), "{fork} command {n}: {doc}");
                        assert_eq!(doc["data"]["exit_code"], 0, "{fork} command {n}: {doc}");
                        n += 1;
                    }
                    (i, fork, n)
                })
            })
            .collect();
        agents.into_iter().map(|t| t.join().unwrap()).collect()
    });
    // Every fork holds exactly its agent's acknowledged commands, read from another host: a
    // fork made on one host is found by name on every other.
    let copy = format!("pub fn f() {{}}\n{big}");
    for (i, fork, n) in &done {
        let reader = &hosts[(i + 1) % HOSTS];
        let log: String = (0..*n).map(|k| format!("{k}\n")).collect();
        assert_eq!(reader.cat_in(fork, "log.txt"), log, "{fork}");
        assert_eq!(reader.cat_in(fork, "copy"), copy, "{fork}");
    }
    let total: usize = done.iter().map(|(_, _, n)| n).sum();
    let _ = writeln!(
        std::io::stderr(),
        "{HOSTS} hosts x {AGENTS} agents: {total} proxied commands acknowledged"
    );
    for i in 0..HOSTS {
        let (out, doc) = on(i, &["vault", "check"]);
        assert!(out.status.success(), "vault check on host {i}: {doc}");
    }
    hosts[0].data(&["vault", "delete", name, "--yes"]);
}

#[test]
fn migrating_off_the_server_loses_no_write_another_host_was_told_succeeded() {
    let Some(url) = server() else { return };
    let name = unique("moveoff");
    let (a, b) = (Host::new(&url), Host::new(&url));
    a.data(&["vault", "create", &name, "--engine", "postgres"]);
    // Enough files that the copy takes a while, with writers of another host queued on it.
    a.import_files(1500);
    b.data(&["vault", "attach", &name]);
    let done = std::sync::atomic::AtomicBool::new(false);
    let acked: Vec<String> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..3)
            .map(|w| {
                let (b, done) = (&b, &done);
                s.spawn(move || {
                    let mut acked = Vec::new();
                    for i in 0.. {
                        if done.load(std::sync::atomic::Ordering::SeqCst) && i > 5 {
                            break;
                        }
                        let path = format!("w{w}-{i}.txt");
                        if b.run(&["write", &path, "x"]).status.success() {
                            acked.push(path);
                        }
                    }
                    acked
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(300));
        a.data(&["vault", "migrate", &name, "--to", "sqlite"]);
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    assert!(!acked.is_empty(), "no write got in before the migration");
    let lost: Vec<&String> = acked
        .iter()
        .filter(|p| !a.run(&["cat", p]).status.success())
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost: {lost:?} of {}",
        acked.len()
    );
    a.data(&["vault", "check"]);
}

#[test]
fn a_vault_file_naming_what_is_not_its_vault_drops_nothing_and_leaks_nothing() {
    let Some(url) = server() else { return };
    let (a, b) = (Host::new(&url), Host::new(&url));
    let name = unique("victim");
    a.data(&["vault", "create", &name, "--engine", "postgres"]);
    a.data(&["write", "keep.txt", "kept\n"]);
    let made = PathBuf::from(a.data(&["vault", "info"])["path"].as_str().unwrap());
    let real = std::fs::read_to_string(&made).unwrap();
    let schema = real
        .lines()
        .find_map(|l| l.strip_prefix("schema = "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    let dir = b.dir.path().join("evil");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("v.avfs");
    let mark = "# agentvfs vault kept in PostgreSQL";
    // Another vault's schema under a wrong name: deleting it drops nothing.
    std::fs::write(
        &file,
        format!("{mark}\nengine = \"postgres\"\nname = \"someone-else\"\nschema = \"{schema}\"\nurl_env = \"AVFS_POSTGRES_URL\"\n"),
    )
    .unwrap();
    b.err(
        &["--workspace", file.to_str().unwrap(), "ls", "/"],
        "vault_not_found",
    );
    let path = file.to_str().unwrap();
    let _ = b.run(&["vault", "delete", path, "--yes"]);
    assert_eq!(
        a.cat("keep.txt"),
        "kept\n",
        "another vault's schema was dropped"
    );
    // A schema avfs did not make, or another variable for the URL: not a vault at all.
    for (schema, var) in [
        ("public", "AVFS_POSTGRES_URL"),
        (schema.as_str(), "DATABASE_URL"),
    ] {
        std::fs::write(
            &file,
            format!("{mark}\nengine = \"postgres\"\nname = \"{name}\"\nschema = \"{schema}\"\nurl_env = \"{var}\"\n"),
        )
        .unwrap();
        b.err(&["vault", "delete", path, "--yes"], "not_a_vault");
    }
    assert_eq!(a.cat("keep.txt"), "kept\n");
    // A damaged vault file holding a password: the error names no part of it.
    std::fs::write(
        &file,
        format!(
            "{mark}\nengine = \"postgres\"\nurl = \"postgres://u:Sw0rdfish@h/db\nname = \"x\"\n"
        ),
    )
    .unwrap();
    let out = b.run(&["--workspace", path, "ls", "/"]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(!text.contains("Sw0rdfish"), "the password leaked: {text}");
    a.data(&["vault", "delete", &name, "--yes"]);
}

#[test]
fn a_login_the_server_refuses_is_invalid_input_not_a_retry() {
    let Some(url) = server() else { return };
    let h = Host::new(&url);
    let (server_part, _) = url.rsplit_once('/').unwrap();
    let missing_db = format!("{server_part}/no_such_database_here");
    let e = h.err(
        &[
            "vault",
            "create",
            &unique("nodb"),
            "--engine",
            "postgres",
            "--url",
            &missing_db,
        ],
        "invalid_argument",
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("no_such_database_here"),
        "{e}"
    );
    h.err(
        &[
            "vault",
            "create",
            &unique("badurl"),
            "--engine",
            "postgres",
            "--url",
            "postgres://x@h:notaport/db",
        ],
        "invalid_argument",
    );
}

#[test]
fn a_vault_being_moved_onto_the_server_cannot_be_attached_until_it_is_there() {
    let Some(url) = server() else { return };
    let name = unique("moveon");
    let (a, b) = (Host::new(&url), Host::new(&url));
    a.data(&["vault", "create", &name, "--engine", "sqlite"]);
    a.import_files(1500);
    // Another host tries to attach it, again and again, while the move runs: it must not
    // get in before the move is done (a write of its would be lost were the move to fail).
    let mut mover = std::process::Command::new(common::BIN)
        .args(["--json", "vault", "migrate", &name, "--to", "postgres"])
        .env("AVFS_HOME", &a.home)
        .env("AVFS_POSTGRES_URL", &url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut early = Vec::new();
    loop {
        let running = mover.try_wait().unwrap().is_none();
        if !running {
            break;
        }
        let out = b.run(&["vault", "attach", &name]);
        if out.status.success() {
            // Attached: the move must be done by now.
            if mover.try_wait().unwrap().is_none() {
                early.push(String::from_utf8_lossy(&out.stdout).to_string());
            }
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = mover.wait().unwrap();
    assert!(status.success(), "the migration failed");
    assert!(early.is_empty(), "attached while the move ran: {early:?}");
    // Done: it attaches, and the hosts see the same vault.
    let c = Host::new(&url);
    c.data(&["vault", "attach", &name]);
    assert_eq!(c.cat("d7/f7.txt"), "7\n");
    c.data(&["write", "from-c.txt", "c\n"]);
    assert_eq!(a.cat("from-c.txt"), "c\n");
    a.data(&["vault", "delete", &name, "--yes"]);
}
