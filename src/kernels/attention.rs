//! Grouped-query causal attention over a per-layer key/value cache ([`KvCache`]), global or
//! sliding-window, with left padding.
//!
//! Positions here are *cache columns*: the n-th key/value ever appended to a cache is column n
//! (0-based), for every sequence of the batch at once. With left padding, sequence `b`'s first
//! `pad[b]` columns are padding and are never attended. This is how HF masks batched
//! generation: its causal, sliding-window and padding masks are all over cache positions.
//!
//! A query at column `c` of sequence `b` attends to the columns `j` with
//! `pad[b] <= j <= c`, and, in a sliding cache of window `W`, `j > c - W` (exactly `W` columns
//! including itself once `c + 1 >= W + pad[b]`). A query that sees no column outputs zeros.
//!
//! Numerics, per (sequence, query, head), in f32: `s_j = dot(q, k_j) * scale` (the fixed-order
//! dot of [`super::simd`]); `m = max s_j`; `e_j = exp(s_j - m)` (in f64, rounded once);
//! `sum = Σ e_j` in f64, ascending `j`, rounded to f32; `p_j = e_j / sum`; `out = Σ p_j v_j`
//! accumulated with fused multiply-adds in ascending `j`. Each output row is computed by one
//! thread in this order, so results do not depend on the thread count.

use std::ops::Range;

use super::error::KernelError;
use super::parallel;
use super::simd::{self, Isa};
use super::softmax::{exp_less_max, row_sums};
use super::tensor::Tensor;

#[cfg(target_arch = "x86_64")]
mod tile_avx2;
#[cfg(target_arch = "x86_64")]
mod tile_avx512;
#[cfg(all(test, target_arch = "x86_64"))]
mod tile_checks;

/// Multiply-adds below which a thread start does not pay off.
const MIN_TASK_MACS: usize = 1 << 16;

/// Which keys a cache keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    /// Every column, up to `capacity` columns in total (appending past it is an error).
    Global {
        /// Most columns the cache will hold.
        capacity: usize,
    },
    /// A ring of the last `window` columns; a query sees exactly the `window` columns ending at
    /// its own (Gemma 3's `sliding_window`).
    Sliding {
        /// Columns kept and attended.
        window: usize,
    },
}

/// One attention layer's key/value cache, in f32.
///
/// The interpreter keeps one per layer for a whole batch job and passes it mutably to
/// [`attention`], which attends and then appends the new keys/values in one call. Storage grows
/// as columns arrive (never beyond `capacity` or `window` columns), laid out
/// `[slot][batch][kv_head][head_dim]`; column `c` lives in slot `c` (global) or `c % window`
/// (sliding).
#[derive(Clone)]
pub struct KvCache {
    kind: CacheKind,
    batch: usize,
    n_kv_heads: usize,
    head_dim: usize,
    len: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl std::fmt::Debug for KvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KvCache<{:?}>[batch {}, kv heads {}, head_dim {}, len {}]",
            self.kind, self.batch, self.n_kv_heads, self.head_dim, self.len
        )
    }
}

impl KvCache {
    /// An empty cache for `batch` sequences of `n_kv_heads` heads of `head_dim` values.
    /// All sizes, and the capacity or window, must be at least 1.
    pub fn new(
        kind: CacheKind,
        batch: usize,
        n_kv_heads: usize,
        head_dim: usize,
    ) -> Result<KvCache, KernelError> {
        let (name, value) = match kind {
            CacheKind::Global { capacity } => ("capacity", capacity),
            CacheKind::Sliding { window } => ("window", window),
        };
        for (name, v) in [
            ("batch", batch),
            ("n_kv_heads", n_kv_heads),
            ("head_dim", head_dim),
            (name, value),
        ] {
            if v == 0 {
                return Err(KernelError::BadParam {
                    op: "kv_cache",
                    name,
                    value: "0".into(),
                    need: "at least 1",
                });
            }
        }
        let row = batch
            .checked_mul(n_kv_heads)
            .and_then(|r| r.checked_mul(head_dim));
        if row.and_then(|r| r.checked_mul(value)).is_none() {
            return Err(KernelError::TooLarge {
                op: "kv_cache",
                shape: vec![value, batch, n_kv_heads, head_dim],
            });
        }
        Ok(KvCache {
            kind,
            batch,
            n_kv_heads,
            head_dim,
            len: 0,
            k: Vec::new(),
            v: Vec::new(),
        })
    }

    /// [`KvCache::new`] with [`CacheKind::Global`].
    pub fn global(
        batch: usize,
        n_kv_heads: usize,
        head_dim: usize,
        capacity: usize,
    ) -> Result<KvCache, KernelError> {
        KvCache::new(CacheKind::Global { capacity }, batch, n_kv_heads, head_dim)
    }

    /// [`KvCache::new`] with [`CacheKind::Sliding`].
    pub fn sliding(
        batch: usize,
        n_kv_heads: usize,
        head_dim: usize,
        window: usize,
    ) -> Result<KvCache, KernelError> {
        KvCache::new(CacheKind::Sliding { window }, batch, n_kv_heads, head_dim)
    }

    /// Global or sliding, with its capacity or window.
    pub fn kind(&self) -> CacheKind {
        self.kind
    }
    /// Batch size it was built for.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// Key/value heads it was built for.
    pub fn n_kv_heads(&self) -> usize {
        self.n_kv_heads
    }
    /// Head dimension it was built for.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }
    /// Columns appended since creation or the last [`reset`](KvCache::reset); the next
    /// appended column gets this index.
    pub fn len(&self) -> usize {
        self.len
    }
    /// No column appended yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The columns whose keys and values are still stored: `0..len` for a global cache, the
    /// last `min(len, window)` columns for a sliding one.
    pub fn held(&self) -> Range<usize> {
        match self.kind {
            CacheKind::Global { .. } => 0..self.len,
            CacheKind::Sliding { window } => self.len.saturating_sub(window)..self.len,
        }
    }
    /// Forget every column (for the next batch); keeps the allocation.
    pub fn reset(&mut self) {
        self.len = 0;
        self.k.clear();
        self.v.clear();
    }
    /// The stored key of sequence `b`, kv head `head`, at column `col`; `None` if not held.
    pub fn key(&self, b: usize, col: usize, head: usize) -> Option<&[f32]> {
        self.get(&self.k, b, col, head)
    }
    /// The stored value of sequence `b`, kv head `head`, at column `col`; `None` if not held.
    pub fn value(&self, b: usize, col: usize, head: usize) -> Option<&[f32]> {
        self.get(&self.v, b, col, head)
    }

    fn get<'a>(&self, store: &'a [f32], b: usize, col: usize, head: usize) -> Option<&'a [f32]> {
        if !self.held().contains(&col) || b >= self.batch || head >= self.n_kv_heads {
            return None;
        }
        store
            .get(self.offset(self.slot(col), b, head)..)?
            .get(..self.head_dim)
    }

    fn slot(&self, col: usize) -> usize {
        match self.kind {
            CacheKind::Global { .. } => col,
            CacheKind::Sliding { window } => col % window,
        }
    }

    fn offset(&self, slot: usize, b: usize, head: usize) -> usize {
        ((slot * self.batch + b) * self.n_kv_heads + head) * self.head_dim
    }

    fn window(&self) -> Option<usize> {
        match self.kind {
            CacheKind::Global { .. } => None,
            CacheKind::Sliding { window } => Some(window),
        }
    }

    /// Store columns `len..len + t_len` from `k`, `v` (`[batch, t_len, kv, d]`); a sliding
    /// cache keeps only the last `window` of them.
    fn append(&mut self, k: &[f32], v: &[f32], t_len: usize) {
        let per_tok = self.n_kv_heads * self.head_dim;
        let slots = match self.kind {
            CacheKind::Global { .. } => self.len + t_len,
            CacheKind::Sliding { window } => (self.len + t_len).min(window),
        };
        let size = slots * self.batch * per_tok;
        if self.k.len() < size {
            // Reserve the most this cache can ever hold, once: amortised doubling would leave
            // up to twice the columns allocated (and copy on each growth). Untouched reserved
            // pages take no memory; only the columns written do.
            let most = match self.kind {
                CacheKind::Global { capacity } => capacity,
                CacheKind::Sliding { window } => window,
            } * self.batch
                * per_tok;
            self.k.reserve_exact(most.saturating_sub(self.k.len()));
            self.v.reserve_exact(most.saturating_sub(self.v.len()));
            self.k.resize(size, 0.0);
            self.v.resize(size, 0.0);
        }
        let first = self.window().map_or(0, |w| t_len.saturating_sub(w));
        for t in first..t_len {
            let slot = self.slot(self.len + t);
            for b in 0..self.batch {
                let src = (b * t_len + t) * per_tok;
                let dst = self.offset(slot, b, 0);
                self.k[dst..dst + per_tok].copy_from_slice(&k[src..src + per_tok]);
                self.v[dst..dst + per_tok].copy_from_slice(&v[src..src + per_tok]);
            }
        }
        self.len += t_len;
    }
}

/// Causal grouped-query attention of `t_len` new positions, then append their keys/values.
///
/// - `q [batch, t_len, n_heads, head_dim]`: queries for columns `cache.len()..+t_len` (RoPE and
///   q-norm already applied).
/// - `k`, `v [batch, t_len, n_kv_heads, head_dim]`: their keys and values; `n_heads` must be a
///   multiple of `n_kv_heads`, query head `h` using kv head `h / (n_heads / n_kv_heads)`.
/// - `pad[b]`: leading padding columns of sequence `b` (never attended).
/// - `scale`: multiplies every score (Gemma 3: `query_pre_attn_scalar^-0.5`).
///
/// Returns `[batch, t_len, n_heads, head_dim]`. The new queries attend to the cache's held
/// columns and to all the new keys, so a prefill longer than a sliding window still gives each
/// query exactly its own window; only then are the new columns stored (a sliding cache keeps
/// the last `window`). On error the cache is unchanged.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cache: &mut KvCache,
    pad: &[usize],
    scale: f32,
) -> Result<Tensor, KernelError> {
    attention_on(simd::isa(), q, k, v, cache, pad, scale)
}

/// [`attention`] on a chosen instruction set (or the best below it this CPU has); results are
/// identical on every set.
pub fn attention_on(
    isa: Isa,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cache: &mut KvCache,
    pad: &[usize],
    scale: f32,
) -> Result<Tensor, KernelError> {
    let cpu = simd::limit(isa);
    let dims = check(q, k, v, cache, pad, scale)?;
    let mut out = vec![0.0f32; q.data().len()];
    let ctx = Ctx::new(cpu, [q, k, v], cache, pad, scale, dims);
    let visible = ctx.window.unwrap_or(ctx.old + dims.t_len).max(1);
    let per_row = visible.saturating_mul(dims.d).saturating_mul(2).max(1);
    parallel::for_rows(
        &mut out,
        dims.d,
        MIN_TASK_MACS.div_ceil(per_row),
        |rows, dst| attend_on(cpu, &ctx, rows, dst),
    );
    cache.append(k.data(), v.data(), dims.t_len);
    Tensor::new(q.shape().to_vec(), out).map_err(|_| KernelError::TooLarge {
        op: "attention",
        shape: q.shape().to_vec(),
    })
}

#[derive(Clone, Copy)]
struct Dims {
    t_len: usize,
    heads: usize,
    kv: usize,
    d: usize,
}

fn check(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cache: &KvCache,
    pad: &[usize],
    scale: f32,
) -> Result<Dims, KernelError> {
    let shapes_err = |why| KernelError::AttentionShapes {
        q: q.shape().to_vec(),
        k: k.shape().to_vec(),
        v: v.shape().to_vec(),
        why,
    };
    let &[batch, t_len, heads, d] = q.shape() else {
        return Err(KernelError::Rank {
            op: "attention",
            name: "q",
            shape: q.shape().to_vec(),
            need: "[batch, seq, heads, head_dim]",
        });
    };
    let &[kb, kt, kv, kd] = k.shape() else {
        return Err(KernelError::Rank {
            op: "attention",
            name: "k",
            shape: k.shape().to_vec(),
            need: "[batch, seq, kv_heads, head_dim]",
        });
    };
    if v.shape() != k.shape() {
        return Err(shapes_err("k and v must have the same shape"));
    }
    if kb != batch || kt != t_len || kd != d {
        return Err(shapes_err(
            "q, k and v must agree on batch, sequence length and head_dim",
        ));
    }
    if kv == 0 || heads % kv != 0 {
        return Err(shapes_err(
            "the number of query heads must be a positive multiple of the kv heads",
        ));
    }
    if cache.batch != batch || cache.n_kv_heads != kv || cache.head_dim != d {
        return Err(KernelError::CacheShape {
            k: k.shape().to_vec(),
            batch: cache.batch,
            n_kv_heads: cache.n_kv_heads,
            head_dim: cache.head_dim,
        });
    }
    if pad.len() != batch {
        return Err(KernelError::PadCount {
            batch,
            found: pad.len(),
        });
    }
    if !scale.is_finite() {
        return Err(KernelError::BadParam {
            op: "attention",
            name: "scale",
            value: scale.to_string(),
            need: "finite",
        });
    }
    if let CacheKind::Global { capacity } = cache.kind {
        if cache.len + t_len > capacity {
            return Err(KernelError::CacheFull {
                capacity,
                len: cache.len,
                adding: t_len,
            });
        }
    }
    Ok(Dims {
        t_len,
        heads,
        kv,
        d,
    })
}

/// Everything a row of output needs, shared read-only between threads.
struct Ctx<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    cache: &'a KvCache,
    pad: &'a [usize],
    scale: f32,
    dims: Dims,
    /// Cache length before this call: new column `t` is `old + t`.
    old: usize,
    window: Option<usize>,
    /// The instruction set the softmax runs with.
    cpu: simd::Cpu,
    /// The register tiles, where they apply.
    #[cfg(target_arch = "x86_64")]
    tile: Option<Tiles>,
}

/// The register tiles a CPU runs: AVX-512's where it has it, else AVX2's.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
enum Tiles {
    Avx2(tile_avx2::Tile),
    Avx512(tile_avx512::Tile),
}

#[cfg(target_arch = "x86_64")]
impl Tiles {
    fn new(cpu: simd::Cpu, d: usize) -> Option<Tiles> {
        let wide = tile_avx512::Tile::new(cpu, d).map(Tiles::Avx512);
        wide.or_else(|| tile_avx2::Tile::new(cpu, d).map(Tiles::Avx2))
    }

    /// Query rows per tile, at most.
    fn rows(self) -> usize {
        match self {
            Tiles::Avx2(_) => tile_avx2::ROWS,
            Tiles::Avx512(_) => tile_avx512::ROWS,
        }
    }
}

impl<'a> Ctx<'a> {
    fn new(
        cpu: simd::Cpu,
        [q, k, v]: [&'a Tensor; 3],
        cache: &'a KvCache,
        pad: &'a [usize],
        scale: f32,
        dims: Dims,
    ) -> Ctx<'a> {
        Ctx {
            q: q.data(),
            k: k.data(),
            v: v.data(),
            cache,
            pad,
            scale,
            dims,
            old: cache.len(),
            window: cache.window(),
            cpu,
            #[cfg(target_arch = "x86_64")]
            tile: Tiles::new(cpu, dims.d),
        }
    }
}

impl Ctx<'_> {
    /// Key and value of sequence `b`, kv head `kvh`, at column `col` (new or cached).
    #[inline(always)]
    fn kv_at(&self, b: usize, col: usize, kvh: usize) -> (&[f32], &[f32]) {
        let Dims { t_len, kv, d, .. } = self.dims;
        if col >= self.old {
            let o = ((b * t_len + (col - self.old)) * kv + kvh) * d;
            (&self.k[o..o + d], &self.v[o..o + d])
        } else {
            let o = self.cache.offset(self.cache.slot(col), b, kvh);
            (&self.cache.k[o..o + d], &self.cache.v[o..o + d])
        }
    }
}

/// Which half of a cache column [`Ctx::prefetch`] fetches.
#[derive(Clone, Copy)]
enum Part {
    Keys,
    Values,
}

impl Ctx<'_> {
    /// Hints the keys or values of columns `cols` of sequence `b`, kv head `kvh`, into L1, and
    /// then into L2 as well. A cached column of one sequence is a whole batch of columns away
    /// from its neighbour (the cache is laid out slot-major), a stride the hardware prefetcher
    /// does not follow, so without this every group of four columns waited on memory in turn.
    ///
    /// Why twice. A group's keys are 64 lines, more than a core keeps in flight, and asked for
    /// once, a step still waited on many of them. On Zen 5, one global layer's decode step
    /// over caches read from memory (`kernel_bench` `STEPS=300 ATTENTION=batch,prompt`, the two
    /// ways alternating in one build, three rounds, 2 threads): batch 32, prompt 128 took
    /// 259-272 µs with the second request against 320-335 without, batch 8, prompt 1024
    /// 590-616 against 700-712 (873-877 against 1201-1227 on one thread), batch 32, prompt 48
    /// 129-136 against 151-154.
    /// Asking for the same lines into L1 twice did as well; three times, or the second request
    /// for later columns (two to eight groups further on), or only each key's first line, less.
    /// Not measured on other CPUs.
    #[inline(always)]
    fn prefetch(&self, b: usize, cols: Range<usize>, kvh: usize, part: Part) {
        #[cfg(target_arch = "x86_64")]
        for into_l2 in [false, true] {
            for col in cols.clone() {
                let (k, v) = self.kv_at(b, col, kvh);
                let row = match part {
                    Part::Keys => k,
                    Part::Values => v,
                };
                let (p, len) = (row.as_ptr().cast(), std::mem::size_of_val(row));
                if into_l2 {
                    simd::prefetch_l2(p, len);
                } else {
                    simd::prefetch(p, len);
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (b, cols, kvh, part);
    }
}

/// Keys whose scores are computed side by side ([`simd::dots`]).
const KEYS: usize = 4;
/// Groups of [`KEYS`] columns fetched ahead of the group being computed. On Zen 5 (real 270M
/// file, batch 32, prompt 128, `--profile`, two rounds alternating): attention 345-365 ms per
/// 31 steps without, 251-256 with two groups ahead, 246-251 with three, 253-305 with six.
const AHEAD: usize = 3;

simd::with_isa! {
    /// [`attend_rows`] compiled for the given instruction set.
    fn attend_on(ctx: &Ctx<'_>, rows: Range<usize>, dst: &mut [f32]) -> () = attend_rows;
}

/// Query rows attended together, at most: the heads of one kv head's group at as many
/// consecutive positions of one sequence as make this many rows. Each key and value they
/// share is then read from memory once for all of them, where one row at a time read a
/// sequence's cache once per head and per position (a prefill's or a long context's cache is
/// larger than L2, so every read after the first came from L3 or memory).
const SHARED_ROWS: usize = 16;

/// One output row's query: its row index (into `q` and the output) and the cache columns
/// `lo..=col` it attends (none when `lo > col`).
#[derive(Clone, Copy)]
struct Query {
    row: usize,
    lo: usize,
    col: usize,
}

impl Query {
    fn sees(&self, c: usize) -> bool {
        self.lo <= c && c <= self.col
    }

    /// Whether it sees none of columns `j..j + n`.
    fn misses(&self, j: usize, n: usize) -> bool {
        self.lo > self.col || self.col < j || self.lo >= j + n
    }

    /// Whether it sees all of a whole block of [`KEYS`] columns from `j` (`n` of them).
    fn covers(&self, j: usize, n: usize) -> bool {
        n == KEYS && self.takes(j, n)
    }

    /// Whether it sees every one of columns `j..j + n` (`n` at least 1).
    fn takes(&self, j: usize, n: usize) -> bool {
        self.lo <= j && j + n - 1 <= self.col
    }
}

/// The queries `tiled` cut into the tiles that take them: as few tiles of at most `rows` as
/// will do, as even as they can be (seven in tiles of three as three, two and two: a tile of
/// one reads four keys for four multiply-adds).
#[cfg(target_arch = "x86_64")]
fn tiles(tiled: &[usize], rows: usize) -> impl Iterator<Item = &[usize]> {
    let count = tiled.len().div_ceil(rows.max(1));
    let mut rest = tiled;
    (0..count).map(move |t| {
        let left = count - t;
        let (these, next) = rest.split_at(rest.len().div_ceil(left));
        rest = next;
        these
    })
}

/// Scratch a task reuses from group to group.
#[derive(Default)]
struct Scratch {
    queries: Vec<Query>,
    /// Each query's scores, then its weights, at `starts[i]..starts[i + 1]`.
    scores: Vec<f32>,
    starts: Vec<usize>,
    out: Vec<f32>,
    /// The queries of a block of keys that take the score tile.
    tiled: Vec<usize>,
    /// Each query's sum of its exponentials.
    totals: Vec<f32>,
}

/// Output rows `rows` (one per (sequence, query, head), `head_dim` wide) into `dst`: the rows
/// of each kv head's group at up to [`SHARED_ROWS`] positions at a time ([`attend_group`]).
/// Which rows go together changes no row's result: every row's scores, softmax and weighted
/// sum are its own, in its own order.
#[inline(always)]
fn attend_rows(ctx: &Ctx<'_>, rows: Range<usize>, dst: &mut [f32]) {
    let Dims {
        t_len,
        heads,
        kv,
        d,
        ..
    } = ctx.dims;
    let group = heads / kv;
    let span = (SHARED_ROWS / group).max(1);
    let mut scratch = Scratch::default();
    let mut pos = rows.start / heads;
    let end = rows.end.div_ceil(heads);
    while pos < end {
        let b = pos / t_len;
        let stop = (pos + span).min((b + 1) * t_len).min(end);
        for kvh in 0..kv {
            scratch.queries.clear();
            for p in pos..stop {
                for h in kvh * group..(kvh + 1) * group {
                    let row = p * heads + h;
                    if rows.contains(&row) {
                        scratch.queries.push(ctx.query(row));
                    }
                }
            }
            if scratch.queries.is_empty() {
                continue;
            }
            attend_group(ctx, b, kvh, &mut scratch);
            for (q, out) in scratch.queries.iter().zip(scratch.out.chunks_exact(d)) {
                let at = (q.row - rows.start) * d;
                dst[at..at + d].copy_from_slice(out);
            }
        }
        pos = stop;
    }
}

impl Ctx<'_> {
    /// The query of output row `row`: sequence `b`, new position `t`, head `h`.
    fn query(&self, row: usize) -> Query {
        let Dims { t_len, heads, .. } = self.dims;
        let t = (row / heads) % t_len;
        let b = row / (heads * t_len);
        let col = self.old + t;
        let mut lo = self.pad[b];
        if let Some(w) = self.window {
            lo = lo.max((col + 1).saturating_sub(w));
        }
        Query { row, lo, col }
    }

    fn q_row(&self, row: usize) -> &[f32] {
        let d = self.dims.d;
        &self.q[row * d..(row + 1) * d]
    }
}

/// `scratch.queries` (of sequence `b`, all reading kv head `kvh`) into `scratch.out`, one
/// `head_dim` row each. Keys and values are visited once, [`KEYS`] columns at a time in
/// ascending order, and each query takes the columns it sees: its scores are the fixed-order
/// dots ([`simd::dots`] is [`simd::dot`] side by side), its softmax as in the module doc, and
/// its weighted sum adds the columns in ascending order ([`simd::axpys`] is [`simd::axpy`] in
/// turn), so every row has the bits it has attended alone.
#[inline(always)]
fn attend_group(ctx: &Ctx<'_>, b: usize, kvh: usize, scratch: &mut Scratch) {
    let d = ctx.dims.d;
    let Scratch {
        queries,
        scores,
        starts,
        out,
        tiled,
        totals,
    } = scratch;
    out.clear();
    out.resize(queries.len() * d, 0.0);
    starts.clear();
    starts.push(0);
    let (mut lo, mut hi) = (usize::MAX, 0);
    for q in queries.iter() {
        let seen = if q.lo <= q.col {
            lo = lo.min(q.lo);
            hi = hi.max(q.col);
            q.col - q.lo + 1
        } else {
            0
        };
        starts.push(starts[starts.len() - 1] + seen);
    }
    if lo > hi {
        return;
    }
    scores.clear();
    scores.resize(starts[queries.len()], 0.0);

    ctx.prefetch(b, lo..(lo + AHEAD * KEYS).min(hi + 1), kvh, Part::Keys);
    let mut j = lo;
    while j <= hi {
        let n = KEYS.min(hi + 1 - j);
        let keys = ctx.block(b, kvh, (j, n, hi), Part::Keys);
        tiled.clear();
        for (i, q) in queries.iter().enumerate() {
            if q.misses(j, n) {
                continue;
            }
            #[cfg(target_arch = "x86_64")]
            if ctx.tile.is_some() && q.takes(j, n) {
                tiled.push(i);
                continue;
            }
            let s = &mut scores[starts[i]..starts[i + 1]];
            let qrow = ctx.q_row(q.row);
            if q.covers(j, n) {
                let dots = simd::dots(qrow, keys);
                for (s, dot) in s[j - q.lo..j - q.lo + KEYS].iter_mut().zip(dots) {
                    *s = dot * ctx.scale;
                }
            } else {
                for (c, key) in (j..j + n).zip(keys) {
                    if q.sees(c) {
                        s[c - q.lo] = simd::dot(qrow, key) * ctx.scale;
                    }
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(tile) = ctx.tile {
            for these in tiles(tiled, tile.rows()) {
                ctx.score_tile(tile, these, (j, n, keys), queries, (scores, starts));
            }
        }
        j += n;
    }

    // Each query's weights `e_j / sum`, all at once (whole vectors of divisions). The sums
    // are `exponentials`' (f64, ascending), taken side by side.
    for i in 0..queries.len() {
        exp_less_max(ctx.cpu, &mut scores[starts[i]..starts[i + 1]]);
    }
    row_sums(scores, starts, totals);
    for (i, &total) in totals.iter().enumerate() {
        for e in scores[starts[i]..starts[i + 1]].iter_mut() {
            *e /= total;
        }
    }

    ctx.prefetch(b, lo..(lo + AHEAD * KEYS).min(hi + 1), kvh, Part::Values);
    let mut j = lo;
    while j <= hi {
        let n = KEYS.min(hi + 1 - j);
        let vals = ctx.block(b, kvh, (j, n, hi), Part::Values);
        tiled.clear();
        for (i, (q, o)) in queries.iter().zip(out.chunks_exact_mut(d)).enumerate() {
            if q.misses(j, n) {
                continue;
            }
            let p = &scores[starts[i]..starts[i + 1]];
            if q.covers(j, n) {
                #[cfg(target_arch = "x86_64")]
                if ctx.tile.is_some() {
                    tiled.push(i);
                    continue;
                }
                let mut weights = [0.0f32; KEYS];
                weights.copy_from_slice(&p[j - q.lo..j - q.lo + KEYS]);
                simd::axpys(o, weights, vals);
            } else {
                for (c, val) in (j..j + n).zip(vals) {
                    if q.sees(c) {
                        simd::axpy(o, p[c - q.lo], val);
                    }
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(tile) = ctx.tile {
            for these in tiles(tiled, tile.rows()) {
                sum_tile(tile, these, (j, vals), queries, (scores, starts), out);
            }
        }
        j += n;
    }
}

// `by_rows!` has an arm for each tile size up to six: a tile of more rows must add arms.
#[cfg(target_arch = "x86_64")]
const _: () = assert!(tile_avx2::ROWS <= 6 && tile_avx512::ROWS <= 6);

/// `$body` with the const `$r` bound to `$n`, one of 1 to 6 (the most rows a tile takes, as
/// [`tiles`] cuts them).
#[cfg(target_arch = "x86_64")]
macro_rules! by_rows {
    ($n:expr, $r:ident => $body:expr) => {
        match $n {
            6 => {
                const $r: usize = 6;
                $body
            }
            5 => {
                const $r: usize = 5;
                $body
            }
            4 => {
                const $r: usize = 4;
                $body
            }
            3 => {
                const $r: usize = 3;
                $body
            }
            2 => {
                const $r: usize = 2;
                $body
            }
            1 => {
                const $r: usize = 1;
                $body
            }
            n => unreachable!("a tile of {n} query rows"),
        }
    };
}

/// Queries `these` (indices into `queries`, ascending, as many as `tile` takes, each seeing
/// the whole block of [`KEYS`] columns from `j`) add the block's values, weighted by their
/// weights (in `scores`, at `starts[i]` from their first column), into their rows of `out`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn sum_tile(
    tile: Tiles,
    these: &[usize],
    (j, vals): (usize, [&[f32]; KEYS]),
    queries: &[Query],
    (scores, starts): (&[f32], &[usize]),
    out: &mut [f32],
) {
    // Plain loops rather than `array::from_fn`, which was called rather than inlined here, and
    // whose result was read back through a store it could not forward from: with these (and
    // the tiles' own checks as loops), one global layer's prefill of batch 8, prompt 1024 took
    // 88.8-92.5 ms against 98.1-99.7 (Zen 5, `kernel_bench`, three rounds).
    by_rows!(these.len(), R => {
        let mut rows = [0usize; R];
        let mut w = [[0.0f32; KEYS]; R];
        for r in 0..R {
            let i = these[r];
            let at = starts[i] + j - queries[i].lo;
            rows[r] = i;
            w[r].copy_from_slice(&scores[at..at + KEYS]);
        }
        match tile {
            Tiles::Avx2(t) => tile_avx2::weighted_sums::<R>(t, out, rows, w, vals),
            Tiles::Avx512(t) => tile_avx512::weighted_sums::<R>(t, out, rows, w, vals),
        }
    })
}

#[cfg(target_arch = "x86_64")]
impl Ctx<'_> {
    /// The scores of queries `these` (indices into `queries`, as many as `tile` takes, each
    /// seeing every one of the block's `n` columns from `j`) against the block's keys, into
    /// each one's scores (at `starts[i]`, from its first column).
    #[inline(always)]
    fn score_tile(
        &self,
        tile: Tiles,
        these: &[usize],
        (j, n, keys): (usize, usize, [&[f32]; KEYS]),
        queries: &[Query],
        (scores, starts): (&mut [f32], &[usize]),
    ) {
        let mut put = |r: usize, row: [f32; KEYS]| {
            let i = these[r];
            let at = starts[i] + j - queries[i].lo;
            scores[at..at + n].copy_from_slice(&row[..n]);
        };
        by_rows!(these.len(), R => {
            let mut q: [&[f32]; R] = [&[]; R];
            for r in 0..R {
                q[r] = self.q_row(queries[these[r]].row);
            }
            let s = match tile {
                Tiles::Avx2(t) => tile_avx2::scores::<R>(t, q, keys, self.scale),
                Tiles::Avx512(t) => tile_avx512::scores::<R>(t, q, keys, self.scale),
            };
            for (r, row) in s.into_iter().enumerate() {
                put(r, row);
            }
        })
    }
}

impl Ctx<'_> {
    /// The keys or values (`part`) of columns `j..j + n` of sequence `b`, kv head `kvh` (`n`
    /// at most [`KEYS`]; the rows past `n` repeat the last), having fetched those of the
    /// columns [`AHEAD`] groups on, up to column `hi`. A plain method rather than a closure
    /// handed the rows: a closure does not take its caller's target features, and the dot
    /// products inside one ran as baseline x86-64 code, twenty times slower.
    #[inline(always)]
    fn block(
        &self,
        b: usize,
        kvh: usize,
        (j, n, hi): (usize, usize, usize),
        part: Part,
    ) -> [&[f32]; KEYS] {
        self.prefetch(
            b,
            j + AHEAD * KEYS..(j + (AHEAD + 1) * KEYS).min(hi + 1),
            kvh,
            part,
        );
        std::array::from_fn(|i| {
            let (k, v) = self.kv_at(b, j + i.min(n - 1), kvh);
            match part {
                Part::Keys => k,
                Part::Values => v,
            }
        })
    }
}

/// The attention of every row on its own, one at a time: the order this module had before
/// rows were grouped ([`attend_group`]), kept as the twin its bits are checked against.
#[cfg(test)]
pub(crate) fn attention_one_row_at_a_time(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cache: &mut KvCache,
    pad: &[usize],
    scale: f32,
) -> Result<Tensor, KernelError> {
    let dims = check(q, k, v, cache, pad, scale)?;
    let ctx = Ctx::new(
        simd::limit(Isa::Portable),
        [q, k, v],
        cache,
        pad,
        scale,
        dims,
    );
    let Dims {
        t_len,
        heads,
        kv,
        d,
        ..
    } = dims;
    let mut out = vec![0.0f32; q.data().len()];
    let mut scores = Vec::new();
    for (row, o) in out.chunks_exact_mut(d).enumerate() {
        let query = ctx.query(row);
        if query.lo > query.col {
            continue;
        }
        let qrow = ctx.q_row(row);
        let (b, kvh) = (row / (heads * t_len), (row % heads) / (heads / kv));
        scores.clear();
        for c in query.lo..=query.col {
            scores.push(simd::dot(qrow, ctx.kv_at(b, c, kvh).0) * scale);
        }
        let total = super::softmax::exponentials(ctx.cpu, &mut scores);
        for (c, e) in (query.lo..=query.col).zip(&scores) {
            let val = ctx.kv_at(b, c, kvh).1;
            simd::axpy(o, e / total, val);
        }
    }
    cache.append(k.data(), v.data(), dims.t_len);
    Tensor::new(q.shape().to_vec(), out).map_err(|_| KernelError::TooLarge {
        op: "attention",
        shape: q.shape().to_vec(),
    })
}
