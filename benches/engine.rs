//! Criterion benchmarks of the vault engine through the library API.
//!
//! Run: `cargo bench --bench engine` (whole suite, a few minutes on 2 cores per engine), or a
//! part of it with a filter, e.g. `cargo bench --bench engine -- 'fork|checkpoint'`. Every
//! benchmark runs once per storage engine built in (`--features lmdb` adds LMDB), its id
//! starting with the engine: `sqlite/fork/1000`, `lmdb/fork/1000`.
//! `AVFS_BENCH_ENGINES=lmdb` measures only the engines named.
//!
//! Groups:
//! - `write/{1KiB,64KiB,1MiB}`: one `Workspace::edit` writing one file (new content each
//!   iteration, so nothing is deduplicated); throughput in bytes.
//! - `read/{1KiB,64KiB,1MiB}`: `Workspace::read` + `View::read` of one committed file.
//! - `read_64_files/1MiB`: the same, cycling over 64 files (64 MiB, past SQLite's cache).
//! - `list/{10,100,1000}`: `View::list` of a committed directory with that many entries.
//! - `import/...`: `service::transfer::import` of a generated host tree into a fresh vault.
//! - At 1k, 10k and 100k files (each tree built once, outside the timed code):
//!   - `fork/N`: `Vault::fork` of the main workspace (the fork is deleted, untimed, after
//!     each iteration).
//!   - `edit_10_files/N`: one `Workspace::edit` that rewrites 10 files spread over the tree.
//!   - `checkpoint_save_after_10/N`: 10 files changed (untimed, one `edit`), then the timed
//!     `checkpoint_save`.
//!   - `checkpoint_save_pending_10/N`: the same, but the 10 changes are made with
//!     `edit_batch`, so they are still pending in the overlay and the save folds them.
//!   - `checkpoint_restore_after_10/N`: 10 files changed since checkpoint `base` (untimed),
//!     then the timed `checkpoint_restore("base")`.
//!   - `checkpoint_restore_pending_10/N`: the same with the changes pending (`edit_batch`).
//!
//! After each fork / edit / checkpoint / restore benchmark, a `latency ...` line on stderr
//! gives the median, p90, p99 and max over every timed run: Criterion reports means, and
//! rare slow commits (SQLite WAL checkpoints) dominate those.
//!
//! Timings never feed assertions; this file only measures. Setup progress and sizes are
//! printed to stderr. Environment knobs:
//! - `AVFS_BENCH_SIZES=1000,10000` limits the tree sizes (the trees are built even when a
//!   filter skips their benchmarks, so this also saves setup time).
//! - `AVFS_BENCH_DIR` chooses where the temporary vaults live (default: the system temp dir).

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentvfs::model::path::VPath;
use agentvfs::model::{Actor, Vault, Workspace, WriteOptions};
use agentvfs::service::transfer::{self, ImportOptions};
use agentvfs::store::Engine;
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use tempfile::TempDir;

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;
/// Files written per `edit` transaction while building the large trees.
const SETUP_BATCH: usize = 4000;
/// Tree sizes for fork / checkpoint / restore.
const DEFAULT_SIZES: &[usize] = &[1_000, 10_000, 100_000];
/// Measurement time of the fork / edit / checkpoint / restore groups (noisier than the rest).
const SCALE_TIME: Duration = Duration::from_secs(4);

// ---------------------------------------------------------------------------------------
// Fixtures

struct Fixture {
    vault: Arc<Vault>,
    ws: Workspace,
    // Dropped last: the vault file lives in it.
    _dir: TempDir,
}

fn actor() -> Actor {
    Actor {
        actor: "bench".into(),
        source: "sdk".into(),
    }
}

fn tempdir() -> TempDir {
    match std::env::var_os("AVFS_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).expect("temp dir in AVFS_BENCH_DIR"),
        None => tempfile::tempdir().expect("temp dir"),
    }
}

fn fixture() -> Fixture {
    let dir = tempdir();
    let vault = Vault::create_in(&dir.path().join("bench.avfs"), engine()).expect("create vault");
    let ws = vault.workspace("main", actor()).expect("main workspace");
    Fixture {
        vault,
        ws,
        _dir: dir,
    }
}

/// The vault's bytes on disk, as its engine counts them (its side files, or a sled
/// vault's whole directory).
fn vault_bytes(f: &Fixture) -> u64 {
    f.vault.disk_size()
}

/// The engines this run measures: `AVFS_BENCH_ENGINES=sqlite,lmdb`, else every one built.
fn engines() -> Vec<Engine> {
    match std::env::var("AVFS_BENCH_ENGINES") {
        Ok(list) => list
            .split(',')
            .map(|e| e.trim().parse().expect("AVFS_BENCH_ENGINES names engines"))
            .collect(),
        // A server engine needs its server: benches/shared.rs measures PostgreSQL.
        Err(_) => Engine::built_in()
            .into_iter()
            .filter(|e| !e.is_server())
            .collect(),
    }
}

thread_local! {
    static ENGINE: std::cell::Cell<Engine> = const { std::cell::Cell::new(Engine::Sqlite) };
}

/// The engine the benchmarks being run make their vaults in.
fn engine() -> Engine {
    ENGINE.with(|e| e.get())
}

/// A benchmark group's name: `ENGINE/group` (`sqlite/fork/1000` …).
fn group_name(group: &str) -> String {
    format!("{}/{group}", engine().name())
}

fn vpath(s: &str) -> VPath {
    VPath::parse(s).expect("valid path")
}

fn parents() -> WriteOptions {
    WriteOptions {
        parents: true,
        ..WriteOptions::default()
    }
}

/// Deterministic pseudo-random bytes (splitmix64), so runs are comparable.
fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Make `buf` unique for iteration `n`: every 64 KiB block (so every 256 KiB chunk of a
/// large file) changes, and nothing is deduplicated against earlier iterations.
fn stamp(buf: &mut [u8], n: u64) {
    for off in (0..buf.len()).step_by(64 * KIB) {
        let end = (off + 8).min(buf.len());
        buf[off..end].copy_from_slice(&n.to_le_bytes()[..end - off]);
    }
}

/// Path of file `i` in a source-like layout: 100 files per directory, 10 directories per
/// module (`src/m007/d3/f42.rs`), so 100k files make 100 modules and 1,000 directories.
fn tree_path(i: usize) -> VPath {
    vpath(&format!(
        "src/m{:03}/d{}/f{:02}.rs",
        i / 1000,
        (i / 100) % 10,
        i % 100
    ))
}

/// A small source-like file (about 200 bytes), unique per index.
fn tree_content(i: usize, version: u64) -> Vec<u8> {
    format!(
        "// file {i}, version {version}\npub fn f{i}() -> u64 {{\n    let x = {i};\n    \
         x.wrapping_mul(2654435761) ^ {version}\n}}\n\n#[cfg(test)]\nmod tests {{\n    \
         #[test]\n    fn t() {{ assert_eq!(super::f{i}() & 0, 0); }}\n}}\n"
    )
    .into_bytes()
}

/// Build a vault whose main workspace holds `n` files, in transactions of `SETUP_BATCH`.
fn build_tree(n: usize) -> Fixture {
    let f = fixture();
    let start = Instant::now();
    for lo in (0..n).step_by(SETUP_BATCH) {
        let hi = (lo + SETUP_BATCH).min(n);
        f.ws.edit("bench.setup", &[], |e| {
            for i in lo..hi {
                e.write_file(&tree_path(i), &tree_content(i, 0), parents())?;
            }
            Ok(())
        })
        .expect("setup batch");
    }
    eprintln!(
        "setup: {n} files in {:.2} s ({:.0} files/s), vault {:.1} MB",
        start.elapsed().as_secs_f64(),
        n as f64 / start.elapsed().as_secs_f64(),
        vault_bytes(&f) as f64 / 1e6
    );
    f
}

/// The 10 files a "10 changes" step rewrites: spread evenly over the tree, so the changes
/// touch up to 10 different directories.
fn ten_paths(n: usize) -> Vec<(usize, VPath)> {
    (0..10)
        .map(|k| {
            let i = k * (n / 10) + 7;
            (i, tree_path(i))
        })
        .collect()
}

/// Rewrite the 10 files with content unique to `version`. `pending` uses `edit_batch`, which
/// leaves the changes in the overlay instead of folding them.
fn change_ten(ws: &Workspace, paths: &[(usize, VPath)], version: u64, pending: bool) {
    let f = |e: &mut agentvfs::model::Edit<'_>| -> agentvfs::Result<()> {
        for (i, p) in paths {
            e.write_file(p, &tree_content(*i, version), WriteOptions::default())?;
        }
        Ok(())
    };
    if pending {
        ws.edit_batch("bench.change", &[], f)
    } else {
        ws.edit("bench.change", &[], f)
    }
    .expect("change 10 files");
}

// ---------------------------------------------------------------------------------------
// Benchmarks

fn size_label(size: usize) -> String {
    if size >= MIB {
        format!("{}MiB", size / MIB)
    } else {
        format!("{}KiB", size / KIB)
    }
}

fn bench_write_read(c: &mut Criterion) {
    const SIZES: &[usize] = &[KIB, 64 * KIB, MIB];
    let mut g = c.benchmark_group(group_name("write"));
    g.sample_size(20);
    for &size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::from_parameter(size_label(size)), |b| {
            let path = vpath("/data/file.bin");
            let mut buf = payload(size, size as u64);
            let mut fx = fixture();
            let mut n = 0u64;
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    // A fresh vault now and then (untimed) keeps the file from growing
                    // without bound over thousands of iterations.
                    if n.is_multiple_of(256) {
                        fx = fixture();
                    }
                    stamp(&mut buf, n);
                    let t = Instant::now();
                    fx.ws
                        .edit("write", &[&path], |e| e.write_file(&path, &buf, parents()))
                        .expect("write");
                    total += t.elapsed();
                }
                total
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group(group_name("read"));
    g.sample_size(20);
    let fx = fixture();
    for &size in SIZES {
        let path = vpath(&format!("/data/{}.bin", size_label(size)));
        let buf = payload(size, size as u64 + 1);
        fx.ws
            .edit("write", &[&path], |e| e.write_file(&path, &buf, parents()))
            .expect("write");
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::from_parameter(size_label(size)), |b| {
            b.iter(|| {
                let data = fx.ws.read(|v| v.read(&path)).expect("read");
                assert_eq!(data.len(), size);
                black_box(data)
            });
        });
    }
    g.finish();

    // The same 1 MiB read, cycling over 64 different files (64 MiB, well past SQLite's
    // page cache), so the bytes come from the OS page cache rather than SQLite's own.
    let mut g = c.benchmark_group(group_name("read_64_files"));
    g.sample_size(20);
    let files: Vec<VPath> = (0..64)
        .map(|i| vpath(&format!("/many/{i:02}.bin")))
        .collect();
    for (i, p) in files.iter().enumerate() {
        let buf = payload(MIB, 5000 + i as u64);
        fx.ws
            .edit("write", &[p], |e| e.write_file(p, &buf, parents()))
            .expect("write");
    }
    g.throughput(Throughput::Bytes(MIB as u64));
    g.bench_function(BenchmarkId::from_parameter("1MiB"), |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = (i + 1) % files.len();
            let data = fx.ws.read(|v| v.read(&files[i])).expect("read");
            assert_eq!(data.len(), MIB);
            black_box(data)
        });
    });
    g.finish();
}

fn bench_list(c: &mut Criterion) {
    let mut g = c.benchmark_group(group_name("list"));
    g.sample_size(20);
    let fx = fixture();
    for &n in &[10usize, 100, 1000] {
        let dir = vpath(&format!("/list{n}"));
        fx.ws
            .edit("bench.setup", &[], |e| {
                for i in 0..n {
                    let p = dir.join(&format!("entry-{i:04}.txt"));
                    e.write_file(&p, format!("entry {i}\n").as_bytes(), parents())?;
                }
                Ok(())
            })
            .expect("setup");
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                let children = fx.ws.read(|v| v.list(&dir)).expect("list");
                assert_eq!(children.len(), n);
                black_box(children)
            });
        });
    }
    g.finish();
}

/// A deterministic source-like host tree: `small` text files of 1-8 KiB in directories of
/// 50, plus `large` binaries of 64 KiB-1 MiB. Returns (file count, total bytes).
fn generate_host_tree(root: &Path, small: usize, large: usize) -> (u64, u64) {
    let mut bytes = 0u64;
    for i in 0..small {
        let dir = root.join(format!("pkg{:02}/mod{:02}", i / 500, (i / 50) % 10));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let len = KIB + (i * 7919) % (7 * KIB);
        let mut text = Vec::with_capacity(len);
        let mut line = 0usize;
        while text.len() < len {
            text.extend_from_slice(
                format!("    let value_{line} = compute({i}, {line}); // generated\n").as_bytes(),
            );
            line += 1;
        }
        text.truncate(len);
        std::fs::write(dir.join(format!("file{i:05}.rs")), &text).expect("write");
        bytes += len as u64;
    }
    let bin = root.join("assets");
    std::fs::create_dir_all(&bin).expect("mkdir");
    for i in 0..large {
        let len = 64 * KIB + (i * 104_729) % (960 * KIB);
        std::fs::write(
            bin.join(format!("blob{i:03}.bin")),
            payload(len, 1000 + i as u64),
        )
        .expect("write");
        bytes += len as u64;
    }
    ((small + large) as u64, bytes)
}

fn bench_import(c: &mut Criterion) {
    let host = tempdir();
    let (files, bytes) = generate_host_tree(host.path(), 2000, 40);
    eprintln!("import tree: {files} files, {:.1} MB", bytes as f64 / 1e6);
    let mut g = c.benchmark_group(group_name("import"));
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function(
        BenchmarkId::from_parameter(format!("{files}files_{}MB", bytes / 1_000_000)),
        |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let fx = fixture();
                    let t = Instant::now();
                    let report = transfer::import(
                        &fx.ws,
                        host.path(),
                        &VPath::root(),
                        ImportOptions::default(),
                        &mut |_, _| {},
                    )
                    .expect("import");
                    total += t.elapsed();
                    assert_eq!(report.files, files);
                    drop(fx);
                }
                total
            });
        },
    );
    g.finish();
}

fn sizes() -> Vec<usize> {
    match std::env::var("AVFS_BENCH_SIZES") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => DEFAULT_SIZES.to_vec(),
    }
}

/// Every timed run of one benchmark, for the latency distribution printed after it.
/// Criterion reports means; here rare slow commits (SQLite write-ahead-log checkpoints with
/// fsync) dominate the mean, so the median and tail are printed too (stderr).
#[derive(Default)]
struct Latencies(Vec<Duration>);

impl Latencies {
    /// Time `f`, remember the duration and return it.
    fn time<R>(&mut self, f: impl FnOnce() -> R) -> Duration {
        let t = Instant::now();
        black_box(f());
        let d = t.elapsed();
        self.0.push(d);
        d
    }

    fn report(mut self, id: &str) {
        if self.0.is_empty() {
            return;
        }
        self.0.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = |q: f64| ms(self.0[((self.0.len() - 1) as f64 * q).round() as usize]);
        let mean = ms(self.0.iter().sum::<Duration>()) / self.0.len() as f64;
        eprintln!(
            "latency {id}: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms, \
             mean {mean:.3} ms over {} runs",
            at(0.5),
            at(0.9),
            at(0.99),
            ms(self.0[self.0.len() - 1]),
            self.0.len()
        );
    }
}

fn bench_scale(c: &mut Criterion) {
    for n in sizes() {
        let fx = build_tree(n);
        let ws = &fx.ws;
        let ten = ten_paths(n);
        let mut version = 1u64;

        let mut g = c.benchmark_group(group_name("fork"));
        g.sample_size(20).measurement_time(SCALE_TIME);
        let mut lat = Latencies::default();
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            let mut k = 0u64;
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    k += 1;
                    let name = format!("fork-{k}");
                    total += lat.time(|| fx.vault.fork(ws, &name, None).expect("fork"));
                    fx.vault.delete_fork(&name).expect("delete fork");
                }
                total
            });
        });
        g.finish();
        lat.report(&format!("fork/{n}"));

        let mut g = c.benchmark_group(group_name("edit_10_files"));
        g.sample_size(20).measurement_time(SCALE_TIME);
        let mut lat = Latencies::default();
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    version += 1;
                    total += lat.time(|| change_ten(ws, &ten, version, false));
                }
                total
            });
        });
        g.finish();
        lat.report(&format!("edit_10_files/{n}"));

        for (group, pending) in [
            ("checkpoint_save_after_10", false),
            ("checkpoint_save_pending_10", true),
        ] {
            let mut g = c.benchmark_group(group_name(group));
            g.sample_size(20).measurement_time(SCALE_TIME);
            let mut lat = Latencies::default();
            g.bench_function(BenchmarkId::from_parameter(n), |b| {
                let mut k = 0u64;
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        version += 1;
                        k += 1;
                        change_ten(ws, &ten, version, pending);
                        let name = format!("{group}-{k}");
                        total += lat.time(|| ws.checkpoint_save(Some(&name), None).expect("save"));
                        ws.checkpoint_delete(&name).expect("delete checkpoint");
                    }
                    total
                });
            });
            g.finish();
            lat.report(&format!("{group}/{n}"));
        }

        ws.checkpoint_save(Some("base"), None).expect("save base");
        for (group, pending) in [
            ("checkpoint_restore_after_10", false),
            ("checkpoint_restore_pending_10", true),
        ] {
            let mut g = c.benchmark_group(group_name(group));
            g.sample_size(20).measurement_time(SCALE_TIME);
            let mut lat = Latencies::default();
            g.bench_function(BenchmarkId::from_parameter(n), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        version += 1;
                        change_ten(ws, &ten, version, pending);
                        total += lat.time(|| ws.checkpoint_restore("base").expect("restore"));
                    }
                    total
                });
            });
            g.finish();
            lat.report(&format!("{group}/{n}"));
        }
        eprintln!(
            "after the {n}-file benches: vault {:.1} MB",
            vault_bytes(&fx) as f64 / 1e6
        );
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .without_plots()
        .configure_from_args()
}

fn main() {
    let mut c = config();
    for e in engines() {
        ENGINE.with(|cell| cell.set(e));
        eprintln!("== engine {}", e.name());
        bench_write_read(&mut c);
        bench_list(&mut c);
        bench_import(&mut c);
        bench_scale(&mut c);
    }
    c.final_summary();
}
