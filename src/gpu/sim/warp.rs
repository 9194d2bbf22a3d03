//! Running a decoded [`Program`] over a grid: threads in warps of
//! [`WARP`] lanes that execute each instruction together, as the hardware
//! does, so the cost of dispatching an instruction is paid once per warp,
//! not once per thread.
//!
//! Owns [`Program::run`]. A warp's registers are slot-major
//! (`r[slot · WARP + lane]`). While its running lanes agree on the next
//! instruction (*converged*) they step together; when a branch splits
//! them, each step runs the lanes at the lowest instruction address
//! (min-PC scheduling, which reconverges structured code: a loop's
//! remaining iterations run before the code after it), until they agree
//! again. A kernel with barriers runs each block in phases: every warp
//! until all its lanes wait at a barrier or have exited, then all go on;
//! a barrier some threads exit without reaching is an error. Every
//! memory access is still checked per thread. Must not decode.

use super::interp::{Memory, Program, MAX_BRANCHES_PER_THREAD};
use super::isa::{Bin, Op};
use super::semantics::{apply_binary, apply_unary, compare, convert};
use super::shared::SharedMemory;

/// Lanes per warp (a mask bit each).
pub(crate) const WARP: usize = 32;
type Mask = u32;
const FULL: Mask = Mask::MAX;

/// Runs `$body` for every lane `$l` in `$mask` (a plain loop when all are
/// in it).
macro_rules! each_lane {
    ($mask:expr, |$l:ident| $body:expr) => {{
        let mask: Mask = $mask;
        if mask == FULL {
            for $l in 0..WARP {
                $body;
            }
        } else {
            let mut m = mask;
            while m != 0 {
                let $l = m.trailing_zeros() as usize;
                m &= m - 1;
                $body;
            }
        }
    }};
}

/// One warp: its registers, where its lanes are and what they do.
struct Warp {
    r: Vec<u64>,
    /// Lanes that run (neither exited nor waiting at a barrier).
    running: Mask,
    waiting: Mask,
    exited: Mask,
    /// The next instruction of every running lane while they agree.
    converged: Option<usize>,
    /// Each lane's next instruction (meaningful while not converged, and
    /// for lanes waiting at a barrier).
    pc: [usize; WARP],
    branches: u64,
    /// The thread of lane 0.
    first: u64,
}

/// The launch: the program and what every thread shares.
struct Launch<'p> {
    program: &'p Program,
    params: &'p [u64],
    grid: u32,
    block: u32,
}

impl Warp {
    fn new(slots: usize) -> Warp {
        Warp {
            r: vec![0; slots * WARP],
            running: 0,
            waiting: 0,
            exited: 0,
            converged: Some(0),
            pc: [0; WARP],
            branches: 0,
            first: 0,
        }
    }

    /// Warp `w` of block `b`, at the start of the kernel.
    fn start(&mut self, launch: &Launch, b: u32, w: u32) {
        let template = &launch.program.template;
        for (slot, &v) in template.iter().enumerate() {
            self.r[slot * WARP..(slot + 1) * WARP].fill(v);
        }
        let lanes = (launch.block as usize - w as usize * WARP).min(WARP);
        for l in 0..WARP {
            // %tid.x, %ntid.x, %ctaid.x, %nctaid.x.
            let tid = w as u64 * WARP as u64 + l as u64;
            for (slot, v) in [tid, launch.block as u64, b as u64, launch.grid as u64]
                .into_iter()
                .enumerate()
            {
                if slot < template.len() {
                    self.r[slot * WARP + l] = v;
                }
            }
        }
        self.running = if lanes == WARP {
            FULL
        } else {
            (1 << lanes) - 1
        };
        self.waiting = 0;
        self.exited = 0;
        self.converged = Some(0);
        self.branches = 0;
        self.first = b as u64 * launch.block as u64 + w as u64 * WARP as u64;
    }

    /// The lanes to step and their instruction: all running ones while
    /// converged, else those at the lowest address.
    fn next(&self) -> (usize, Mask) {
        if let Some(pc) = self.converged {
            return (pc, self.running);
        }
        let mut low = usize::MAX;
        each_lane!(self.running, |l| low = low.min(self.pc[l]));
        let mut mask = 0;
        each_lane!(self.running, |l| if self.pc[l] == low {
            mask |= 1 << l
        });
        (low, mask)
    }

    /// Sends the lanes of `mask` to instruction `to`.
    fn go(&mut self, mask: Mask, to: usize) {
        if self.converged.is_some() && mask == self.running {
            self.converged = Some(to);
            return;
        }
        if let Some(pc) = self.converged.take() {
            each_lane!(self.running, |l| self.pc[l] = pc);
        }
        each_lane!(mask, |l| self.pc[l] = to);
    }

    /// Marks the warp converged again when its running lanes agree.
    fn settle(&mut self) {
        if self.converged.is_some() || self.running == 0 {
            return;
        }
        let first = self.pc[self.running.trailing_zeros() as usize];
        let mut same = true;
        each_lane!(self.running, |l| same &= self.pc[l] == first);
        if same {
            self.converged = Some(first);
        }
    }

    /// Runs until every lane exited or waits at a barrier.
    fn run<M: Memory>(
        &mut self,
        launch: &Launch,
        memory: &mut M,
        shared: &mut SharedMemory,
    ) -> Result<(), String> {
        let program = launch.program;
        let first = self.first;
        while self.running != 0 {
            let (cur, mask) = self.next();
            let fail = |l: usize, e: String| {
                let thread = first + l as u64;
                match program.lines.get(
                    program
                        .code
                        .get(cur)
                        .map_or(usize::MAX, |i| i.line as usize),
                ) {
                    Some(text) => format!("thread {thread}: {e} in `{text}`"),
                    None => format!("thread {thread}: {e}"),
                }
            };
            let Some(inst) = program.code.get(cur) else {
                return Err(fail(
                    mask.trailing_zeros() as usize,
                    "fell off the end without `ret`".into(),
                ));
            };
            let r = &mut self.r;
            let at = |slot: u32, l: usize| slot as usize * WARP + l;
            match inst.op {
                Op::Ret => {
                    // Converged, every running lane returns; else the
                    // others keep their own instructions.
                    self.exited |= mask;
                    self.running &= !mask;
                    self.settle();
                    continue;
                }
                Op::Barrier => {
                    if let Some(pc) = self.converged.take() {
                        each_lane!(self.running, |l| self.pc[l] = pc);
                    }
                    each_lane!(mask, |l| self.pc[l] = cur + 1);
                    self.waiting |= mask;
                    self.running &= !mask;
                    self.settle();
                    continue;
                }
                Op::Bra(target) => {
                    self.branch(program, cur, mask.trailing_zeros() as usize)?;
                    self.go(mask, target as usize);
                    self.settle();
                    continue;
                }
                Op::BraIf { p, negated, target } => {
                    let mut taken = 0;
                    each_lane!(mask, |l| if (r[at(p, l)] != 0) != negated {
                        taken |= 1 << l
                    });
                    self.branch(program, cur, mask.trailing_zeros() as usize)?;
                    if taken == mask {
                        self.go(mask, target as usize);
                    } else if taken == 0 {
                        self.go(mask, cur + 1);
                    } else {
                        self.go(mask & !taken, cur + 1);
                        self.go(taken, target as usize);
                    }
                    self.settle();
                    continue;
                }
                Op::Shfl {
                    dst,
                    src,
                    b,
                    butterfly,
                } => {
                    // The hardware exchanges within a converged warp: every
                    // lane must be here.
                    if mask != FULL {
                        return Err(fail(
                            mask.trailing_zeros() as usize,
                            "`shfl.sync` with lanes of the warp elsewhere".into(),
                        ));
                    }
                    let mut got = [0u64; WARP];
                    for (l, g) in got.iter_mut().enumerate() {
                        let b = r[at(b.0, l)] as usize & (WARP - 1);
                        let from = if butterfly { l ^ b } else { b };
                        *g = r[at(src.0, from)] & 0xffff_ffff;
                    }
                    for (l, g) in got.into_iter().enumerate() {
                        r[at(dst, l)] = g;
                    }
                }
                Op::LdParam { dst, param } => {
                    let v = launch.params[param as usize];
                    each_lane!(mask, |l| r[at(dst, l)] = v)
                }
                Op::Mov { dst, src } => each_lane!(mask, |l| r[at(dst, l)] = r[at(src.0, l)]),
                Op::Ld { dst, addr, size } => each_lane!(mask, |l| {
                    r[at(dst, l)] = memory
                        .load(r[at(addr, l)], size as usize)
                        .map_err(|e| fail(l, e))?
                }),
                Op::St { addr, src, size } => each_lane!(mask, |l| memory
                    .store(
                        r[at(addr, l)],
                        size as usize,
                        r[at(src.0, l)],
                        first + l as u64
                    )
                    .map_err(|e| fail(l, e))?),
                Op::LdV { dst, n, addr, size } => each_lane!(mask, |l| {
                    let base = vector_base(r[at(addr, l)], n, size).map_err(|e| fail(l, e))?;
                    for (i, &d) in dst[..n as usize].iter().enumerate() {
                        r[at(d, l)] = memory
                            .load(base + (i * size as usize) as u64, size as usize)
                            .map_err(|e| fail(l, e))?
                    }
                }),
                Op::StV { addr, src, n, size } => each_lane!(mask, |l| {
                    let base = vector_base(r[at(addr, l)], n, size).map_err(|e| fail(l, e))?;
                    for (i, s) in src[..n as usize].iter().enumerate() {
                        memory
                            .store(
                                base + (i * size as usize) as u64,
                                size as usize,
                                r[at(s.0, l)],
                                first + l as u64,
                            )
                            .map_err(|e| fail(l, e))?
                    }
                }),
                Op::LdShared { dst, addr, size } => each_lane!(mask, |l| {
                    r[at(dst, l)] = shared
                        .load(r[at(addr, l)], size as usize, first + l as u64)
                        .map_err(|e| fail(l, e))?
                }),
                Op::StShared { addr, src, size } => each_lane!(mask, |l| shared
                    .store(
                        r[at(addr, l)],
                        size as usize,
                        r[at(src.0, l)],
                        first + l as u64
                    )
                    .map_err(|e| fail(l, e))?),
                Op::Setp { dst, cmp, a, b } => each_lane!(mask, |l| r[at(dst, l)] =
                    compare(cmp, r[at(a.0, l)], r[at(b.0, l)]) as u64),
                Op::Selp { dst, a, b, p } => each_lane!(mask, |l| r[at(dst, l)] =
                    if r[at(p.0, l)] != 0 {
                        r[at(a.0, l)]
                    } else {
                        r[at(b.0, l)]
                    }),
                Op::Cvt { dst, conv, src } => {
                    each_lane!(mask, |l| r[at(dst, l)] = convert(conv, r[at(src.0, l)]))
                }
                Op::Fma64 { dst, a, b, c } => each_lane!(mask, |l| r[at(dst, l)] =
                    f64::from_bits(r[at(a.0, l)])
                        .mul_add(f64::from_bits(r[at(b.0, l)]), f64::from_bits(r[at(c.0, l)]))
                        .to_bits()),
                Op::Fma32 { dst, a, b, c } => each_lane!(mask, |l| r[at(dst, l)] =
                    f32::from_bits(r[at(a.0, l)] as u32)
                        .mul_add(
                            f32::from_bits(r[at(b.0, l)] as u32),
                            f32::from_bits(r[at(c.0, l)] as u32)
                        )
                        .to_bits() as u64),
                Op::Mad32 { dst, a, b, c } => each_lane!(mask, |l| r[at(dst, l)] =
                    (r[at(a.0, l)] as u32)
                        .wrapping_mul(r[at(b.0, l)] as u32)
                        .wrapping_add(r[at(c.0, l)] as u32) as u64),
                Op::MadWideS32 { dst, a, b, c } => each_lane!(mask, |l| r[at(dst, l)] =
                    ((r[at(a.0, l)] as u32 as i32 as i64) * (r[at(b.0, l)] as u32 as i32 as i64))
                        .wrapping_add(r[at(c.0, l)] as i64) as u64),
                Op::Mad { dst, a, b, c } => each_lane!(mask, |l| r[at(dst, l)] = r[at(a.0, l)]
                    .wrapping_mul(r[at(b.0, l)])
                    .wrapping_add(r[at(c.0, l)])),
                Op::Not { dst, src } => {
                    each_lane!(mask, |l| r[at(dst, l)] = (r[at(src.0, l)] == 0) as u64)
                }
                Op::Un { dst, op, src } => {
                    each_lane!(mask, |l| r[at(dst, l)] = apply_unary(op, r[at(src.0, l)]))
                }
                Op::Bin { dst, op, a, b } => {
                    // The operations that cannot fail, one loop each (the
                    // operation's `match` resolved outside the lanes).
                    macro_rules! total {
                        ($($v:ident),*) => {
                            match op {
                                $(Bin::$v => each_lane!(mask, |l| r[at(dst, l)] =
                                    apply_binary(Bin::$v, r[at(a.0, l)], r[at(b.0, l)])
                                        .unwrap_or_default()),)*
                                _ => each_lane!(mask, |l| {
                                    r[at(dst, l)] = apply_binary(op, r[at(a.0, l)], r[at(b.0, l)])
                                        .ok_or_else(|| {
                                            fail(l, "integer division by zero or bad shift".into())
                                        })?
                                }),
                            }
                        };
                    }
                    total!(
                        AddF32,
                        SubF32,
                        MulF32,
                        DivF32,
                        AddF64,
                        SubF64,
                        MulF64,
                        DivF64,
                        MinF64,
                        MaxF64,
                        CopysignF64,
                        CopysignF32,
                        Add,
                        Sub,
                        Add32,
                        Sub32,
                        MulLo,
                        MulWideU32,
                        MaxS64,
                        MinS64,
                        MulLo32,
                        MaxS32,
                        MinS32,
                        And64,
                        Or64,
                        Xor64,
                        And32,
                        Or32,
                        Shl32,
                        ShrS32,
                        AndPred,
                        OrPred
                    )
                }
            }
            self.go(mask, cur + 1);
            self.settle();
        }
        Ok(())
    }

    /// Counts a branch (a kernel that loops forever is an error, not a
    /// hang).
    fn branch(&mut self, program: &Program, cur: usize, lane: usize) -> Result<(), String> {
        self.branches += 1;
        if self.branches > MAX_BRANCHES_PER_THREAD {
            let line = program.code[cur].line as usize;
            return Err(format!(
                "thread {}: runs too long in `{}`",
                self.first + lane as u64,
                program.lines[line]
            ));
        }
        Ok(())
    }
}

impl Program {
    /// Runs the kernel on `grid × block` threads with `params` (the
    /// parameters' values, in order) over `memory`. Errors name the
    /// thread and the instruction.
    pub(crate) fn run<M: Memory>(
        &self,
        params: &[u64],
        grid: u32,
        block: u32,
        memory: &mut M,
    ) -> Result<(), String> {
        if params.len() != self.params.len() {
            return Err(format!(
                "{} parameters given for {}",
                params.len(),
                self.params.len()
            ));
        }
        let launch = Launch {
            program: self,
            params,
            grid,
            block,
        };
        let warps = (block as usize).div_ceil(WARP) as u32;
        let slots = self.template.len();
        if !self.cooperative {
            // No barrier: warp after warp is a valid schedule.
            let mut warp = Warp::new(slots);
            for b in 0..grid {
                let mut shared = SharedMemory::new(&self.shared);
                for w in 0..warps {
                    warp.start(&launch, b, w);
                    warp.run(&launch, memory, &mut shared)?;
                }
            }
            return Ok(());
        }
        for b in 0..grid {
            let mut all: Vec<Warp> = (0..warps)
                .map(|w| {
                    let mut warp = Warp::new(slots);
                    warp.start(&launch, b, w);
                    warp
                })
                .collect();
            let mut shared = SharedMemory::new(&self.shared);
            loop {
                for warp in &mut all {
                    warp.run(&launch, memory, &mut shared)?;
                }
                let count =
                    |f: fn(&Warp) -> Mask| -> u32 { all.iter().map(|w| f(w).count_ones()).sum() };
                let (waiting, exited) = (count(|w| w.waiting), count(|w| w.exited));
                if waiting == 0 {
                    break;
                }
                if exited > 0 {
                    return Err(format!(
                        "block {b}: {waiting} threads wait at a barrier that {exited} exited without reaching"
                    ));
                }
                shared.next_phase();
                for warp in &mut all {
                    warp.running = std::mem::take(&mut warp.waiting);
                    warp.converged = None;
                    warp.settle();
                }
            }
        }
        Ok(())
    }
}

/// The address of an `n`-element vector access of `size`-byte elements,
/// checked to be aligned to the whole vector (as the hardware requires).
fn vector_base(addr: u64, n: u8, size: u8) -> Result<u64, String> {
    let bytes = n as u64 * size as u64;
    if addr.is_multiple_of(bytes) {
        Ok(addr)
    } else {
        Err(format!(
            "misaligned {bytes}-byte vector access at {addr:#x}"
        ))
    }
}
