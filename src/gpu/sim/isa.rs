//! The simulated device's instruction set: what the decoder (`interp`)
//! turns each PTX instruction into and the warp runner (`warp`) executes.
//!
//! Owns [`Op`] and its operand kinds: register slots ([`Src`]),
//! comparisons, conversions, rounding, unary and binary operations, each
//! resolved at decode time. Must not decode text or run anything; what an
//! operation computes is `super::semantics`.

/// A source operand: a register slot. Immediates are decoded into slots
/// of their own, filled once per thread from the program's template, so
/// reading an operand is one indexed load.
#[derive(Clone, Copy, Debug)]
pub(super) struct Src(pub(super) u32);

/// Float comparisons (`neu`, `nan` and `num` are the unordered ones).
#[derive(Clone, Copy, Debug)]
pub(super) enum FCmp {
    Eq,
    Neu,
    Ge,
    Gt,
    Le,
    Lt,
    Nan,
    Num,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum ICmp {
    Eq,
    Ne,
    Ge,
    Gt,
    Le,
    Lt,
}

/// How an integer comparison reads its operands.
#[derive(Clone, Copy, Debug)]
pub(super) enum IntTy {
    S64,
    U64,
    S32,
    U32,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Cmp {
    F32(FCmp),
    F64(FCmp),
    Int(ICmp, IntTy),
}

/// `cvt` conversions (rounding modes resolved).
#[derive(Clone, Copy, Debug)]
pub(super) enum Conv {
    U32ToU64,
    U64ToU32,
    F32ToF64,
    F64ToF32Rn,
    S64ToF32Rn,
    S64ToF64Rn,
    S32ToF32Rn,
    S32ToF64Rn,
    /// `cvt.s64.s32`: sign extension.
    S32ToS64,
    /// `cvt.u16.u32` / `.u16.u64` (truncation) and `cvt.u32.u16` /
    /// `.u64.u16` (zero extension): the low 16 bits.
    Low16,
    /// `cvt.f32.f16`: exact.
    F16ToF32,
    /// `cvt.rn.f16.f32`: to nearest even, subnormals kept, beyond the
    /// largest finite to ±inf.
    F32ToF16Rn,
    /// `cvt.rXi.f64.f64` / `.f32.f32`: rounding to an integral value.
    RoundF64(Round),
    RoundF32(Round),
    /// `cvt.rXi.s64.fXX` / `.s32.fXX`.
    ToS64(Round, bool),
    ToS32(Round, bool),
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Round {
    Zero,
    Nearest,
    Down,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Un {
    NegF32,
    NegF64,
    AbsF32,
    AbsF64,
    AbsS32,
    SqrtF32,
    SqrtF64,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Bin {
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
    /// 32-bit integer add and subtract (the result wraps at 32 bits).
    Add32,
    Sub32,
    MulLo,
    MulWideU32,
    DivS64,
    RemS64,
    DivU64,
    RemU64,
    DivU32,
    RemU32,
    MaxS64,
    MinS64,
    MulLo32,
    DivS32,
    RemS32,
    MaxS32,
    MinS32,
    Shl64,
    ShrU64,
    ShrU32,
    And64,
    Or64,
    Xor64,
    And32,
    Or32,
    Shl32,
    ShrS32,
    AndPred,
    OrPred,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    Ret,
    Bra(u32),
    /// `@%p bra` (`@!%p` when `negated`): the only guarded instruction
    /// tenjin emits.
    BraIf {
        p: u32,
        negated: bool,
        target: u32,
    },
    LdParam {
        dst: u32,
        param: u32,
    },
    Mov {
        dst: u32,
        src: Src,
    },
    Ld {
        dst: u32,
        addr: u32,
        size: u8,
    },
    St {
        addr: u32,
        src: Src,
        size: u8,
    },
    /// `ld.global.v2`/`.v4`: `n` consecutive elements of `size` bytes into
    /// `dst[..n]`; the address must be aligned to the whole vector.
    LdV {
        dst: [u32; 4],
        n: u8,
        addr: u32,
        size: u8,
    },
    /// `st.global.v2`/`.v4`: `src[..n]` to consecutive elements.
    StV {
        addr: u32,
        src: [Src; 4],
        n: u8,
        size: u8,
    },
    /// `ld.shared` / `st.shared`: the block's shared memory.
    LdShared {
        dst: u32,
        addr: u32,
        size: u8,
    },
    StShared {
        addr: u32,
        src: Src,
        size: u8,
    },
    /// `bar.sync` / `barrier.sync`: waits for every thread of the block.
    Barrier,
    /// `shfl.sync.bfly.b32` / `shfl.sync.idx.b32` over a whole warp
    /// (membermask all ones, clamp 31): `dst` gets `src` of lane
    /// `lane ^ b` (butterfly) or of lane `b` (index).
    Shfl {
        dst: u32,
        src: Src,
        b: Src,
        butterfly: bool,
    },
    Setp {
        dst: u32,
        cmp: Cmp,
        a: Src,
        b: Src,
    },
    Selp {
        dst: u32,
        a: Src,
        b: Src,
        p: Src,
    },
    Cvt {
        dst: u32,
        conv: Conv,
        src: Src,
    },
    Fma64 {
        dst: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Fma32 {
        dst: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Mad {
        dst: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    /// `mad.lo.s32`: the low 32 bits.
    Mad32 {
        dst: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    /// `mad.wide.s32`: a 64-bit `c` plus the full product of two s32.
    MadWideS32 {
        dst: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Not {
        dst: u32,
        src: Src,
    },
    Un {
        dst: u32,
        op: Un,
        src: Src,
    },
    Bin {
        dst: u32,
        op: Bin,
        a: Src,
        b: Src,
    },
}
