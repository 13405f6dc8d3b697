//! One view of a sled vault. A write buffers its changes in memory and applies them as one
//! sled transaction over every touched tree (atomic across trees); its reads see its buffer.
//! A read sees the state committed when it began, though sled has no snapshots: a commit
//! made while reads are open keeps the values it replaces (`Versions`), and a read takes
//! the oldest value replaced after its start over what the tree holds now. A prefix scan
//! merges either layer (the write's buffer, the read's replaced values) into the tree's
//! range.

use std::collections::BTreeMap;
use std::ops::Bound;

use sled::{Transactional, Tree};

use super::{Gate, sled_error};
use crate::error::{Error, Result};
use crate::store::kv::{Buffer, KvRead, KvWrite, Table, Val, Visit, merge, prefix_end};
use crate::store::lock::lock;

/// Per key, the value before each commit (by sequence number) that replaced it.
type Replaced = BTreeMap<Vec<u8>, BTreeMap<u64, Option<Vec<u8>>>>;

/// What commits replaced while reads were open: for each table and key, the value before
/// each commit (by its sequence number) that changed it; `None`: the key was absent.
#[derive(Default)]
pub(super) struct Versions {
    /// The sequence number of the newest commit.
    seq: u64,
    /// Open reads by the sequence number they started at.
    readers: BTreeMap<u64, usize>,
    old: [Replaced; Table::COUNT],
}

impl Versions {
    /// A read begins: the state it sees.
    pub(super) fn begin(&mut self) -> u64 {
        *self.readers.entry(self.seq).or_default() += 1;
        self.seq
    }

    /// A read ends; with no read open, no replaced value is needed. (Values are dropped only
    /// then: a process whose reads always overlap keeps every replaced value until they
    /// stop.)
    pub(super) fn end(&mut self, at: u64) {
        if let Some(n) = self.readers.get_mut(&at) {
            *n -= 1;
            if *n == 0 {
                self.readers.remove(&at);
            }
        }
        if self.readers.is_empty() {
            self.old = Default::default();
        }
    }

    /// The value of `key` as of `at`, if a later commit replaced it.
    fn as_of(&self, t: Table, key: &[u8], at: u64) -> Option<Option<Vec<u8>>> {
        let versions = self.old[t as usize].get(key)?;
        versions.range(at + 1..).next().map(|(_, v)| v.clone())
    }
}

/// A read's snapshot: the replaced values, the sequence number it began at, and the gate
/// that keeps each of its lookups off a half-applied commit.
pub(super) struct Snapshot<'a> {
    pub(super) versions: &'a std::sync::Mutex<Versions>,
    pub(super) at: u64,
    pub(super) gate: &'a Gate,
}

/// The trees of a vault, and a write's buffered changes or a read's snapshot.
pub(super) struct View<'a> {
    trees: &'a [Tree],
    buf: [Buffer; Table::COUNT],
    snapshot: Option<Snapshot<'a>>,
}

impl<'a> View<'a> {
    pub(super) fn write(trees: &'a [Tree]) -> Self {
        View {
            trees,
            buf: Default::default(),
            snapshot: None,
        }
    }

    pub(super) fn read(trees: &'a [Tree], snapshot: Snapshot<'a>) -> Self {
        View {
            trees,
            buf: Default::default(),
            snapshot: Some(snapshot),
        }
    }

    /// Bytes of keys and values the write has buffered.
    pub(super) fn size(&self) -> u64 {
        self.buf
            .iter()
            .flat_map(|b| b.iter())
            .map(|(k, v)| (k.len() + v.as_ref().map_or(0, Vec::len)) as u64)
            .sum()
    }

    pub(super) fn is_clean(&self) -> bool {
        self.buf.iter().all(BTreeMap::is_empty)
    }

    /// Apply the buffered writes in one transaction: all of them land or none does. With
    /// reads open, the values they replace are kept for them first.
    pub(super) fn commit(self, versions: &std::sync::Mutex<Versions>) -> Result<()> {
        let mut v = lock(versions);
        let seq = v.seq + 1;
        if !v.readers.is_empty() {
            for (i, buf) in self.buf.iter().enumerate() {
                for key in buf.keys() {
                    let before = self.trees[i].get(key).map_err(sled_error)?;
                    v.old[i]
                        .entry(key.clone())
                        .or_default()
                        .insert(seq, before.map(|b| b.to_vec()));
                }
            }
        }
        let touched: Vec<(usize, sled::Batch)> = self
            .buf
            .into_iter()
            .enumerate()
            .filter(|(_, b)| !b.is_empty())
            .map(|(i, b)| {
                let mut batch = sled::Batch::default();
                for (k, v) in b {
                    match v {
                        Some(v) => batch.insert(k, v),
                        None => batch.remove(k),
                    }
                }
                (i, batch)
            })
            .collect();
        let trees: Vec<Tree> = touched
            .iter()
            .map(|(i, _)| self.trees[*i].clone())
            .collect();
        trees
            .as_slice()
            .transaction(|views| {
                for (view, (_, batch)) in views.iter().zip(&touched) {
                    view.apply_batch(batch)?;
                }
                Ok::<(), sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                sled::transaction::TransactionError::Storage(e) => sled_error(e),
                sled::transaction::TransactionError::Abort(()) => {
                    Error::Storage("a sled transaction was aborted".into())
                }
            })?;
        v.seq = seq;
        Ok(())
    }

    /// A read's lookups go through the gate; a write's need not (it is the only committer).
    fn gated<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.snapshot {
            Some(s) => s.gate.read(f),
            None => f(),
        }
    }
}

impl KvRead for View<'_> {
    fn get(&self, t: Table, key: &[u8]) -> Result<Option<Val<'_>>> {
        if let Some(v) = self.buf[t as usize].get(key) {
            return Ok(v.as_deref().map(Val::Ref));
        }
        self.gated(|| {
            let now = self.trees[t as usize].get(key).map_err(sled_error)?;
            if let Some(s) = &self.snapshot
                && let Some(then) = lock(s.versions).as_of(t, key, s.at)
            {
                return Ok(then.map(|v| Val::Held(Box::new(v))));
            }
            Ok(now.map(|v| Val::Held(Box::new(v))))
        })
    }

    fn scan(&self, t: Table, prefix: &[u8], rev: bool, visit: &mut Visit<'_>) -> Result<()> {
        self.gated(|| {
            let end = prefix_end(prefix);
            let bounds = (Bound::Included(prefix), end.as_ref().map(Vec::as_slice));
            let stored = self.trees[t as usize].range::<&[u8], _>(bounds);
            // The layer over the tree: this write's changes, or what commits since this
            // read began replaced.
            let replaced: Buffer;
            let layer = match &self.snapshot {
                None => &self.buf[t as usize],
                Some(s) => {
                    let v = lock(s.versions);
                    replaced = v.old[t as usize]
                        .range::<[u8], _>(bounds)
                        .filter_map(|(k, versions)| {
                            let (_, then) = versions.range(s.at + 1..).next()?;
                            Some((k.clone(), then.clone()))
                        })
                        .collect();
                    &replaced
                }
            };
            let layered = layer.range::<[u8], _>(bounds);
            let stored = stored.map(|r| r.map_err(sled_error));
            if rev {
                merge(stored.rev(), layered.rev(), true, visit)
            } else {
                merge(stored, layered, false, visit)
            }
        })
    }
}

impl KvWrite for View<'_> {
    fn put(&mut self, t: Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.buf[t as usize].insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    fn del(&mut self, t: Table, key: &[u8]) -> Result<()> {
        self.buf[t as usize].insert(key.to_vec(), None);
        Ok(())
    }
}
