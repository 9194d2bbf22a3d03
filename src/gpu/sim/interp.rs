//! The simulated device's PTX decoder: the subset tenjin emits, decoded
//! once per module into a flat instruction list.
//!
//! Owns [`Program`] (a decoded `.entry` function: parameters, registers,
//! instructions whose operands, immediates, types and branch targets are
//! resolved at decode time into `super::isa`'s instruction set) and the
//! [`Memory`] interface every access goes through. Registers hold raw
//! bits, as on the hardware (an untyped `mov.b64` may carry a float). An
//! instruction the decoder does not know is an error when the module
//! loads, never a silent skip. What an instruction computes is
//! `super::semantics`; running a grid of warps is `super::warp`
//! (`shfl.sync` exchanges registers within a whole, converged warp; it
//! refuses one with lanes elsewhere). Must not know about buffers beyond
//! the [`Memory`] interface.

use super::isa::{Bin, Cmp, Conv, FCmp, ICmp, IntTy, Op, Round, Src, Un};
use super::shared::SharedLayout;
use std::collections::HashMap;

/// Global memory as a kernel sees it: loads and stores of 2, 4 or 8 bytes,
/// each checked by the implementation (bounds, alignment, writability,
/// one writer per element).
pub(crate) trait Memory {
    fn load(&mut self, addr: u64, size: usize) -> Result<u64, String>;
    fn store(&mut self, addr: u64, size: usize, bits: u64, thread: u64) -> Result<(), String>;
}

/// The launch geometry's special registers, in the first register slots
/// (`%tid.x`, `%ntid.x`, `%ctaid.x`, `%nctaid.x`), set per thread.
const SPECIALS: [&str; 4] = ["%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x"];

#[derive(Clone, Copy, Debug)]
pub(super) struct Inst {
    pub(super) op: Op,
    /// The source line (errors).
    pub(super) line: u32,
}

/// A decoded `.entry` function.
pub(crate) struct Program {
    pub(super) params: Vec<String>,
    pub(super) code: Vec<Inst>,
    /// The register file every thread starts with: zeros, and the
    /// immediates in their slots.
    pub(super) template: Vec<u64>,
    /// The instruction texts (errors name the failing one).
    pub(super) lines: Vec<String>,
    /// The `.shared` variables (empty for most kernels).
    pub(super) shared: SharedLayout,
    /// Whether it has a barrier: then its blocks run in phases.
    pub(super) cooperative: bool,
}

/// Branches one thread may take (a kernel that loops forever is an
/// error, not a hang).
pub(super) const MAX_BRANCHES_PER_THREAD: u64 = 50_000_000;

/// Decoding state: register, immediate and label names.
struct Decoder<'a> {
    params: &'a [String],
    /// Register names (the specials first) and immediates (by value) to
    /// slots.
    regs: HashMap<String, u32>,
    consts: HashMap<u64, u32>,
    labels: HashMap<String, u32>,
    /// `.shared` variables by name: their addresses in the shared window.
    symbols: &'a HashMap<String, u64>,
}

impl Decoder<'_> {
    fn slots(&self) -> u32 {
        (self.regs.len() + self.consts.len()) as u32
    }

    fn reg(&mut self, name: &str) -> u32 {
        let n = self.slots();
        *self.regs.entry(name.to_string()).or_insert(n)
    }

    fn src(&mut self, a: &str, ty: &str) -> Result<Src, String> {
        if a.starts_with('%') {
            return Ok(Src(self.reg(a)));
        }
        let v = match self.symbols.get(a) {
            Some(&addr) => addr,
            None => imm(a, ty).ok_or_else(|| format!("bad immediate `{a}`"))?,
        };
        let n = self.slots();
        Ok(Src(*self.consts.entry(v).or_insert(n)))
    }

    fn dst(&mut self, a: Option<&&str>) -> Result<u32, String> {
        match a {
            Some(r) if r.starts_with('%') => Ok(self.reg(r)),
            _ => Err("the destination is not a register".into()),
        }
    }

    fn addr(&mut self, a: Option<&&str>) -> Result<u32, String> {
        match a
            .and_then(|a| a.strip_prefix("[%"))
            .and_then(|a| a.strip_suffix(']'))
        {
            Some(r) => Ok(self.reg(&format!("%{r}"))),
            None => Err("the address is not `[%register]`".into()),
        }
    }

    /// `ld.global.vN.ty {d0, …}, [a]` or `st.global.vN.ty [a], {s0, …}`
    /// (`operands` split at the commas, braces still on).
    fn vector(&mut self, store: bool, v: &str, operands: &[&str], ty: &str) -> Result<Op, String> {
        let n: usize = match v {
            "v2" => 2,
            "v4" => 4,
            _ => return Err(format!("no `{v}` access")),
        };
        if operands.len() != n + 1 {
            return Err(format!("a {v} access takes {} operands", n + 1));
        }
        let (addr, list) = if store {
            (&operands[0], &operands[1..])
        } else {
            (&operands[n], &operands[..n])
        };
        let addr = self.addr(Some(addr))?;
        let size = width(ty)?;
        let name = |x: &&str| x.trim_matches(|c| c == '{' || c == '}').trim().to_string();
        if store {
            let mut src = [Src(0); 4];
            for (slot, x) in src.iter_mut().zip(list) {
                *slot = self.src(&name(x), ty)?;
            }
            Ok(Op::StV {
                addr,
                src,
                n: n as u8,
                size,
            })
        } else {
            let mut dst = [0; 4];
            for (slot, x) in dst.iter_mut().zip(list) {
                *slot = self.dst(Some(&name(x).as_str()))?;
            }
            Ok(Op::LdV {
                dst,
                n: n as u8,
                addr,
                size,
            })
        }
    }

    /// One instruction without its guard: `op.mods a, b, c`.
    fn op(&mut self, text: &str) -> Result<Op, String> {
        let (opcode, operands) = match text.split_once(char::is_whitespace) {
            Some((o, a)) => (o, a.trim()),
            None => (text, ""),
        };
        let m: Vec<&str> = opcode.split('.').collect();
        let a: Vec<&str> = operands
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect();
        let ty = *m.last().unwrap_or(&"");
        let arg = |i: usize| {
            a.get(i)
                .copied()
                .ok_or_else(|| format!("operand {i} missing"))
        };
        Ok(match m[0] {
            "ret" => Op::Ret,
            "bra" => Op::Bra(
                *self
                    .labels
                    .get(arg(0)?)
                    .ok_or_else(|| format!("unknown label `{}`", arg(0).unwrap_or("")))?,
            ),
            "ld" if m.get(1) == Some(&"param") => {
                let name = arg(1)?.trim_start_matches('[').trim_end_matches(']');
                let param = self
                    .params
                    .iter()
                    .position(|p| p == name)
                    .ok_or_else(|| format!("unknown parameter `{name}`"))?;
                Op::LdParam {
                    dst: self.dst(a.first())?,
                    param: param as u32,
                }
            }
            "ld" if m.get(1) == Some(&"shared") => Op::LdShared {
                dst: self.dst(a.first())?,
                addr: self.addr(a.get(1))?,
                size: width(ty)?,
            },
            "st" if m.get(1) == Some(&"shared") => Op::StShared {
                addr: self.addr(a.first())?,
                src: self.src(arg(1)?, ty)?,
                size: width(ty)?,
            },
            "ld" | "st" if m.get(2).is_some_and(|v| v.starts_with('v')) => {
                self.vector(m[0] == "st", m[2], &a, ty)?
            }
            "ld" => Op::Ld {
                dst: self.dst(a.first())?,
                addr: self.addr(a.get(1))?,
                size: width(ty)?,
            },
            "st" => Op::St {
                addr: self.addr(a.first())?,
                src: self.src(arg(1)?, ty)?,
                size: width(ty)?,
            },
            "cvta" | "mov" => Op::Mov {
                dst: self.dst(a.first())?,
                src: self.src(arg(1)?, ty)?,
            },
            "setp" => Op::Setp {
                dst: self.dst(a.first())?,
                cmp: comparison(m.get(1).copied().unwrap_or(""), ty)?,
                a: self.src(arg(1)?, ty)?,
                b: self.src(arg(2)?, ty)?,
            },
            "selp" => Op::Selp {
                dst: self.dst(a.first())?,
                a: self.src(arg(1)?, ty)?,
                b: self.src(arg(2)?, ty)?,
                p: self.src(arg(3)?, "pred")?,
            },
            "cvt" => {
                let conv = conversion(&m[1..])?;
                // The source is read with the source type.
                let src_ty = m.last().copied().unwrap_or("");
                Op::Cvt {
                    dst: self.dst(a.first())?,
                    conv,
                    src: self.src(arg(1)?, src_ty)?,
                }
            }
            "fma" if ty == "f64" && m.get(1) == Some(&"rn") => Op::Fma64 {
                dst: self.dst(a.first())?,
                a: self.src(arg(1)?, ty)?,
                b: self.src(arg(2)?, ty)?,
                c: self.src(arg(3)?, ty)?,
            },
            "fma" if ty == "f32" && m.get(1) == Some(&"rn") => Op::Fma32 {
                dst: self.dst(a.first())?,
                a: self.src(arg(1)?, ty)?,
                b: self.src(arg(2)?, ty)?,
                c: self.src(arg(3)?, ty)?,
            },
            "mad" if m.get(1) == Some(&"lo") && matches!(ty, "s64" | "u64") => Op::Mad {
                dst: self.dst(a.first())?,
                a: self.src(arg(1)?, ty)?,
                b: self.src(arg(2)?, ty)?,
                c: self.src(arg(3)?, ty)?,
            },
            "mad" if m.get(1) == Some(&"lo") && matches!(ty, "s32" | "u32") => Op::Mad32 {
                dst: self.dst(a.first())?,
                a: self.src(arg(1)?, ty)?,
                b: self.src(arg(2)?, ty)?,
                c: self.src(arg(3)?, ty)?,
            },
            "mad" if m.get(1) == Some(&"wide") && ty == "s32" => Op::MadWideS32 {
                dst: self.dst(a.first())?,
                a: self.src(arg(1)?, ty)?,
                b: self.src(arg(2)?, ty)?,
                c: self.src(arg(3)?, "s64")?,
            },
            "not" if ty == "pred" => Op::Not {
                dst: self.dst(a.first())?,
                src: self.src(arg(1)?, ty)?,
            },
            "neg" | "abs" | "sqrt" => Op::Un {
                dst: self.dst(a.first())?,
                op: unary(m[0], ty)?,
                src: self.src(arg(1)?, ty)?,
            },
            "shfl"
                if m.get(1) == Some(&"sync")
                    && matches!(m.get(2), Some(&"bfly") | Some(&"idx"))
                    && ty == "b32"
                    && a.len() == 5 =>
            {
                let whole = imm(a[3], "b32") == Some(31) && imm(a[4], "b32") == Some(0xffff_ffff);
                if !whole || a[0].contains('|') {
                    return Err("only whole-warp `shfl.sync` (clamp 31, membermask 0xffffffff, no predicate) is simulated".into());
                }
                Op::Shfl {
                    dst: self.dst(a.first())?,
                    src: self.src(arg(1)?, ty)?,
                    b: self.src(arg(2)?, ty)?,
                    butterfly: m[2] == "bfly",
                }
            }
            "bar" | "barrier" if m.get(1) == Some(&"sync") && a.len() == 1 => Op::Barrier,
            "bar" | "barrier" => {
                return Err("only `bar.sync N` (every thread of the block) is simulated".into())
            }
            _ => Op::Bin {
                dst: self.dst(a.first())?,
                op: binary(&m)?,
                a: self.src(arg(1)?, ty)?,
                b: self.src(arg(2)?, ty)?,
            },
        })
    }
}

fn width(ty: &str) -> Result<u8, String> {
    match ty {
        // Zero-extended into the register (no `s16`: that sign-extends).
        "b16" | "u16" => Ok(2),
        "f32" | "u32" | "s32" | "b32" => Ok(4),
        "f64" | "u64" | "s64" | "b64" => Ok(8),
        t => Err(format!("no memory access of type `{t}`")),
    }
}

fn comparison(cmp: &str, ty: &str) -> Result<Cmp, String> {
    let f = |c: &str| {
        Some(match c {
            "eq" => FCmp::Eq,
            "neu" => FCmp::Neu,
            "ge" => FCmp::Ge,
            "gt" => FCmp::Gt,
            "le" => FCmp::Le,
            "lt" => FCmp::Lt,
            "nan" => FCmp::Nan,
            "num" => FCmp::Num,
            _ => return None,
        })
    };
    let i = |c: &str| {
        Some(match c {
            "eq" => ICmp::Eq,
            "ne" => ICmp::Ne,
            "ge" => ICmp::Ge,
            "gt" => ICmp::Gt,
            "le" => ICmp::Le,
            "lt" => ICmp::Lt,
            _ => return None,
        })
    };
    let bad = || format!("no comparison `{cmp}` of `{ty}`");
    Ok(match ty {
        "f32" => Cmp::F32(f(cmp).ok_or_else(bad)?),
        "f64" => Cmp::F64(f(cmp).ok_or_else(bad)?),
        "s64" => Cmp::Int(i(cmp).ok_or_else(bad)?, IntTy::S64),
        "u64" => Cmp::Int(i(cmp).ok_or_else(bad)?, IntTy::U64),
        "s32" => Cmp::Int(i(cmp).ok_or_else(bad)?, IntTy::S32),
        "u32" => Cmp::Int(i(cmp).ok_or_else(bad)?, IntTy::U32),
        _ => return Err(bad()),
    })
}

/// `cvt` modifiers: `[rounding.]dst.src`.
fn conversion(m: &[&str]) -> Result<Conv, String> {
    let (round, dst, src) = match m {
        [d, s] => ("", *d, *s),
        [r, d, s] => (*r, *d, *s),
        _ => return Err(format!("bad conversion `cvt.{}`", m.join("."))),
    };
    let int_round = || match round {
        "rzi" => Some(Round::Zero),
        "rni" => Some(Round::Nearest),
        "rmi" => Some(Round::Down),
        _ => None,
    };
    let conv = match (dst, src) {
        ("u64", "u32") => Some(Conv::U32ToU64),
        ("u32", "u64") => Some(Conv::U64ToU32),
        ("f64", "f32") => Some(Conv::F32ToF64),
        ("f32", "f64") if round == "rn" => Some(Conv::F64ToF32Rn),
        ("f32", "s64") if round == "rn" => Some(Conv::S64ToF32Rn),
        ("f64", "s64") if round == "rn" => Some(Conv::S64ToF64Rn),
        ("f32", "s32") if round == "rn" => Some(Conv::S32ToF32Rn),
        ("f64", "s32") if round == "rn" => Some(Conv::S32ToF64Rn),
        ("s64", "s32") => Some(Conv::S32ToS64),
        ("u16", "u32" | "u64") | ("u32" | "u64", "u16") => Some(Conv::Low16),
        ("f32", "f16") if round.is_empty() => Some(Conv::F16ToF32),
        ("f16", "f32") if round == "rn" => Some(Conv::F32ToF16Rn),
        ("f64", "f64") => int_round().map(Conv::RoundF64),
        ("f32", "f32") => int_round().map(Conv::RoundF32),
        ("s64", "f32" | "f64") => int_round().map(|r| Conv::ToS64(r, src == "f32")),
        ("s32", "f32" | "f64") => int_round().map(|r| Conv::ToS32(r, src == "f32")),
        _ => None,
    };
    conv.ok_or_else(|| format!("bad conversion `cvt.{}`", m.join(".")))
}

fn unary(op: &str, ty: &str) -> Result<Un, String> {
    Ok(match (op, ty) {
        ("neg", "f32") => Un::NegF32,
        ("neg", "f64") => Un::NegF64,
        ("abs", "f32") => Un::AbsF32,
        ("abs", "f64") => Un::AbsF64,
        ("abs", "s32") => Un::AbsS32,
        ("sqrt", "f32") => Un::SqrtF32,
        ("sqrt", "f64") => Un::SqrtF64,
        _ => return Err(format!("unknown instruction `{op}.{ty}`")),
    })
}

fn binary(m: &[&str]) -> Result<Bin, String> {
    let ty = *m.last().unwrap_or(&"");
    let rn = m.get(1) == Some(&"rn");
    let unknown = || format!("unknown instruction `{}`", m.join("."));
    // Every float add/mul/div is `.rn` (no contraction into FMA).
    Ok(match (m[0], ty) {
        ("add", "f32") if rn => Bin::AddF32,
        ("sub", "f32") if rn => Bin::SubF32,
        ("mul", "f32") if rn => Bin::MulF32,
        ("div", "f32") if rn => Bin::DivF32,
        ("add", "f64") if rn => Bin::AddF64,
        ("sub", "f64") if rn => Bin::SubF64,
        ("mul", "f64") if rn => Bin::MulF64,
        ("div", "f64") if rn => Bin::DivF64,
        ("min", "f64") => Bin::MinF64,
        ("max", "f64") => Bin::MaxF64,
        ("copysign", "f64") => Bin::CopysignF64,
        ("copysign", "f32") => Bin::CopysignF32,
        ("add", "s64" | "u64") => Bin::Add,
        ("sub", "s64" | "u64") => Bin::Sub,
        ("add", "s32" | "u32") => Bin::Add32,
        ("sub", "s32" | "u32") => Bin::Sub32,
        ("mul", "s64" | "u64") if m.get(1) == Some(&"lo") => Bin::MulLo,
        ("mul", "u32") if m.get(1) == Some(&"wide") => Bin::MulWideU32,
        ("div", "s64") => Bin::DivS64,
        ("rem", "s64") => Bin::RemS64,
        ("div", "u64") => Bin::DivU64,
        ("rem", "u64") => Bin::RemU64,
        ("div", "u32") => Bin::DivU32,
        ("rem", "u32") => Bin::RemU32,
        ("max", "s64") => Bin::MaxS64,
        ("min", "s64") => Bin::MinS64,
        ("mul", "s32" | "u32") if m.get(1) == Some(&"lo") => Bin::MulLo32,
        ("div", "s32") => Bin::DivS32,
        ("rem", "s32") => Bin::RemS32,
        ("max", "s32") => Bin::MaxS32,
        ("min", "s32") => Bin::MinS32,
        ("shl", "b64") => Bin::Shl64,
        ("shr", "u64") => Bin::ShrU64,
        ("shr", "u32") => Bin::ShrU32,
        ("and", "b64") => Bin::And64,
        ("or", "b64") => Bin::Or64,
        ("xor", "b64") => Bin::Xor64,
        ("and", "b32") => Bin::And32,
        ("or", "b32") => Bin::Or32,
        ("shl", "b32") => Bin::Shl32,
        ("shr", "s32") => Bin::ShrS32,
        ("and", "pred") => Bin::AndPred,
        ("or", "pred") => Bin::OrPred,
        _ => return Err(unknown()),
    })
}

/// An immediate of type `ty`: `0fXXXXXXXX` (f32 bits), `0dX…` (f64
/// bits), `0x…`, or a decimal integer.
fn imm(s: &str, ty: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0f") {
        return u32::from_str_radix(h, 16).ok().map(|x| x as u64);
    }
    if let Some(h) = s.strip_prefix("0d") {
        return u64::from_str_radix(h, 16).ok();
    }
    if let Some(h) = s.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok();
    }
    let v: i64 = s.parse().ok()?;
    Some(match ty {
        "u32" | "s32" | "b32" => v as u32 as u64,
        _ => v as u64,
    })
}

impl Program {
    /// Decodes the first `.entry` function of a module.
    pub(crate) fn decode(text: &str) -> Result<Program, String> {
        let start = text.find(".entry").ok_or("no .entry")?;
        let open = text[start..].find('(').ok_or("no (")? + start;
        let close = text[open..].find(')').ok_or("no )")? + open;
        let params: Vec<String> = text[open + 1..close]
            .split(',')
            .map(|p| p.split_whitespace().last().unwrap_or("").to_string())
            .collect();
        let body_start = text[close..].find('{').ok_or("no body")? + close + 1;
        let body_end = text.rfind('}').ok_or("no end")?;
        let mut labels: HashMap<String, u32> = HashMap::new();
        let mut lines: Vec<String> = Vec::new();
        let mut shared = SharedLayout::default();
        for line in text[body_start..body_end].lines() {
            let line = line.split("//").next().unwrap_or("").trim();
            if line.is_empty() || line.starts_with(".reg") {
                continue;
            }
            if line.starts_with(".shared") {
                shared.declare(line)?;
                continue;
            }
            if let Some(l) = line.strip_suffix(':') {
                labels.insert(l.to_string(), lines.len() as u32);
                continue;
            }
            let line = line
                .strip_suffix(';')
                .ok_or_else(|| format!("no `;`: {line}"))?;
            lines.push(line.to_string());
        }
        let mut d = Decoder {
            params: &params,
            regs: SPECIALS
                .iter()
                .enumerate()
                .map(|(k, s)| (s.to_string(), k as u32))
                .collect(),
            consts: HashMap::new(),
            labels,
            symbols: shared.symbols(),
        };
        let mut code = Vec::with_capacity(lines.len());
        for (n, line) in lines.iter().enumerate() {
            let (guard, rest) = match line.strip_prefix('@') {
                Some(g) => {
                    let (p, rest) = g
                        .split_once(char::is_whitespace)
                        .ok_or_else(|| format!("bad guard: {line}"))?;
                    let (neg, p) = match p.strip_prefix('!') {
                        Some(p) => (true, p),
                        None => (false, p),
                    };
                    (Some((d.reg(p), neg)), rest.trim())
                }
                None => (None, line.as_str()),
            };
            let mut op = d.op(rest).map_err(|e| format!("{e} in `{line}`"))?;
            if let Some((p, negated)) = guard {
                let Op::Bra(target) = op else {
                    return Err(format!("a guarded instruction other than `bra`: `{line}`"));
                };
                op = Op::BraIf { p, negated, target };
            }
            code.push(Inst { op, line: n as u32 });
        }
        let mut template = vec![0u64; d.slots() as usize];
        for (&v, &slot) in &d.consts {
            template[slot as usize] = v;
        }
        let cooperative = code.iter().any(|i| matches!(i.op, Op::Barrier));
        Ok(Program {
            template,
            params,
            code,
            lines,
            shared,
            cooperative,
        })
    }
}
