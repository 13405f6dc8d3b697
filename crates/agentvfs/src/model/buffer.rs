//! `ContentBuffer`: a file's content while it is being changed, kept as the chunks written
//! since it was opened over the content it was opened with (the base). The base stays in the
//! store and is read only where it is needed: opening a large file for writing costs nothing,
//! a write loads only the chunks it changes in part, and a read of an unchanged range goes to
//! the store as for a file that is not open.
//!
//! The buffer does no I/O. It says which chunks it needs from the base (`missing_for_write`,
//! `changes`) and where their bytes are (`base_span`); the caller reads them and hands them
//! back (`insert_base`), so a caller holding a lock can read with it released.

use std::collections::BTreeMap;

use super::id::ObjectId;
use super::node::{CHUNK_SIZE, ChunkEdit, ChunkEdits};

/// Chunk indices as disjoint, merged ranges, so a resize of any size is one entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkSet {
    /// start -> end (exclusive).
    ranges: BTreeMap<usize, usize>,
}

impl ChunkSet {
    /// Add the chunks `from..to`.
    pub fn insert(&mut self, mut from: usize, mut to: usize) {
        if from >= to {
            return;
        }
        let touching: Vec<usize> = self
            .ranges
            .range(..=to)
            .rev()
            .take_while(|(_, end)| **end >= from)
            .map(|(start, _)| *start)
            .collect();
        for start in touching {
            if let Some(end) = self.ranges.remove(&start) {
                from = from.min(start);
                to = to.max(end);
            }
        }
        self.ranges.insert(from, to);
    }

    pub fn contains(&self, i: usize) -> bool {
        self.ranges
            .range(..=i)
            .next_back()
            .is_some_and(|(_, end)| *end > i)
    }

    pub fn extend(&mut self, other: ChunkSet) {
        for (from, to) in other.ranges {
            self.insert(from, to);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges, clipped to below `end`.
    pub fn ranges_below(&self, end: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.ranges
            .iter()
            .map(move |(a, b)| (*a, (*b).min(end)))
            .filter(|(a, b)| a < b)
    }

    /// Every index (for tests and small sets).
    pub fn indices(&self) -> Vec<usize> {
        self.ranges.iter().flat_map(|(a, b)| *a..*b).collect()
    }
}

/// A part of a read that comes from the base: `len` bytes at `from` in the base content go
/// to `at` in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseRead {
    pub at: usize,
    pub from: u64,
    pub len: usize,
}

/// What storing the buffer's content takes (see `Edit::store_changes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changes {
    /// Content of one chunk or less, whole.
    Small(Vec<u8>),
    /// Content of `len` bytes (more than one chunk) that equals the chunked content `base`
    /// except in `chunks`; with no base, `chunks` covers every chunk.
    Chunks {
        base: Option<ObjectId>,
        len: u64,
        chunks: ChunkEdits,
    },
}

#[derive(Debug, Clone, Default)]
pub struct ContentBuffer {
    len: usize,
    /// Bytes below this offset that no chunk in memory covers are the base's; bytes at or
    /// above it are zeros (the file was cut to here and grown again). Never above `len`.
    base_len: usize,
    /// Chunks in memory by index, each exactly as long as the file's chunk there.
    chunks: BTreeMap<usize, Vec<u8>>,
    /// Bumped whenever `base_len` drops, so bytes read from the base before that are not
    /// put in after it (they may include bytes that are zeros now).
    shape: u64,
    /// Chunks whose bytes or length changed since the last `take_touched`.
    touched: ChunkSet,
    /// The shortest the file was since the last `take_touched`.
    low_water: usize,
}

/// What a chunk's bytes are.
enum State<'a> {
    Memory(&'a [u8]),
    Zeros,
    /// Some of its bytes are the base's, not in memory.
    Base,
}

impl ContentBuffer {
    /// A buffer over base content of `len` bytes, nothing in memory.
    pub fn new(len: usize) -> ContentBuffer {
        ContentBuffer {
            len,
            base_len: len,
            low_water: len,
            ..Default::default()
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held in memory.
    pub fn in_memory(&self) -> usize {
        self.chunks.values().map(Vec::len).sum()
    }

    /// Number of chunks held in memory: what a commit frees. (A size change touches
    /// chunks without holding them; it costs no memory.)
    pub fn touched_count(&self) -> usize {
        self.chunks.len()
    }

    pub fn shape(&self) -> u64 {
        self.shape
    }

    fn count(&self) -> usize {
        self.len.div_ceil(CHUNK_SIZE)
    }

    fn chunk_len(&self, i: usize) -> usize {
        self.len
            .min((i + 1) * CHUNK_SIZE)
            .saturating_sub(i * CHUNK_SIZE)
    }

    fn state(&self, i: usize) -> State<'_> {
        match self.chunks.get(&i) {
            Some(bytes) => State::Memory(bytes),
            None if i * CHUNK_SIZE < self.base_len => State::Base,
            None => State::Zeros,
        }
    }

    /// Where chunk `i`'s base bytes are: (offset in the base, length). The rest of the chunk
    /// is zeros.
    pub fn base_span(&self, i: usize) -> (u64, usize) {
        let start = i * CHUNK_SIZE;
        let end = self.base_len.min(start + self.chunk_len(i));
        (start as u64, end.saturating_sub(start))
    }

    /// Put chunk `i` in memory from its base bytes (`base_span`, read while the shape was
    /// `shape`). Ignored when it is there already or the base was cut since.
    pub fn insert_base(&mut self, i: usize, shape: u64, mut bytes: Vec<u8>) {
        if shape != self.shape || i >= self.count() || self.chunks.contains_key(&i) {
            return;
        }
        bytes.resize(self.chunk_len(i), 0);
        self.chunks.insert(i, bytes);
    }

    /// The chunks a write of `n` bytes at `at` changes only in part and whose base bytes are
    /// not in memory: `write` needs them first.
    pub fn missing_for_write(&self, at: usize, n: usize) -> Vec<usize> {
        if n == 0 {
            return Vec::new();
        }
        let end = at + n;
        let len = self.len.max(end);
        (at / CHUNK_SIZE..=(end - 1) / CHUNK_SIZE)
            .filter(|&i| {
                let (start, stop) = (i * CHUNK_SIZE, len.min((i + 1) * CHUNK_SIZE));
                let whole = at <= start && end >= stop;
                !whole && matches!(self.state(i), State::Base)
            })
            .collect()
    }

    /// Write `data` at `at`, growing the file as needed. Every chunk in
    /// `missing_for_write(at, data.len())` must be in memory.
    pub fn write(&mut self, at: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = at + data.len();
        if end > self.len {
            self.resize(end);
        }
        for i in at / CHUNK_SIZE..=(end - 1) / CHUNK_SIZE {
            let start = i * CHUNK_SIZE;
            let (from, to) = (at.max(start), end.min(start + CHUNK_SIZE));
            let chunk_len = self.chunk_len(i);
            let whole = from == start && to == start + chunk_len;
            if !self.chunks.contains_key(&i) {
                if whole {
                    self.chunks.insert(i, data[from - at..to - at].to_vec());
                    continue;
                }
                assert!(
                    !matches!(self.state(i), State::Base),
                    "chunk {i} written in part before it was loaded"
                );
                self.chunks.insert(i, vec![0; chunk_len]);
            }
            let chunk = self.chunks.get_mut(&i).expect("chunk in memory");
            chunk[from - start..to - start].copy_from_slice(&data[from - at..to - at]);
        }
        self.touch(at, end);
    }

    /// Set the length, zero-filling when it grows.
    pub fn resize(&mut self, len: usize) {
        let old = self.len;
        self.low_water = self.low_water.min(len);
        if len < old {
            drop(self.chunks.split_off(&len.div_ceil(CHUNK_SIZE)));
            self.len = len;
            if len > 0 {
                let last = (len - 1) / CHUNK_SIZE;
                let want = self.chunk_len(last);
                if let Some(c) = self.chunks.get_mut(&last) {
                    c.truncate(want);
                }
            }
            if len < self.base_len {
                self.base_len = len;
                self.shape += 1;
            }
        } else if len > old {
            self.len = len;
            if old > 0 {
                let last = (old - 1) / CHUNK_SIZE;
                let want = self.chunk_len(last);
                if let Some(c) = self.chunks.get_mut(&last) {
                    c.resize(want, 0);
                }
            }
        }
        self.touch(old.min(len), old.max(len));
    }

    fn touch(&mut self, from: usize, to: usize) {
        if to > from {
            self.touched
                .insert(from / CHUNK_SIZE, (to - 1) / CHUNK_SIZE + 1);
        }
    }

    /// Copy `offset..` into `buf` as far as the file goes: what is in memory, and zeros.
    /// Returns how many bytes the read covers and the parts the caller must fill from the
    /// base.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> (usize, Vec<BaseRead>) {
        let end = self.len.min(offset.saturating_add(buf.len()));
        if offset >= end {
            return (0, Vec::new());
        }
        let mut from_base: Vec<BaseRead> = Vec::new();
        for i in offset / CHUNK_SIZE..=(end - 1) / CHUNK_SIZE {
            let start = i * CHUNK_SIZE;
            let (from, to) = (offset.max(start), end.min(start + CHUNK_SIZE));
            let out = &mut buf[from - offset..to - offset];
            match self.state(i) {
                State::Memory(c) => out.copy_from_slice(&c[from - start..to - start]),
                State::Zeros => out.fill(0),
                State::Base => {
                    let split = to.min(self.base_len).max(from);
                    out[split - from..].fill(0);
                    match from_base.last_mut() {
                        _ if split == from => {}
                        Some(r) if r.from as usize + r.len == from => r.len += split - from,
                        _ => from_base.push(BaseRead {
                            at: from - offset,
                            from: from as u64,
                            len: split - from,
                        }),
                    }
                }
            }
        }
        (end - offset, from_base)
    }

    /// Take the set of chunks changed since the last call (a commit stores them).
    pub fn take_touched(&mut self) -> ChunkSet {
        self.low_water = self.len;
        std::mem::take(&mut self.touched)
    }

    /// Give back chunks taken by a commit that did not store them.
    pub fn retouch(&mut self, touched: ChunkSet) {
        self.touched.extend(touched);
    }

    /// What storing the content takes: against `base`, the chunked content the buffer was
    /// last stored as, only the touched chunks; without one, every chunk. `Err`: the chunks
    /// to load first.
    pub fn changes(&self, base: Option<ObjectId>) -> Result<Changes, Vec<usize>> {
        let count = self.count();
        if self.len <= CHUNK_SIZE {
            return match self.state(0) {
                State::Base => Err(vec![0]),
                State::Memory(c) => Ok(Changes::Small(c.to_vec())),
                State::Zeros => Ok(Changes::Small(vec![0; self.len])),
            };
        }
        let wanted: Vec<(usize, usize)> = match base {
            Some(_) => self.touched.ranges_below(count).collect(),
            None => vec![(0, count)],
        };
        // Chunks in a wanted range are in memory, or base bytes to load first, or zeros:
        // each run of zeros is one entry, whatever its length.
        let base_chunks = self.base_len.div_ceil(CHUNK_SIZE);
        let mut missing = Vec::new();
        let mut chunks = ChunkEdits::new();
        for (from, to) in wanted {
            let mut pos = from;
            let mut gap = |a: usize, b: usize, chunks: &mut ChunkEdits| {
                missing.extend(a..b.min(base_chunks));
                let zeros = a.max(base_chunks);
                if zeros < b {
                    chunks.insert(zeros, ChunkEdit::Zeros { until: b });
                }
            };
            for (&i, bytes) in self.chunks.range(from..to) {
                gap(pos, i, &mut chunks);
                chunks.insert(i, ChunkEdit::Data(bytes.clone()));
                pos = i + 1;
            }
            gap(pos, to, &mut chunks);
        }
        if !missing.is_empty() {
            return Err(missing);
        }
        Ok(Changes::Chunks {
            base,
            len: self.len as u64,
            chunks,
        })
    }

    /// The content as it was at the last `take_touched`, `stored_len` bytes, was stored and
    /// becomes the base. Chunks not touched since are the same there, so they leave memory;
    /// what changed since stays. Bytes read from the old base and not put in yet are
    /// refused (the shape changes), so a load in flight reads again.
    pub fn rebase(&mut self, stored_len: usize) {
        let touched = &self.touched;
        self.chunks.retain(|i, _| touched.contains(*i));
        self.base_len = stored_len.min(self.low_water).min(self.len);
        self.shape += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: usize = CHUNK_SIZE;

    /// A model of the file next to the buffer: the base bytes and the expected content.
    struct Check {
        base: Vec<u8>,
        want: Vec<u8>,
        buf: ContentBuffer,
    }

    impl Check {
        fn new(len: usize) -> Check {
            let base: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
            Check {
                want: base.clone(),
                base,
                buf: ContentBuffer::new(len),
            }
        }

        fn load(&mut self, need: Vec<usize>) {
            let shape = self.buf.shape();
            for i in need {
                let (from, len) = self.buf.base_span(i);
                let from = from as usize;
                self.buf
                    .insert_base(i, shape, self.base[from..from + len].to_vec());
            }
        }

        fn write(&mut self, at: usize, data: &[u8]) {
            let need = self.buf.missing_for_write(at, data.len());
            self.load(need);
            self.buf.write(at, data);
            if self.want.len() < at + data.len() {
                self.want.resize(at + data.len(), 0);
            }
            self.want[at..at + data.len()].copy_from_slice(data);
        }

        fn resize(&mut self, len: usize) {
            self.buf.resize(len);
            self.want.resize(len, 0);
        }

        fn read_all(&self) -> Vec<u8> {
            let mut out = vec![0xee; self.buf.len() + 10];
            let (n, parts) = self.buf.read(0, &mut out);
            for p in parts {
                let from = p.from as usize;
                out[p.at..p.at + p.len].copy_from_slice(&self.base[from..from + p.len]);
            }
            out.truncate(n);
            out
        }

        fn assert_reads(&self) {
            assert_eq!(self.read_all(), self.want);
            // Reads at offsets that straddle chunks and the end agree too.
            for at in [
                0,
                1,
                C - 3,
                C,
                C + 7,
                2 * C - 1,
                self.want.len().saturating_sub(2),
            ] {
                let mut out = vec![0xee; 9];
                let (n, parts) = self.buf.read(at, &mut out);
                for p in parts {
                    let from = p.from as usize;
                    out[p.at..p.at + p.len].copy_from_slice(&self.base[from..from + p.len]);
                }
                let end = self.want.len().min(at + 9);
                assert_eq!(&out[..n], &self.want[at.min(end)..end], "read at {at}");
            }
        }
    }

    #[test]
    fn opening_loads_nothing_and_reads_come_from_the_base() {
        let c = Check::new(3 * C + 5);
        assert_eq!(c.buf.in_memory(), 0);
        let mut out = vec![0; 20];
        let (n, parts) = c.buf.read(C - 10, &mut out);
        assert_eq!(n, 20);
        // One contiguous base read across the chunk boundary.
        assert_eq!(
            parts,
            vec![BaseRead {
                at: 0,
                from: (C - 10) as u64,
                len: 20
            }]
        );
        c.assert_reads();
    }

    #[test]
    fn a_small_write_loads_only_the_chunk_it_changes() {
        let mut c = Check::new(4 * C);
        assert_eq!(c.buf.missing_for_write(C + 100, 4096), vec![1]);
        c.write(C + 100, &[7; 4096]);
        assert_eq!(c.buf.in_memory(), C);
        // A write that covers a chunk whole needs nothing loaded.
        assert!(c.buf.missing_for_write(2 * C, C).is_empty());
        c.write(2 * C, &vec![9; C]);
        assert_eq!(c.buf.in_memory(), 2 * C);
        c.assert_reads();
    }

    #[test]
    fn cut_then_grown_reads_zeros_where_the_base_was_cut() {
        let mut c = Check::new(3 * C);
        c.resize(C + 10);
        c.resize(3 * C + 1);
        c.assert_reads();
        // The chunk holding the cut still needs its base bytes before it; past the cut the
        // file is zeros and writes there need nothing from the base.
        assert_eq!(c.buf.missing_for_write(C + 5, 1), vec![1]);
        assert!(c.buf.missing_for_write(2 * C + 5, 1).is_empty());
        c.write(2 * C + 5, b"x");
        c.write(C + 5, b"y");
        c.assert_reads();
    }

    #[test]
    fn bytes_read_before_a_cut_are_not_put_in_after_it() {
        let mut c = Check::new(2 * C);
        let shape = c.buf.shape();
        let (from, len) = c.buf.base_span(1);
        let stale = c.base[from as usize..from as usize + len].to_vec();
        c.resize(C + 1);
        c.resize(2 * C);
        c.buf.insert_base(1, shape, stale);
        assert_eq!(c.buf.in_memory(), 0);
        c.assert_reads();
    }

    #[test]
    fn growing_pads_the_last_chunk_in_memory_with_zeros() {
        let mut c = Check::new(C / 2);
        c.write(10, b"abc");
        c.resize(C + 100);
        c.write(C + 50, b"def");
        c.assert_reads();
        c.resize(5);
        c.assert_reads();
    }

    #[test]
    fn changes_name_the_touched_chunks_or_ask_for_them() {
        let mut c = Check::new(5 * C);
        let base = Some(ObjectId::of(b"base"));
        c.write(C + 1, b"a");
        c.resize(4 * C + 3);
        // The cut chunk (4) has base bytes not in memory: it must be loaded first.
        assert_eq!(c.buf.changes(base), Err(vec![4]));
        c.load(vec![4]);
        let Ok(Changes::Chunks { chunks, len, .. }) = c.buf.changes(base) else {
            panic!("chunked changes");
        };
        assert_eq!(len, (4 * C + 3) as u64);
        assert_eq!(chunks.keys().copied().collect::<Vec<_>>(), vec![1, 4]);
        assert_eq!(chunks[&4], ChunkEdit::Data(c.want[4 * C..].to_vec()));
        // Without a base every chunk is named, and unloaded ones are asked for.
        assert_eq!(c.buf.changes(None), Err(vec![0, 2, 3]));
        c.buf.take_touched();
        c.buf.rebase(c.buf.len());
        c.base = c.want.clone();
        assert_eq!(c.buf.in_memory(), 0);
        assert_eq!(c.buf.changes(base).map(|_| ()), Ok(()));
        c.assert_reads();
    }

    #[test]
    fn a_rebase_keeps_what_changed_while_storing() {
        let mut c = Check::new(6 * C);
        c.write(C + 1, b"a");
        c.write(3 * C, &vec![5; C]);
        let touched = c.buf.take_touched();
        assert_eq!(touched.indices(), vec![1, 3]);
        let stored = c.want.clone();
        // While that content is stored: a write into chunk 3, and a cut into chunk 4
        // followed by growth.
        c.write(3 * C + 9, b"b");
        c.resize(4 * C + 10);
        c.resize(6 * C);
        c.buf.rebase(stored.len());
        c.base = stored;
        // Chunk 1 left memory; chunk 3 (written since) stays. Chunk 4 reads the new base up
        // to the cut and zeros after it.
        assert_eq!(c.buf.in_memory(), C);
        c.assert_reads();
        c.write(4 * C + 5, b"c");
        c.assert_reads();
    }

    #[test]
    fn grown_past_the_base_the_new_chunks_are_holes() {
        let mut c = Check::new(0);
        c.resize(3 * C);
        let Ok(Changes::Chunks { chunks, .. }) = c.buf.changes(None) else {
            panic!("chunked changes");
        };
        assert_eq!(
            chunks.into_iter().collect::<Vec<_>>(),
            vec![(0, ChunkEdit::Zeros { until: 3 })]
        );
        assert_eq!(c.buf.in_memory(), 0);
        assert_eq!(
            ContentBuffer::new(0).changes(None),
            Ok(Changes::Small(Vec::new()))
        );
    }
}
