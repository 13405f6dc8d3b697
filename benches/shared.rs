//! A shared vault on PostgreSQL at a simulated network round trip, against a local SQLite
//! vault in the same run: fork, checkpoint and restore latency (p50/p99) at each tree size,
//! then checkpoints while many agents work in their own forks at once. First, the floor at
//! that round trip without avfs: a bare `SELECT 1` and a one-row commit.
//!
//! Run it with `scripts/bench_shared.sh`, which starts a private PostgreSQL server (and an
//! S3 gateway for `AVFS_BENCH_S3=1`) and passes `AVFS_BENCH_POSTGRES_URL`. The database
//! connection goes through a TCP proxy in this process that holds every chunk for half the
//! round trip each way (`AVFS_BENCH_RTT_MS`, default 1). Knobs: `AVFS_BENCH_SIZES` (default
//! `1000,10000`), `AVFS_BENCH_AGENTS` (default `16,128`; `0`: no load runs),
//! `AVFS_BENCH_SECONDS` per load run (default 10), `AVFS_BENCH_HOSTS` (default 1: the
//! PostgreSQL agents are spread over that many handles, each a host with its own
//! connection), `AVFS_BENCH_PAUSE_MS` (default 0: each agent's pause after its checkpoint,
//! standing for the command it runs next; 0 is a closed loop at full speed),
//! `AVFS_BENCH_OBJECTS=s3://bucket/prefix` to keep large objects in S3.
//!
//! Each load run is preceded by its floor: as many bare clients as agents, each on a
//! connection of its own through the same proxy, each committing two one-row upserts of
//! its own row (the edit and the checkpoint) per loop with the same pause. No lock and no
//! row is shared, so that is what the server, the simulated network and the two cores allow
//! any design for that many writers.
//!
//! Timings never feed assertions; this only measures and prints.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentvfs::model::path::VPath;
use agentvfs::model::{Actor, Vault, Workspace, WriteOptions};
use agentvfs::store::{Engine, Server};

const SETUP_BATCH: usize = 4000;

fn actor() -> Actor {
    Actor {
        actor: "bench".into(),
        source: "sdk".into(),
    }
}

/// A number from the environment, or `default` when unset or not one.
fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        // `0` or nothing: none (`AVFS_BENCH_AGENTS=0` skips the load runs).
        Ok(v) => v
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse().expect("a number"))
            .filter(|&n| n > 0)
            .collect(),
        Err(_) => default.to_vec(),
    }
}

fn tree_path(i: usize) -> VPath {
    VPath::parse(&format!(
        "src/m{:03}/d{}/f{:02}.rs",
        i / 1000,
        (i / 100) % 10,
        i % 100
    ))
    .expect("path")
}

fn content(i: usize, version: u64) -> Vec<u8> {
    format!("// file {i}, version {version}\npub fn f{i}() -> u64 {{ {i} ^ {version} }}\n")
        .into_bytes()
}

fn parents() -> WriteOptions {
    WriteOptions {
        parents: true,
        ..WriteOptions::default()
    }
}

/// Forward `127.0.0.1:<port>` to `upstream`, delivering each chunk `delay` after it was
/// sent: a link's latency, not a per-chunk cost (chunks in flight together arrive
/// together, as pipelined statements do on a real network).
fn delay_proxy(upstream: String, delay: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(&upstream) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let pipe = |mut from: TcpStream, mut to: TcpStream| {
                let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0
                            || tx
                                .send((Instant::now() + delay, buf[..n].to_vec()))
                                .is_err()
                        {
                            break;
                        }
                    }
                });
                std::thread::spawn(move || {
                    for (due, chunk) in rx {
                        std::thread::sleep(due.saturating_duration_since(Instant::now()));
                        if to.write_all(&chunk).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Both);
                });
            };
            pipe(
                client.try_clone().expect("clone"),
                server.try_clone().expect("clone"),
            );
            pipe(server, client);
        }
    });
    port
}

/// The URL with its host and port replaced by the proxy's.
fn through_proxy(url: &str, delay: Duration) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (auth, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let (user, hostport) = auth.rsplit_once('@').map_or(("", auth), |(u, h)| (u, h));
    let port = delay_proxy(hostport.to_string(), delay);
    let at = if user.is_empty() { "" } else { "@" };
    format!("{scheme}://{user}{at}127.0.0.1:{port}/{tail}")
}

struct Lat(Vec<Duration>);

impl Lat {
    fn time<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.0.push(t.elapsed());
        r
    }

    fn pct(&mut self, p: f64) -> f64 {
        self.0.sort();
        let i = ((self.0.len() as f64 - 1.0) * p).round() as usize;
        self.0[i].as_secs_f64() * 1e3
    }
}

struct Setup {
    name: &'static str,
    vault: Arc<Vault>,
    /// The handles the load runs spread their agents over: `vault` alone, or for
    /// PostgreSQL one per simulated host (`AVFS_BENCH_HOSTS`), each a vault attached at a
    /// path of its own, so with a connection and a host cache of its own.
    hosts: Vec<Arc<Vault>>,
}

/// A vault of `n` files and a checkpoint `base`. A PostgreSQL one (`servers`: the server
/// directly, then through the delay proxy) is built over the direct connection, which the
/// bench does not time, and then attached as a second host through the proxy: that handle
/// is the one measured. A million files over a 1 ms round trip would take hours to write.
fn make(name: &'static str, dir: &Path, servers: Option<(&Server, &Server)>, n: usize) -> Setup {
    let engine = if servers.is_some() {
        Engine::Postgres
    } else {
        Engine::Sqlite
    };
    let path = dir.join(format!("{name}.avfs"));
    let vault = Vault::create_on(&path, engine, servers.map(|s| s.0)).expect("vault");
    let ws = vault.workspace("main", actor()).expect("main");
    let t = Instant::now();
    for lo in (0..n).step_by(SETUP_BATCH) {
        let hi = (lo + SETUP_BATCH).min(n);
        ws.edit("bench.setup", &[], |e| {
            for i in lo..hi {
                e.write_file(&tree_path(i), &content(i, 0), parents())?;
            }
            Ok(())
        })
        .expect("setup");
    }
    ws.checkpoint_save(Some("base"), None).expect("base");
    eprintln!(
        "setup {name}: {n} files in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let (vault, hosts) = match servers {
        Some((_, proxied)) => {
            drop((ws, vault));
            let hosts: Vec<Arc<Vault>> = (0..env_num("AVFS_BENCH_HOSTS", 1usize).max(1))
                .map(|h| {
                    let far = dir.join(format!("{name}-far-{h}.avfs"));
                    drop(agentvfs::store::attach_store(&far, proxied).expect("attach"));
                    Vault::open(&far).expect("open through the proxy")
                })
                .collect();
            (hosts[0].clone(), hosts)
        }
        None => (vault.clone(), vec![vault]),
    };
    Setup { name, vault, hosts }
}

fn change(ws: &Workspace, i: usize, version: u64) {
    let p = tree_path(i);
    ws.edit("bench.change", &[&p], |e| {
        e.write_file(&p, &content(i, version), parents())
    })
    .expect("edit");
}

fn row(op: &str, n: usize, results: &mut [(&str, Lat)]) {
    let cells: Vec<(String, f64, f64)> = results
        .iter_mut()
        .map(|(name, lat)| (name.to_string(), lat.pct(0.5), lat.pct(0.99)))
        .collect();
    let mut line = format!("{op:<28} {n:>8}");
    for (name, p50, p99) in &cells {
        line += &format!("  {name}: p50 {p50:>7.2} ms p99 {p99:>7.2} ms");
    }
    if let [(_, a50, a99), (_, b50, b99)] = cells.as_slice() {
        line += &format!("  ratio p50 {:.1}x p99 {:.1}x", b50 / a50, b99 / a99);
    }
    println!("{line}");
}

fn main() {
    let Ok(url) = std::env::var("AVFS_BENCH_POSTGRES_URL") else {
        eprintln!("AVFS_BENCH_POSTGRES_URL is not set: run scripts/bench_shared.sh");
        return;
    };
    let rtt: f64 = env_num("AVFS_BENCH_RTT_MS", 1.0);
    let half = Duration::from_secs_f64(rtt / 2000.0);
    let direct = url;
    let url = through_proxy(&direct, half);
    let seconds: u64 = env_num("AVFS_BENCH_SECONDS", 10);
    let pause = Duration::from_millis(env_num("AVFS_BENCH_PAUSE_MS", 0));
    let objects = std::env::var("AVFS_BENCH_OBJECTS").ok();
    println!(
        "shared vault bench: PostgreSQL at {rtt} ms simulated RTT{} vs local SQLite; \
         agents pause {} ms after each checkpoint",
        objects
            .as_deref()
            .map(|o| format!(", objects in {o}"))
            .unwrap_or_default(),
        pause.as_millis()
    );
    floor(&direct, &url);
    for n in env_list("AVFS_BENCH_SIZES", &[1000, 10_000]) {
        let dir = tempfile::tempdir().expect("dir");
        let stamp = std::process::id();
        let name = format!("bench-{stamp}-{n}");
        let mut near = Server::new(Some(&direct), &name).expect("server");
        near.objects = objects.clone().map(|o| format!("{o}/{stamp}-{n}"));
        let server = Server::new(Some(&url), &name).expect("server");
        let setups = [
            make("sqlite", dir.path(), None, n),
            make("postgres", dir.path(), Some((&near, &server)), n),
        ];
        let mut forks: Vec<(&str, Lat)> = Vec::new();
        let mut saves: Vec<(&str, Lat)> = Vec::new();
        let mut restores: Vec<(&str, Lat)> = Vec::new();
        let mut edits: Vec<(&str, Lat)> = Vec::new();
        for s in &setups {
            let ws = s.vault.workspace("main", actor()).expect("main");
            let (mut f, mut c, mut r) = (Lat(vec![]), Lat(vec![]), Lat(vec![]));
            let mut e = Lat(vec![]);
            for k in 0..100u64 {
                let name = format!("fork-{k}");
                f.time(|| s.vault.fork(&ws, &name, None).expect("fork"));
                s.vault.delete_fork(&name).expect("delete fork");
                e.time(|| change(&ws, (k as usize * 37) % n, k + 1));
                let cp = format!("cp-{k}");
                c.time(|| ws.checkpoint_save(Some(&cp), None).expect("save"));
                ws.checkpoint_delete(&cp).expect("delete cp");
                change(&ws, (k as usize * 53) % n, k + 1000);
                r.time(|| ws.checkpoint_restore("base").expect("restore"));
            }
            forks.push((s.name, f));
            saves.push((s.name, c));
            restores.push((s.name, r));
            edits.push((s.name, e));
        }
        row("fork", n, &mut forks);
        row("checkpoint (1 file changed)", n, &mut saves);
        row("restore (1 file changed)", n, &mut restores);
        row("edit (1 file)", n, &mut edits);

        for agents in env_list("AVFS_BENCH_AGENTS", &[16, 128]) {
            floor_under_load(&direct, &url, agents, seconds, pause);
            let mut saves: Vec<(&str, Lat)> = Vec::new();
            let mut edits: Vec<(&str, Lat)> = Vec::new();
            for s in &setups {
                let until = Instant::now() + Duration::from_secs(seconds);
                let lats: Vec<(Vec<Duration>, Vec<Duration>)> = std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..agents)
                        .map(|a| {
                            let vault = &s.hosts[a % s.hosts.len()];
                            let name = format!("agent-{agents}-{a}");
                            let main = vault.workspace("main", actor()).expect("main");
                            vault.fork(&main, &name, None).expect("fork");
                            scope.spawn(move || {
                                let ws = vault.workspace(&name, actor()).expect("fork ws");
                                let (mut save, mut edit) = (Lat(vec![]), Lat(vec![]));
                                let mut k = 0u64;
                                while Instant::now() < until {
                                    k += 1;
                                    edit.time(|| change(&ws, (a * 97 + k as usize) % n, k));
                                    let cp = format!("a{k}");
                                    save.time(|| {
                                        ws.checkpoint_save(Some(&cp), None).expect("save")
                                    });
                                    std::thread::sleep(pause);
                                }
                                (save.0, edit.0)
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().expect("agent"))
                        .collect()
                });
                let (save, edit): (Vec<_>, Vec<_>) = lats.into_iter().unzip();
                let save: Vec<Duration> = save.into_iter().flatten().collect();
                eprintln!(
                    "{}: {} checkpoints by {agents} agents in {seconds} s",
                    s.name,
                    save.len()
                );
                saves.push((s.name, Lat(save)));
                edits.push((s.name, Lat(edit.into_iter().flatten().collect())));
            }
            let hosts = setups[1].hosts.len();
            let agents = if hosts > 1 {
                format!("{agents} agents/{hosts} hosts")
            } else {
                format!("{agents} agents")
            };
            row(&format!("checkpoint, {agents}"), n, &mut saves);
            row(&format!("its edit, {agents}"), n, &mut edits);
        }
        if near.objects.is_some() {
            for by_b in [false, true] {
                repeated_builds(dir.path(), &setups[1].vault, &server, by_b);
            }
        }
    }
}

/// What any one-exchange write costs at this round trip, without avfs: a bare `SELECT 1`,
/// and a one-row upsert committed on its own (one exchange, one WAL flush), each timed 100
/// times through the same proxy.
fn floor(direct: &str, proxied: &str) {
    let mut setup = postgres::Client::connect(direct, postgres::NoTls).expect("connect");
    setup
        .batch_execute("CREATE TABLE IF NOT EXISTS bench_floor (k int PRIMARY KEY, v bigint)")
        .expect("floor table");
    let mut c = postgres::Client::connect(proxied, postgres::NoTls).expect("connect");
    let (mut read, mut write) = (Lat(vec![]), Lat(vec![]));
    for _ in 0..100 {
        read.time(|| c.batch_execute("SELECT 1").expect("select"));
        write.time(|| {
            c.batch_execute(
                "INSERT INTO bench_floor VALUES (1, 0) \
                 ON CONFLICT (k) DO UPDATE SET v = bench_floor.v + 1",
            )
            .expect("upsert")
        });
    }
    setup
        .batch_execute("DROP TABLE bench_floor")
        .expect("drop the floor table");
    for (op, lat) in [
        ("floor: SELECT 1", &mut read),
        ("floor: 1-row commit", &mut write),
    ] {
        println!(
            "{op:<28} {:>8}  postgres: p50 {:>7.2} ms p99 {:>7.2} ms",
            "-",
            lat.pct(0.5),
            lat.pct(0.99)
        );
    }
}

/// The floor of a load run: `clients` bare clients, each on its own connection through the
/// proxy, each upserting its own row twice per loop (the agent's edit and checkpoint, each
/// one exchange and one WAL flush) and then pausing, for `seconds`. Prints p50/p99 of the
/// second commit and how many loops ran.
fn floor_under_load(direct: &str, proxied: &str, clients: usize, seconds: u64, pause: Duration) {
    let mut setup = postgres::Client::connect(direct, postgres::NoTls).expect("connect");
    setup
        .batch_execute("CREATE TABLE IF NOT EXISTS bench_floor_load (k int PRIMARY KEY, v bigint)")
        .expect("floor table");
    let until = Instant::now() + Duration::from_secs(seconds);
    let commits: Vec<Duration> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|a| {
                let mut c = postgres::Client::connect(proxied, postgres::NoTls).expect("connect");
                scope.spawn(move || {
                    let upsert = format!(
                        "INSERT INTO bench_floor_load VALUES ({a}, 0) \
                         ON CONFLICT (k) DO UPDATE SET v = bench_floor_load.v + 1"
                    );
                    let mut lat = Lat(vec![]);
                    while Instant::now() < until {
                        c.batch_execute(&upsert).expect("upsert");
                        lat.time(|| c.batch_execute(&upsert).expect("upsert"));
                        std::thread::sleep(pause);
                    }
                    lat.0
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client"))
            .collect()
    });
    setup
        .batch_execute("DROP TABLE bench_floor_load")
        .expect("drop the floor table");
    let loops = commits.len();
    let mut lat = Lat(commits);
    println!(
        "{:<28} {:>8}  postgres: p50 {:>7.2} ms p99 {:>7.2} ms ({loops} loops)",
        format!("floor: {clients} clients"),
        "-",
        lat.pct(0.5),
        lat.pct(0.99)
    );
}

/// A repeated build on a second host: host B reads every source file (each over the
/// inline size, so each in the object store) in a fresh process-like handle per build,
/// and 5% of them change between builds: changed by host A (`by_b` false: B's cache has
/// never seen the new versions) or by host B itself (an agent that edits and rebuilds on
/// its own host: B's cache keeps what B uploads). Prints the share of object reads B's
/// host cache served.
fn repeated_builds(dir: &Path, vault_a: &Arc<Vault>, server: &Server, by_b: bool) {
    const FILES: usize = 200;
    const BUILDS: usize = 10;
    let who = if by_b { "B" } else { "A" };
    let source = |i: usize| VPath::parse(&format!("build{who}/src{i:03}.c")).expect("path");
    let body =
        |i: usize, v: usize| format!("/* {who} {i} v{v} */\n{}", "x".repeat(8192)).into_bytes();
    let a = vault_a.workspace("main", actor()).expect("main");
    a.edit("bench.build", &[], |e| {
        for i in 0..FILES {
            e.write_file(&source(i), &body(i, 0), parents())?;
        }
        Ok(())
    })
    .expect("sources");
    let b_path = dir.join(format!("host-b-{who}.avfs"));
    drop(agentvfs::store::attach_store(&b_path, server).expect("attach on host B"));
    let mut warm = (0, 0);
    let mut all = (0, 0);
    for build in 0..BUILDS {
        let before = agentvfs::store::object_cache_counts();
        {
            // A new handle per build, as a new `avfs` process on host B would open.
            let b = Vault::open(&b_path).expect("open on host B");
            let ws = b.workspace("main", actor()).expect("main on B");
            ws.read(|v| {
                for i in 0..FILES {
                    v.read(&source(i))?;
                }
                Ok(())
            })
            .expect("build reads");
        }
        let after = agentvfs::store::object_cache_counts();
        let (served, fetched) = (after.0 - before.0, after.1 - before.1);
        all = (all.0 + served, all.1 + fetched);
        if build > 0 {
            warm = (warm.0 + served, warm.1 + fetched);
        }
        // 5% of the sources change before the next build, on host A or on host B.
        let change = |ws: &Workspace| {
            ws.edit("bench.build", &[], |e| {
                for k in 0..FILES / 20 {
                    let i = (build * 31 + k * 7) % FILES;
                    e.write_file(&source(i), &body(i, build + 1), parents())?;
                }
                Ok(())
            })
            .expect("change")
        };
        if by_b {
            let b = Vault::open(&b_path).expect("open on host B");
            change(&b.workspace("main", actor()).expect("main on B"));
        } else {
            change(&a);
        }
    }
    let share = |(s, f): (u64, u64)| 100.0 * s as f64 / (s + f).max(1) as f64;
    println!(
        "repeated build on host B ({FILES} sources of 8 KiB, {BUILDS} builds, 5% changed between builds by host {who}): \
         host cache served {:.1}% of object reads after the first build ({} of {}), {:.1}% with the cold first build",
        share(warm),
        warm.0,
        warm.0 + warm.1,
        share(all)
    );
}
