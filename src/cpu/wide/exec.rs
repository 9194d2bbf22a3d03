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

/// `d[j] = body(a[j])` over `len` elements, a vector at a time.
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

/// Runs `p` over `n` elements: stream `s` starts at `streams[s]`, scalar
/// `c` is `scalars[c]`, the output starts at `out`.
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
    let (ns, nc) = (p.streams.len(), p.scalars.len());
    // Slots, scalar tiles, staging tiles for the streams and the output.
    let tiles = p.slots + nc + ns + 1;
    let base = scratch(tiles);
    for c in 0..nc {
        let v = *scalars.add(c);
        let t = base.add((p.slots + c) * TILE);
        for j in 0..TILE {
            *t.add(j) = v;
        }
    }
    let mut ptrs = [std::ptr::null::<f32>(); MAX_STREAMS];
    let mut start = 0;
    while start + TILE <= n {
        for (s, ptr) in ptrs.iter_mut().enumerate().take(ns) {
            *ptr = (*streams.add(s)).add(start);
        }
        tile(&mut l, p, TILE, base, &ptrs, out.add(start));
        start += TILE;
    }
    let rem = n - start;
    if rem > 0 {
        let len = rem.div_ceil(L::W) * L::W;
        for (s, ptr) in ptrs.iter_mut().enumerate().take(ns) {
            let staged = base.add((p.slots + nc + s) * TILE);
            std::ptr::copy_nonoverlapping((*streams.add(s)).add(start), staged, rem);
            for j in rem..len {
                *staged.add(j) = 0.0;
            }
            *ptr = staged;
        }
        let staged_out = base.add((tiles - 1) * TILE);
        tile(&mut l, p, len, base, &ptrs, staged_out);
        std::ptr::copy_nonoverlapping(staged_out, out.add(start), rem);
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
        UnaryOp::Detach => return std::ptr::copy(a, d, len),
        // The scalar f32 functions the f32x4 code calls lane by lane.
        UnaryOp::Sin => MathFn::Sin,
        UnaryOp::Cos => MathFn::Cos,
        UnaryOp::Log1p => MathFn::Log1p,
        UnaryOp::Expm1 => MathFn::Expm1,
        UnaryOp::Atan => MathFn::Atan,
        UnaryOp::Erf => MathFn::Erf,
    };
    if let Some(f) = f.f32_unary() {
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
