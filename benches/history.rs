//! Criterion benchmarks of the history engine at 100k files: `Vault::diff` and
//! `Vault::merge` (dry run) with 10 and 1,000 changes.
//!
//! Run: `cargo bench --bench history` (a few minutes on 2 cores, most of it building the
//! tree once).
//!
//! Setup (untimed, once): the main workspace gets 100,000 small source-like files in 400
//! directories (`src/mNN/dNN/fNNN.rs`: 20 modules x 20 directories x 250 files), written in
//! transactions of 4,000 files, then checkpoint `base`. Forks `f10` and `f1000` are taken at
//! `base`; each gets its changes in one `edit`: files spread evenly over the tree, one in ten
//! deleted, one in ten gaining a new sibling file, the rest rewritten. The parent (`main`)
//! gets as many changes of its own to *other* files in the same directories (the 10 undone
//! before the 1,000 are made), so a merge has to descend into every changed directory on
//! both sides and combine them.
//!
//! Timed:
//! - `history/diff/{10,1000}`: `Vault::diff(main:base, f<N> live)`.
//! - `history/merge_dry_run/{10,1000}`: `Vault::merge("f<N>", main, Fail, dry_run = true)`:
//!   the three-way merge computed and its result trees stored, but the target not moved,
//!   so every iteration does the same work.
//!
//! Both run with the vault's object cache warm (the first iteration loads the trees).
//! Timings never feed assertions; the untimed checks only make sure the work is real.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentvfs::model::diff::StateRef;
use agentvfs::model::merge::MergeOptions;
use agentvfs::model::path::VPath;
use agentvfs::model::{Actor, Vault, Workspace, WriteOptions};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tempfile::TempDir;

const FILES: usize = 100_000;
const MODULES: usize = 20;
const DIRS_PER_MODULE: usize = 20;
const FILES_PER_DIR: usize = FILES / (MODULES * DIRS_PER_MODULE);
const SETUP_BATCH: usize = 4_000;
const CHANGES: &[usize] = &[10, 1_000];

fn actor() -> Actor {
    Actor {
        actor: "bench".into(),
        source: "sdk".into(),
    }
}

fn vpath(s: &str) -> VPath {
    VPath::parse(s).expect("valid path")
}

fn dir_of(i: usize) -> String {
    let d = i / FILES_PER_DIR;
    format!(
        "src/m{:02}/d{:02}",
        d / DIRS_PER_MODULE,
        d % DIRS_PER_MODULE
    )
}

fn file_path(i: usize) -> VPath {
    vpath(&format!("{}/f{:03}.rs", dir_of(i), i % FILES_PER_DIR))
}

/// A small source-like file (about 200 bytes), unique per index and version.
fn content(i: usize, version: u64) -> Vec<u8> {
    format!(
        "// file {i}, version {version}\npub fn f{i}() -> u64 {{\n    let x = {i};\n    \
         x.wrapping_mul(2654435761) ^ {version}\n}}\n\n#[cfg(test)]\nmod tests {{\n    \
         #[test]\n    fn t() {{ assert_eq!(super::f{i}() & 0, 0); }}\n}}\n"
    )
    .into_bytes()
}

fn parents() -> WriteOptions {
    WriteOptions {
        parents: true,
        ..WriteOptions::default()
    }
}

/// `n` changes to files spread evenly over the tree, at `offset` within each stride (so
/// different offsets touch disjoint files in the same directories): one in ten deleted, one
/// in ten gaining a new sibling, the rest rewritten. One transaction.
fn change(ws: &Workspace, n: usize, offset: usize, tag: &str, version: u64) {
    let stride = FILES / n;
    assert!(offset < stride);
    ws.edit("bench.change", &[], |e| {
        for k in 0..n {
            let i = k * stride + offset;
            match k % 10 {
                0 => e.remove(&file_path(i), false)?,
                1 => {
                    let p = vpath(&format!("{}/new_{tag}_{i}.rs", dir_of(i)));
                    e.write_file(&p, &content(i, version), parents())?;
                }
                _ => e.write_file(&file_path(i), &content(i, version), parents())?,
            }
        }
        Ok(())
    })
    .expect("changes");
}

struct Fixture {
    vault: Arc<Vault>,
    main: Workspace,
    _dir: TempDir,
}

fn build() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let vault = Vault::create(&dir.path().join("history.avfs")).expect("create vault");
    let main = vault.workspace("main", actor()).expect("main");
    let start = Instant::now();
    for lo in (0..FILES).step_by(SETUP_BATCH) {
        let hi = (lo + SETUP_BATCH).min(FILES);
        main.edit("bench.setup", &[], |e| {
            for i in lo..hi {
                e.write_file(&file_path(i), &content(i, 0), parents())?;
            }
            Ok(())
        })
        .expect("setup batch");
    }
    main.checkpoint_save(Some("base"), None)
        .expect("checkpoint");
    for &n in CHANGES {
        let name = format!("f{n}");
        vault.fork(&main, &name, Some("base")).expect("fork");
        let fork = vault.workspace(&name, actor()).expect("fork workspace");
        change(&fork, n, 7, "fork", 1);
    }
    eprintln!(
        "setup: {FILES} files in {} directories, checkpoint and forks in {:.1} s",
        MODULES * DIRS_PER_MODULE,
        start.elapsed().as_secs_f64()
    );
    Fixture {
        vault,
        main,
        _dir: dir,
    }
}

fn history(c: &mut Criterion) {
    let f = build();
    let base = StateRef::Checkpoint {
        workspace: "main".into(),
        name: "base".into(),
    };
    let mut g = c.benchmark_group("history");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));

    for &n in CHANGES {
        let live = StateRef::Live(format!("f{n}"));
        let changes = f.vault.diff(&base, &live).expect("diff");
        // n/10 deletions, n/10 additions, the rest modified.
        assert_eq!(changes.len(), n, "diff of f{n}");
        g.bench_with_input(BenchmarkId::new("diff", n), &n, |b, _| {
            b.iter(|| black_box(f.vault.diff(&base, &live).expect("diff")))
        });
    }

    // A 1,000-change merge takes ~150 ms: give its 10 samples room.
    g.measurement_time(Duration::from_secs(10));
    for (round, &n) in CHANGES.iter().enumerate() {
        // The parent's own n changes: disjoint files in the same directories. The previous
        // round's changes are undone first, so the parent differs from `base` by exactly n.
        if round > 0 {
            f.main.undo().expect("undo the previous round");
        }
        change(&f.main, n, 53, "parent", 2);
        let fork = format!("f{n}");
        let report = f
            .vault
            .merge(
                &fork,
                &f.main,
                MergeOptions {
                    dry_run: true,
                    ..Default::default()
                },
            )
            .expect("merge");
        assert!(report.conflicts.is_empty() && !report.applied);
        assert_eq!(report.changes.len(), n, "merge of {fork}");
        g.bench_with_input(BenchmarkId::new("merge_dry_run", n), &n, |b, _| {
            b.iter(|| {
                black_box(
                    f.vault
                        .merge(
                            &fork,
                            &f.main,
                            MergeOptions {
                                dry_run: true,
                                ..Default::default()
                            },
                        )
                        .expect("merge"),
                )
            })
        });
    }
    g.finish();
}

criterion_group!(benches, history);
criterion_main!(benches);
