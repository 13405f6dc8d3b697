//! Many `avfs` processes at once on one vault file: every write lands, every process exits 0,
//! and no one sees "database is locked".

mod common;

use std::process::{Child, Stdio};

use common::TestEnv;

const N: usize = 8;

fn spawn(env: &TestEnv, args: &[&str]) -> Child {
    env.std_cmd()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn avfs")
}

/// Wait for every child; assert each exited 0 without lock errors.
fn reap(children: Vec<(String, Child)>) {
    let mut failures = Vec::new();
    for (what, child) in children {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || stderr.contains("database is locked") || stderr.contains("busy")
        {
            failures.push(format!("{what}: {:?}\n{stderr}", out.status));
        }
    }
    assert!(
        failures.is_empty(),
        "failed processes:\n{}",
        failures.join("\n")
    );
}

#[test]
fn parallel_writers_into_one_vault_and_its_forks() {
    let env = TestEnv::with_vault("shared");
    env.write(None, "seed.txt", b"seed");
    for i in 0..N {
        env.data(&["vault", "fork", "shared", &format!("fork{i}")]);
    }
    for round in 0..3 {
        let mut children = Vec::new();
        for i in 0..N {
            let main_file = format!("main/r{round}/p{i}.txt");
            let main_data = format!("main round {round} process {i}");
            children.push((
                format!("main {main_file}"),
                spawn(
                    &env,
                    &[
                        "--workspace",
                        "shared",
                        "write",
                        "-p",
                        &main_file,
                        &main_data,
                    ],
                ),
            ));
            let fork = format!("fork{i}");
            let fork_file = format!("work/r{round}.txt");
            let fork_data = format!("fork {i} round {round}");
            children.push((
                format!("{fork} {fork_file}"),
                spawn(
                    &env,
                    &["--workspace", &fork, "write", "-p", &fork_file, &fork_data],
                ),
            ));
        }
        reap(children);
    }

    // Every write is present, in the right workspace only.
    let main = env.files(Some("shared"));
    assert_eq!(main.len(), 1 + 3 * N, "{:?}", main.keys());
    for round in 0..3 {
        for i in 0..N {
            assert_eq!(
                main[&format!("/main/r{round}/p{i}.txt")],
                format!("main round {round} process {i}").into_bytes()
            );
        }
    }
    for i in 0..N {
        let fork = format!("fork{i}");
        let files = env.files(Some(&fork));
        let mut expected = std::collections::BTreeMap::new();
        expected.insert("/seed.txt".to_string(), b"seed".to_vec());
        for round in 0..3 {
            expected.insert(
                format!("/work/r{round}.txt"),
                format!("fork {i} round {round}").into_bytes(),
            );
        }
        assert_eq!(files, expected, "{fork}");
    }
    let info = env.data(&["vault", "info", "shared"]);
    assert_eq!(info["workspace"]["files"], 1 + 3 * N);
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
    // Every write was audited exactly once.
    let audit = env.audit(None, 1000);
    let writes = audit
        .iter()
        .filter(|r| r["operation"] == "write" && r["result"] == "ok")
        .count();
    assert_eq!(writes, 1 + 2 * 3 * N);
}

#[test]
fn parallel_forks_checkpoints_and_registrations() {
    let env = TestEnv::with_vault("base");
    env.write(None, "f.txt", b"base");
    // Forking registers a name: concurrent registry updates must not lose any.
    let children: Vec<(String, Child)> = (0..N)
        .map(|i| {
            let name = format!("task{i}");
            let c = spawn(&env, &["vault", "fork", "base", &name]);
            (name, c)
        })
        .collect();
    reap(children);
    let listed: Vec<String> = env
        .data(&["vault", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    let mut expected: Vec<String> = (0..N).map(|i| format!("task{i}")).collect();
    expected.insert(0, "base".into());
    assert_eq!(listed, expected);

    // Unnamed checkpoints from many processes on one workspace get distinct names.
    let children: Vec<(String, Child)> = (0..N)
        .map(|i| (format!("save {i}"), spawn(&env, &["checkpoint", "save"])))
        .collect();
    reap(children);
    let names = env.checkpoint_names(None);
    assert_eq!(names.len(), N);
    let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), N, "{names:?}");
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
}
