//! The wide executor: a [`Program`] run over tiles at AVX2 or AVX-512
//! width, called by generated code.
//!
//! Owns the tile loop (whole tiles read and write the caller's buffers in
//! place; the last, partial tile goes through staging tiles padded with
//! zeros, so no lane reads or writes past a buffer), the thread's scratch
//! tiles, and the entry points generated code calls
//! ([`tenjin_wide_avx512`], [`tenjin_wide_avx2`]). Each step runs one tight
//! loop over the tile, the same lane sequence as the f32x4 code
//! (`super::super::vmath`), so every element gets the same bits as there.
//! Must not translate loops nor decide when to run.

#![allow(unsafe_op_in_unsafe_fn)]

use super::super::math::MathFn;
use super::super::vmath::VMath;
use super::lanes::{Avx2, Avx512, Wide};
use super::program::{Dst, Op, Program, Src, Step, MAX_STREAMS, TILE};
use crate::symbolic::{BinaryOp, UnaryOp};
use std::cell::RefCell;

/// A compiled segment of cheap steps: `(base, streams, out, len)`.
type Segment = unsafe extern "C" fn(*mut f32, *const *const f32, *mut f32, i64);

/// A 64-byte-aligned run of 16 f32 values.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Block([f32; 16]);

thread_local! {
    /// The thread's slots, scalar tiles and staging tiles.
    static SCRATCH: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// At least `tiles` tiles of this thread's scratch memory. The pointer
/// stays valid until the next call on this thread (the executor is its only
/// user and never runs re-entrantly).
fn scratch(tiles: usize) -> *mut f32 {
    SCRATCH.with(|cell| {
        let mut buf = cell.borrow_mut();
        let blocks = tiles * TILE / 16;
        if buf.len() < blocks {
            buf.resize(blocks, Block([0.0; 16]));
        }
        buf.as_mut_ptr() as *mut f32
    })
}

/// `d[j] = body(a[j])` over `len` elements (a multiple of the width), a
/// vector at a time. (Two vectors per iteration measured the same: the
/// units are saturated.)
macro_rules! map {
    ($l:ident, $len:expr, $d:expr, [$($x:ident = $src:expr),+] => $body:expr) => {{
        let mut j = 0;
        while j < $len {
            $(let $x = $l.load($src.add(j));)+
            let y = $body;
            $l.store($d.add(j), y);
            j += L::W;
        }
    }};
}

/// The scratch tiles of one call: the slots, the scalar tiles (filled),
/// a staging tile per stream and one for the value.
struct Tiles {
    base: *mut f32,
    slots: usize,
    scalars: usize,
    streams: usize,
}

impl Tiles {
    /// The scalar tiles are filled as far as a call over `n` elements
    /// reads them (whole groups of four vectors of `w` lanes, at most a
    /// tile): a short row does not pay for a whole tile per scalar.
    ///
    /// # Safety
    /// `scalars` holds `p.scalars.len()` values.
    #[inline(always)]
    unsafe fn new(p: &Program, scalars: *const f32, n: usize, w: usize) -> Tiles {
        let (slots, count, streams) = (p.slots, p.scalars.len(), p.streams.len());
        let base = scratch(slots + count + streams + 1);
        let used = (n.div_ceil(4 * w) * 4 * w).min(TILE);
        for c in 0..count {
            let v = *scalars.add(c);
            let tile = base.add((slots + c) * TILE);
            for j in 0..used {
                *tile.add(j) = v;
            }
        }
        Tiles {
            base,
            slots,
            scalars: count,
            streams,
        }
    }

    #[inline(always)]
    unsafe fn staged_stream(&self, s: usize) -> *mut f32 {
        self.base.add((self.slots + self.scalars + s) * TILE)
    }

    #[inline(always)]
    unsafe fn value(&self) -> *mut f32 {
        self.base
            .add((self.slots + self.scalars + self.streams) * TILE)
    }

    /// Each stream's pointer at element `start`.
    #[inline(always)]
    unsafe fn at(&self, streams: *const *const f32, start: usize) -> [*const f32; MAX_STREAMS] {
        let mut ptrs = [std::ptr::null::<f32>(); MAX_STREAMS];
        for (s, ptr) in ptrs.iter_mut().enumerate().take(self.streams) {
            *ptr = (*streams.add(s)).add(start);
        }
        ptrs
    }

    /// The streams' last `rem` elements from `start` copied to the
    /// staging tiles, padded with zeros to `len`; their pointers.
    #[inline(always)]
    unsafe fn staged(
        &self,
        streams: *const *const f32,
        start: usize,
        rem: usize,
        len: usize,
    ) -> [*const f32; MAX_STREAMS] {
        let mut ptrs = [std::ptr::null::<f32>(); MAX_STREAMS];
        for (s, ptr) in ptrs.iter_mut().enumerate().take(self.streams) {
            let staged = self.staged_stream(s);
            std::ptr::copy_nonoverlapping((*streams.add(s)).add(start), staged, rem);
            for j in rem..len {
                *staged.add(j) = 0.0;
            }
            *ptr = staged;
        }
        ptrs
    }
}

/// Runs `p` over `n` elements, storing: stream `s` starts at
/// `streams[s]`, scalar `c` is `scalars[c]`, the output starts at `out`.
///
/// # Safety
/// The host has `L`'s features; the pointers hold `n` elements (streams,
/// output) and `p.scalars.len()` values; `p.streams.len()` pointers.
#[inline(always)]
unsafe fn run<L: Wide>(
    p: &Program,
    streams: *const *const f32,
    scalars: *const f32,
    out: *mut f32,
    n: usize,
) {
    let mut l = L::default();
    let t = Tiles::new(p, scalars, n, L::W);
    let mut start = 0;
    while start + TILE <= n {
        let ptrs = t.at(streams, start);
        tile(&mut l, p, TILE, t.base, &ptrs, out.add(start));
        start += TILE;
    }
    let rem = n - start;
    if rem > 0 {
        let len = rem.div_ceil(L::W) * L::W;
        let ptrs = t.staged(streams, start, rem, len);
        tile(&mut l, p, len, t.base, &ptrs, t.value());
        std::ptr::copy_nonoverlapping(t.value(), out.add(start), rem);
    }
}

/// The sum of `p`'s value over `n` elements (operands as [`run`]'s), in
/// a fixed order that depends only on `n`: element `j` goes to lane
/// `j mod W` of accumulator `(j / W) mod 4`; the accumulators are combined
/// as `(a0 + a1) + (a2 + a3)`, then the lanes by halving (lane `i` plus
/// lane `i + h`, for `h = W/2, W/4, …, 1`).
///
/// # Safety
/// As [`run`].
#[inline(always)]
unsafe fn run_sum<L: Wide>(
    p: &Program,
    streams: *const *const f32,
    scalars: *const f32,
    n: usize,
) -> f32 {
    let mut l = L::default();
    let t = Tiles::new(p, scalars, n, L::W);
    let value = t.value();
    let zero = l.c(0.0);
    let mut acc = [zero; 4];
    let mut start = 0;
    while start + TILE <= n {
        let ptrs = t.at(streams, start);
        tile(&mut l, p, TILE, t.base, &ptrs, value);
        add_tile(&mut l, &mut acc, value, TILE);
        start += TILE;
    }
    let rem = n - start;
    if rem > 0 {
        // Whole groups of four vectors; the lanes past `rem` add zero.
        let len = rem.div_ceil(4 * L::W) * 4 * L::W;
        let ptrs = t.staged(streams, start, rem, len);
        tile(&mut l, p, len, t.base, &ptrs, value);
        for j in rem..len {
            *value.add(j) = 0.0;
        }
        add_tile(&mut l, &mut acc, value, len);
    }
    let a01 = l.add(acc[0], acc[1]);
    let a23 = l.add(acc[2], acc[3]);
    let total = l.add(a01, a23);
    let mut lanes = [0f32; 16];
    l.store(lanes.as_mut_ptr(), total);
    let mut h = L::W / 2;
    while h > 0 {
        for i in 0..h {
            lanes[i] += lanes[i + h];
        }
        h /= 2;
    }
    lanes[0]
}

/// Adds `len` values (a multiple of four vectors) into the accumulators,
/// vector `k` into accumulator `k mod 4`.
#[inline(always)]
unsafe fn add_tile<L: Wide>(l: &mut L, acc: &mut [L::F; 4], value: *const f32, len: usize) {
    let mut j = 0;
    while j < len {
        for a in acc.iter_mut() {
            let x = l.load(value.add(j));
            *a = l.add(*a, x);
            j += L::W;
        }
    }
}

/// Runs every step of `p` over one tile of `len` elements (a multiple of
/// the width).
#[inline(always)]
unsafe fn tile<L: Wide>(
    l: &mut L,
    p: &Program,
    len: usize,
    base: *mut f32,
    streams: &[*const f32; MAX_STREAMS],
    out: *mut f32,
) {
    let slots = p.slots;
    let src = |s: Src| -> *const f32 {
        match s {
            Src::Slot(k) => base.add(k as usize * TILE),
            Src::Stream(k) => streams[k as usize],
            Src::Scalar(k) => base.add((slots + k as usize) * TILE),
        }
    };
    for step in &p.steps {
        let (op, dst) = match *step {
            Step::Lanes { op, dst } => (op, dst),
            Step::Jit { entry } => {
                // SAFETY: `entry` is a compiled segment with this
                // signature (`crate::cpu::wide_segment`), alive with `p`.
                let f: Segment = std::mem::transmute::<usize, Segment>(entry);
                f(base, streams.as_ptr(), out, len as i64);
                continue;
            }
        };
        let d = match dst {
            Dst::Slot(k) => base.add(k as usize * TILE),
            Dst::Out => out,
        };
        match op {
            Op::Unary(op, a) => unary(l, op, src(a), d, len),
            Op::Binary(op, a, b) => binary(l, op, src(a), src(b), d, len),
            Op::PowI(a, n) => map!(l, len, d, [x = src(a)] => l.powi(x, n)),
            Op::Select {
                cc,
                a,
                b,
                then,
                otherwise,
            } => map!(
                l,
                len,
                d,
                [x = src(a), y = src(b), t = src(then), o = src(otherwise)] => {
                    let m = l.cmp(cc, x, y);
                    l.sel(m, t, o)
                }
            ),
        }
    }
    if let Some(s) = p.copy {
        // `copy`, not `copy_nonoverlapping`: an in-place run stores a
        // stream over itself.
        std::ptr::copy(src(s), out, len);
    }
}

#[inline(always)]
unsafe fn unary<L: Wide>(l: &mut L, op: UnaryOp, a: *const f32, d: *mut f32, len: usize) {
    let f = match op {
        UnaryOp::Neg => return map!(l, len, d, [x = a] => l.neg(x)),
        UnaryOp::Abs => return map!(l, len, d, [x = a] => l.abs(x)),
        UnaryOp::Sqrt => return map!(l, len, d, [x = a] => l.sqrt(x)),
        UnaryOp::Floor => return map!(l, len, d, [x = a] => l.floor(x)),
        UnaryOp::Sgn => return map!(l, len, d, [x = a] => l.sgn(x)),
        UnaryOp::Exp => return map!(l, len, d, [x = a] => l.exp(x)),
        UnaryOp::Tanh => return map!(l, len, d, [x = a] => l.tanh(x)),
        UnaryOp::Sigmoid => return map!(l, len, d, [x = a] => l.sigmoid(x)),
        UnaryOp::Log => return map!(l, len, d, [x = a] => l.log(x)),
        UnaryOp::Log10 => return map!(l, len, d, [x = a] => l.log10(x)),
        UnaryOp::Erf => return map!(l, len, d, [x = a] => l.erf(x)),
        UnaryOp::Detach => return std::ptr::copy(a, d, len),
        // The scalar f32 functions the f32x4 code calls lane by lane.
        UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Log1p | UnaryOp::Expm1 | UnaryOp::Atan => {
            MathFn::of(op)
        }
    };
    if let Some(f) = f.and_then(MathFn::f32_unary) {
        for j in 0..len {
            *d.add(j) = f(*a.add(j));
        }
    }
}

#[inline(always)]
unsafe fn binary<L: Wide>(
    l: &mut L,
    op: BinaryOp,
    a: *const f32,
    b: *const f32,
    d: *mut f32,
    len: usize,
) {
    match op {
        BinaryOp::Add => map!(l, len, d, [x = a, y = b] => l.add(x, y)),
        BinaryOp::Sub => map!(l, len, d, [x = a, y = b] => l.sub(x, y)),
        BinaryOp::Mul => map!(l, len, d, [x = a, y = b] => l.mul(x, y)),
        BinaryOp::Div => map!(l, len, d, [x = a, y = b] => l.div(x, y)),
        BinaryOp::Max => map!(l, len, d, [x = a, y = b] => l.max_first(x, y)),
        BinaryOp::Min => map!(l, len, d, [x = a, y = b] => l.min_first(x, y)),
        BinaryOp::Pow => {
            let f = MathFn::pow_f32();
            for j in 0..len {
                *d.add(j) = f(*a.add(j), *b.add(j));
            }
        }
    }
}

#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn run_avx512(
    p: &Program,
    streams: *const *const f32,
    scalars: *const f32,
    out: *mut f32,
    n: usize,
) {
    run::<Avx512>(p, streams, scalars, out, n)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(
    p: &Program,
    streams: *const *const f32,
    scalars: *const f32,
    out: *mut f32,
    n: usize,
) {
    run::<Avx2>(p, streams, scalars, out, n)
}

#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn sum_avx512(
    p: &Program,
    streams: *const *const f32,
    scalars: *const f32,
    n: usize,
) -> f32 {
    run_sum::<Avx512>(p, streams, scalars, n)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn sum_avx2(p: &Program, streams: *const *const f32, scalars: *const f32, n: usize) -> f32 {
    run_sum::<Avx2>(p, streams, scalars, n)
}

/// The sum of the program `p`'s value over `n > 0` elements at AVX-512
/// width (see [`run_sum`] for the order).
///
/// # Safety
/// As [`tenjin_wide_avx512`] (no output).
pub(crate) unsafe extern "C" fn tenjin_wide_sum_avx512(
    p: *const Program,
    streams: *const *const f32,
    scalars: *const f32,
    n: i64,
) -> f32 {
    sum_avx512(&*p, streams, scalars, n.max(0) as usize)
}

/// As [`tenjin_wide_sum_avx512`], at AVX2 width.
///
/// # Safety
/// As [`tenjin_wide_sum_avx512`].
pub(crate) unsafe extern "C" fn tenjin_wide_sum_avx2(
    p: *const Program,
    streams: *const *const f32,
    scalars: *const f32,
    n: i64,
) -> f32 {
    sum_avx2(&*p, streams, scalars, n.max(0) as usize)
}

/// Runs the program `p` at AVX-512 width over `n > 0` elements (see `run`
/// for the operands). Generated code calls it only when the host has
/// AVX-512F and FMA (`super::Width::host`).
///
/// # Safety
/// As `run`, and `p` points at a live [`Program`].
pub(crate) unsafe extern "C" fn tenjin_wide_avx512(
    p: *const Program,
    streams: *const *const f32,
    scalars: *const f32,
    out: *mut f32,
    n: i64,
) {
    run_avx512(&*p, streams, scalars, out, n.max(0) as usize)
}

/// As [`tenjin_wide_avx512`], at AVX2 width (the host has AVX2 and FMA).
///
/// # Safety
/// As [`tenjin_wide_avx512`].
pub(crate) unsafe extern "C" fn tenjin_wide_avx2(
    p: *const Program,
    streams: *const *const f32,
    scalars: *const f32,
    out: *mut f32,
    n: i64,
) {
    run_avx2(&*p, streams, scalars, out, n.max(0) as usize)
}
