//! Every kernel the host can run against a reference product in f64, over
//! strided, transposed, broadcast and reversed views, edge tiles, several
//! blocks of K, `alpha` and accumulation; and the bitwise promises: a tile
//! of C computed alone equals the same elements of the whole product, and
//! the FMA kernels of every width give the same bits.

use super::super::wide::Width;
use super::blis::{gemm, k_block, k_blocks, mirror_lower, prepack, Operand, Product};
use super::kernels::{portable, Float, Kernel};
use super::pack::{pack_panels, Index};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Every kernel this host runs, at every width up to its own.
fn kernels<T: Float + 'static>() -> Vec<Kernel<T>> {
    let mut all: Vec<Kernel<T>> = [Width::F32x4, Width::Avx2, Width::Avx512]
        .into_iter()
        .filter(|&w| w <= Width::supported())
        .flat_map(|w| {
            let (wide, narrow) = T::kernels_at(w);
            std::iter::once(wide).chain(narrow)
        })
        .collect();
    // Both AVX-512 f32 kernels (the CPU's vendor picks one) on any
    // AVX-512 host.
    #[cfg(target_arch = "x86_64")]
    if Width::Avx512 <= Width::supported() {
        let both = [super::x86::AVX512_F32, super::x86::AVX512_F32_INTEL];
        if let Some(both) = (&both as &dyn std::any::Any).downcast_ref::<[Kernel<T>; 2]>() {
            for k in both {
                if !all.iter().any(|x| x.name == k.name) {
                    all.push(*k);
                }
            }
        }
    }
    all
}

/// A matrix layout: row-major, column-major, a row broadcast along the
/// rows (row stride 0), or row-major read backwards.
#[derive(Clone, Copy, Debug)]
enum Layout {
    Rows,
    Cols,
    Broadcast,
    Reversed,
}

const LAYOUTS: [Layout; 4] = [
    Layout::Rows,
    Layout::Cols,
    Layout::Broadcast,
    Layout::Reversed,
];

/// Storage for an `r × c` matrix in `layout`, and the view of it.
fn matrix<T: Float>(
    r: usize,
    c: usize,
    layout: Layout,
    rng: &mut StdRng,
) -> (Vec<T>, isize, isize, isize) {
    let len = match layout {
        Layout::Broadcast => c,
        _ => r * c,
    };
    let data: Vec<T> = (0..len)
        .map(|_| T::from_f64(rng.gen_range(-1.0..1.0)))
        .collect();
    let (base, rs, cs) = match layout {
        Layout::Rows => (0, c as isize, 1),
        Layout::Cols => (0, 1, r as isize),
        Layout::Broadcast => (0, 0, 1),
        Layout::Reversed => ((r * c) as isize - 1, -(c as isize), -1),
    };
    (data, base, rs, cs)
}

struct Case {
    m: usize,
    n: usize,
    k: usize,
    a: Layout,
    b: Layout,
    c_cols: bool,
    alpha: f64,
    accumulate: bool,
    /// A diagonal factor, read every other element.
    diag: bool,
    /// Only the lower triangle, with C's row 0 at this row of the whole.
    lower: Option<isize>,
    /// The terms of K read through tables of offsets, in reverse order,
    /// and the rows of A and B through tables (in order: uniform tables
    /// take the adjacent-row copies, reversed ones the gathers).
    tables: bool,
    /// Both factors packed whole beforehand (as for a shared factor).
    prepacked: bool,
}

/// Runs `case` with `kernel` (blocks of K of at most `kc`) and checks every element against a product
/// in f64 to `tol` relative to `Σ|a||b|`; returns C.
fn check<T: Float>(kernel: &Kernel<T>, kc: usize, case: &Case, tol: f64, seed: u64) -> Vec<T> {
    let Case { m, n, k, .. } = *case;
    let mut rng = StdRng::seed_from_u64(seed);
    let (a, a0, ars, acs) = matrix::<T>(m, k, case.a, &mut rng);
    let (b, b0, brs, bcs) = matrix::<T>(k, n, case.b, &mut rng);
    let (rs_c, cs_c) = if case.c_cols {
        (1, m as isize)
    } else {
        (n as isize, 1)
    };
    let start: Vec<T> = (0..m * n)
        .map(|_| T::from_f64(rng.gen_range(-1.0..1.0)))
        .collect();
    let mut c = start.clone();
    if !case.accumulate {
        c.fill(T::from_f64(f64::NAN)); // never read
    }
    let d: Vec<T> = (0..2 * k)
        .map(|_| T::from_f64(rng.gen_range(-2.0..2.0)))
        .collect();
    let dt = |p: usize| if case.diag { d[2 * p].to_f64() } else { 1.0 };
    let at = |i: usize, p: usize| a[(a0 + i as isize * ars + p as isize * acs) as usize].to_f64();
    let bt = |p: usize, j: usize| b[(b0 + p as isize * brs + j as isize * bcs) as usize].to_f64();
    // Term `p` read at `order[p]` through tables, or at `p` by strides.
    let order: Vec<isize> = (0..k as isize).rev().collect();
    let table = |stride: isize| order.iter().map(|&p| p * stride).collect::<Vec<isize>>();
    let (ta, tb, td) = (table(acs), table(brs), table(2));
    // Rows read through tables of their offsets (in order), or by strides.
    let rows_of = |n: usize, stride: isize| (0..n as isize).map(|r| r * stride).collect::<Vec<_>>();
    let (ra, rb) = (rows_of(m, ars), rows_of(n, bcs));
    let index = |t: &Vec<isize>, stride: isize| {
        if case.tables {
            Index::Table(t.as_ptr())
        } else {
            Index::Stride(stride)
        }
    };
    // SAFETY: the views cover their storage exactly and C is its own buffer.
    unsafe {
        let va = Operand {
            ptr: a.as_ptr().offset(a0),
            rows: index(&ra, ars),
            k: index(&ta, acs),
            packed: std::ptr::null(),
        };
        let vb = Operand {
            ptr: b.as_ptr().offset(b0),
            rows: index(&rb, bcs),
            k: index(&tb, brs),
            packed: std::ptr::null(),
        };
        let diag = case.diag.then_some((d.as_ptr(), index(&td, 2)));
        let (a_packed, b_packed) = if case.prepacked {
            let a = prepack(kernel.mr, kc, m, k, va, None);
            (a, prepack(kernel.nr, kc, n, k, vb, diag))
        } else {
            (Vec::new(), Vec::new())
        };
        let packed = |v: &Vec<T>| {
            if v.is_empty() {
                std::ptr::null()
            } else {
                v.as_ptr()
            }
        };
        let product = Product {
            m,
            n,
            k,
            alpha: T::from_f64(case.alpha),
            a: Operand {
                packed: packed(&a_packed),
                ..va
            },
            b: Operand {
                packed: packed(&b_packed),
                ..vb
            },
            diag,
            c: c.as_mut_ptr(),
            rs_c,
            cs_c,
            accumulate: case.accumulate,
            lower: case.lower,
        };
        gemm(kernel, kc, product);
    }
    for i in 0..m {
        for j in 0..n {
            if case.lower.is_some_and(|off| i as isize + off < j as isize) {
                continue; // above the diagonal: not needed
            }
            let (mut want, mut size) = (0.0, 0.0);
            for p in 0..k {
                want += at(i, p) * dt(p) * bt(p, j);
                size += (at(i, p) * dt(p) * bt(p, j)).abs();
            }
            let at_c = (i as isize * rs_c + j as isize * cs_c) as usize;
            let before = if case.accumulate {
                start[at_c].to_f64()
            } else {
                0.0
            };
            let want = before + case.alpha * want;
            let got = c[at_c].to_f64();
            assert!(
                (got - want).abs() <= tol * (1.0 + size * case.alpha.abs()),
                "{}: {m}x{n}x{k} A {:?} B {:?} C cols {} alpha {} acc {} diag {} lower {:?} tables {} prepacked {}: ({i}, {j}) = {got}, want {want}",
                kernel.name, case.a, case.b, case.c_cols, case.alpha, case.accumulate, case.diag, case.lower, case.tables, case.prepacked
            );
        }
    }
    c
}

/// Sizes around every kernel's tile and block edges, and matrix–vector
/// products (one column, one row).
const SIZES: [(usize, usize, usize); 10] = [
    (1, 1, 1),
    (37, 1, 300),
    (1, 45, 70),
    (130, 1, 33),
    (5, 7, 3),
    (6, 32, 16),
    (13, 45, 70),
    (37, 33, 300),
    (150, 20, 9),
    (7, 100, 520),
];

#[test]
fn every_kernel_matches_the_reference_over_every_layout() {
    let mut seed = 0;
    for (m, n, k) in SIZES {
        for a in LAYOUTS {
            for b in LAYOUTS {
                seed += 1;
                let (c_cols, accumulate) = (seed % 3 == 0, seed % 2 == 0);
                let alpha = if seed % 5 == 0 { -0.75 } else { 1.0 };
                // Diagonal factors and lower triangles (row offsets around
                // the register tile) on some of the cases.
                let diag = seed % 4 == 1;
                let lower = (seed % 7 == 2).then_some((seed % 13) as isize - 6);
                let case = Case {
                    m,
                    n,
                    k,
                    a,
                    b,
                    c_cols,
                    alpha,
                    accumulate,
                    diag,
                    lower,
                    tables: seed % 3 == 1,
                    prepacked: seed % 5 == 3,
                };
                // Blocks of K as the driver picks them, and short ones.
                let kc = |whole: usize| if seed % 2 == 0 { whole } else { 64 };
                for kernel in kernels::<f64>() {
                    check(&kernel, kc(k_block(&kernel, n, k)), &case, 1e-14, seed);
                }
                for kernel in kernels::<f32>() {
                    check(&kernel, kc(k_block(&kernel, n, k)), &case, 1e-6, seed);
                }
            }
        }
    }
}

/// B read in place through its table of terms (full panels of adjacent
/// columns: a convolution's windows) gives the bits of B packed, for every
/// kernel, with a partial last panel and blocks of K.
#[test]
fn b_read_in_place_through_its_terms_equals_b_packed_bitwise() {
    for (m, n, k) in [(13, 70, 70), (37, 33, 300), (7, 100, 520)] {
        let case = |prepacked| Case {
            m,
            n,
            k,
            a: Layout::Rows,
            b: Layout::Rows,
            c_cols: false,
            alpha: 1.0,
            accumulate: false,
            diag: false,
            lower: None,
            tables: true,
            prepacked,
        };
        for kernel in kernels::<f32>() {
            let kc = k_block(&kernel, n, k).min(256);
            let direct = check(&kernel, kc, &case(false), 1e-6, 3);
            let packed = check(&kernel, kc, &case(true), 1e-6, 3);
            let bits = |c: &[f32]| c.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&direct), bits(&packed), "{} {m}x{n}x{k}", kernel.name);
        }
    }
}

#[test]
fn a_tile_of_c_alone_equals_the_whole_product_bitwise() {
    // The driver cuts M or N among threads: a piece must round exactly as
    // the whole does, so the K blocks may depend on K only.
    let (m, n, k) = (70, 90, 600);
    let mut rng = StdRng::seed_from_u64(7);
    let a: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.gen_range(-1.0..1.0)).collect();
    for kernel in kernels::<f32>() {
        let run = |rows: std::ops::Range<usize>, cols: std::ops::Range<usize>| {
            let mut c = vec![0f32; m * n];
            // SAFETY: the pieces of A, B and C lie inside their buffers.
            unsafe {
                let va = Operand {
                    ptr: a.as_ptr().add(rows.start * k),
                    rows: Index::Stride(k as isize),
                    k: Index::Stride(1),
                    packed: std::ptr::null(),
                };
                let vb = Operand {
                    ptr: b.as_ptr().add(cols.start),
                    rows: Index::Stride(1),
                    k: Index::Stride(n as isize),
                    packed: std::ptr::null(),
                };
                let dst = c.as_mut_ptr().add(rows.start * n + cols.start);
                let product = Product {
                    m: rows.len(),
                    n: cols.len(),
                    k,
                    alpha: 1.0,
                    a: va,
                    b: vb,
                    diag: None,
                    c: dst,
                    rs_c: n as isize,
                    cs_c: 1,
                    accumulate: false,
                    lower: None,
                };
                gemm(&kernel, 128, product);
            }
            c
        };
        let whole = run(0..m, 0..n);
        let top = run(0..23, 0..n);
        let right = run(0..m, 37..n);
        for i in 0..m {
            for j in 0..n {
                let x = whole[i * n + j].to_bits();
                if i < 23 {
                    assert_eq!(top[i * n + j].to_bits(), x, "{}: ({i}, {j})", kernel.name);
                }
                if j >= 37 {
                    assert_eq!(right[i * n + j].to_bits(), x, "{}: ({i}, {j})", kernel.name);
                }
            }
        }
    }
}

#[test]
fn the_fma_kernels_of_every_width_give_the_same_bits() {
    // M = 50 and 56: a last panel of 2 and 8 rows under the twelve-row
    // tile (its 4- and 8-row kernels, `Kernel::short`).
    for m in [50, 56] {
        let case = Case {
            m,
            n: 70,
            k: 700,
            a: Layout::Rows,
            b: Layout::Cols,
            c_cols: false,
            alpha: 1.0,
            accumulate: false,
            diag: true,
            lower: None,
            tables: false,
            prepacked: false,
        };
        let f32s: Vec<Vec<u32>> = kernels::<f32>()[1..]
            .iter()
            .map(|kn| {
                check(kn, 256, &case, 1e-6, 3)
                    .iter()
                    .map(|x| x.to_bits())
                    .collect()
            })
            .collect();
        let f64s: Vec<Vec<u64>> = kernels::<f64>()[1..]
            .iter()
            .map(|kn| {
                check(kn, 256, &case, 1e-14, 3)
                    .iter()
                    .map(|x| x.to_bits())
                    .collect()
            })
            .collect();
        assert!(f32s.windows(2).all(|w| w[0] == w[1]), "M = {m}");
        assert!(f64s.windows(2).all(|w| w[0] == w[1]), "M = {m}");
    }
}

#[test]
fn k_is_blocked_unless_b_is_narrow() {
    let kernel = portable::<f32>();
    assert_eq!(k_block(&kernel, 64, 576), 576);
    assert_eq!(k_block(&kernel, 0, 0), 1);
    assert_eq!(k_block(&kernel, 1024, 1024), kernel.kc);
}

#[test]
fn k_is_cut_into_nearly_equal_blocks() {
    assert_eq!(k_blocks(1, 256), (1, 1));
    assert_eq!(k_blocks(256, 256), (1, 256));
    assert_eq!(k_blocks(257, 256), (2, 129));
    assert_eq!(k_blocks(1000, 256), (4, 250));
}

#[test]
fn the_lower_triangle_is_mirrored_onto_the_upper_one() {
    for (n, rs, cs) in [(1, 1, 1), (5, 5, 1), (70, 1, 70), (33, 40, 1)] {
        let len = (n - 1) * (rs + cs) + 1;
        let mut c: Vec<f64> = (0..len).map(|x| x as f64).collect();
        let want = |c: &[f64], i: usize, j: usize| c[i.max(j) * rs + i.min(j) * cs];
        let before = c.clone();
        // SAFETY: every element of the n × n view lies in `c`.
        unsafe { mirror_lower(c.as_mut_ptr(), n, rs as isize, cs as isize) };
        for i in 0..n {
            for j in 0..n {
                assert_eq!(c[i * rs + j * cs], want(&before, i, j), "{n} ({i}, {j})");
            }
        }
    }
}

/// Panels of 32 rows in two runs at stride 2 (a stride-2 convolution's
/// output rows over its padded image, packed with permutes on AVX-512
/// hosts) hold exactly the values a gather would, with terms through a
/// table and a stride, and rows through a table and a uniform stride.
#[test]
fn rows_at_stride_two_pack_like_a_gather() {
    let src: Vec<f32> = (0..400).map(|i| i as f32 * 0.5 - 7.0).collect();
    let table: Vec<isize> = (0..16)
        .map(|i| 2 * i)
        .chain((0..16).map(|i| 70 + 2 * i))
        .collect();
    let terms: Vec<isize> = vec![0, 1, 2, 34, 35, 36, 68];
    let uniform: Vec<isize> = (0..32).map(|i| 2 * i).collect();
    for (rows, offsets) in [
        (Index::Table(table.as_ptr()), &table),
        (Index::Stride(2), &uniform),
    ] {
        for k in [Index::Table(terms.as_ptr()), Index::Stride(3)] {
            let kc = terms.len();
            let mut panel = vec![f32::NAN; 32 * kc];
            // SAFETY: every row offset plus every term offset is inside `src`.
            unsafe { pack_panels(32, 32, kc, src.as_ptr(), rows, k, panel.as_mut_ptr()) };
            for p in 0..kc {
                for i in 0..32 {
                    // SAFETY: the tables hold `kc` and 32 entries.
                    let at = offsets[i] + unsafe { k.at(p) };
                    assert_eq!(panel[p * 32 + i], src[at as usize], "term {p}, row {i}");
                }
            }
        }
    }
}

/// A product whose C is column-major (a convolution phase: positions
/// contiguous, channels apart) gives the same bits with its factors
/// exchanged as computed directly, batch and threads alike.
#[test]
fn a_column_major_product_with_its_factors_exchanged_gives_the_same_bits() {
    use crate::kernel::contraction::{Contraction, Dim};
    // p[b; c; a] = Σ_o dy[b; o; a] · w[o; c], dy [3, 71, 150], w [71, 40],
    // as `planner::contraction::detect` finds it: M the positions `a`
    // (contiguous in C), N the channels `c`.
    let dim = |len, a, b, out| Dim {
        len,
        a,
        b,
        out,
        d: 0,
    };
    let c = Contraction {
        arg_a: 0,
        arg_b: 1,
        arg_lens: vec![3 * 71 * 150, 71 * 40],
        out_len: 3 * 40 * 150,
        base_a: 0,
        base_b: 0,
        m: dim(150, 1, 0, 1),
        n: dim(40, 0, 1, 150),
        k: dim(71, 150, 40, 0),
        batch: vec![dim(3, 71 * 150, 0, 40 * 150)],
        k_outer: Vec::new(),
        k_total: 71,
        scale: 1.0,
        diag: None,
        symmetric: false,
        accumulate: None,
        threads: 1,
        half_operands: None,
    };
    let swapped = super::oriented(&c);
    assert_eq!(swapped.arg_a, c.arg_b, "the factors are exchanged");
    let mut rng = StdRng::seed_from_u64(5);
    let dy: Vec<f32> = (0..3 * 71 * 150)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let w: Vec<f32> = (0..71 * 40).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let run = |c: &Contraction, threads| {
        let mut out = vec![0f32; 3 * 40 * 150];
        c.run_with_threads(&[&dy[..], &w[..]], &mut out, threads);
        out
    };
    let direct = run(&c, 1);
    // The direct product against the sum written out in f64.
    for b in 0..3 {
        for ch in 0..40 {
            for a in 0..150 {
                let want: f64 = (0..71)
                    .map(|o| dy[(b * 71 + o) * 150 + a] as f64 * w[o * 40 + ch] as f64)
                    .sum();
                let got = direct[(b * 40 + ch) * 150 + a] as f64;
                assert!(
                    (got - want).abs() < 1e-4,
                    "({b}, {ch}, {a}): {got} vs {want}"
                );
            }
        }
    }
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let direct = bits(direct);
    for threads in [1, 2, 3] {
        assert!(bits(run(&swapped, threads)) == direct, "{threads} threads");
    }
}
