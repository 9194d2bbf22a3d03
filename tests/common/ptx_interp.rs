//! A PTX interpreter for the subset tenjin emits — test code only, never
//! shipped.
//!
//! It runs one `.entry` function over a grid, thread after thread (our
//! kernels share no memory and never synchronise, so any order is a valid
//! schedule). Registers hold raw bits. Every global load and store is
//! checked against the buffers handed in: an access outside every buffer,
//! a misaligned one, a store into an input, or two different threads
//! storing one element is an error. That is what "one thread per element,
//! no atomics" means, checked.
#![allow(dead_code)]

use std::collections::HashMap;

/// A buffer handed to the kernel: its bytes, and whether the kernel may
/// write it.
pub struct Buf {
    pub bytes: Vec<u8>,
    pub writable: bool,
}

impl Buf {
    pub fn f32(v: &[f32], writable: bool) -> Buf {
        Buf {
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            writable,
        }
    }
    pub fn f64(v: &[f64], writable: bool) -> Buf {
        Buf {
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            writable,
        }
    }
    pub fn to_f32(&self) -> Vec<f32> {
        self.bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
    pub fn to_f64(&self) -> Vec<f64> {
        self.bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

#[derive(Clone, Debug)]
enum Operand {
    Reg(usize),
    Imm(String),
    Special(&'static str),
    /// `[name]` of a parameter.
    Param(usize),
    /// `[%rdN]`.
    Addr(usize),
    Label(usize),
}

#[derive(Clone, Debug)]
struct Inst {
    guard: Option<(usize, bool)>,
    /// The opcode split at dots: `["add", "rn", "f32"]`.
    op: Vec<String>,
    args: Vec<Operand>,
    line: String,
}

/// A parsed kernel.
pub struct Program {
    params: Vec<String>,
    insts: Vec<Inst>,
    nregs: usize,
}

const BASE: u64 = 0x1000_0000;
const SPACING: u64 = 0x1_0000_0000;

impl Program {
    pub fn parse(text: &str) -> Result<Program, String> {
        let start = text.find(".entry").ok_or("no .entry")?;
        let open = text[start..].find('(').ok_or("no (")? + start;
        let close = text[open..].find(')').ok_or("no )")? + open;
        let params: Vec<String> = text[open + 1..close]
            .split(',')
            .map(|p| p.split_whitespace().last().unwrap_or("").to_string())
            .collect();
        let body_start = text[close..].find('{').ok_or("no body")? + close + 1;
        let body_end = text.rfind('}').ok_or("no end")?;
        let mut regs: HashMap<String, usize> = HashMap::new();
        let mut labels: HashMap<String, usize> = HashMap::new();
        let mut raw: Vec<String> = Vec::new();
        for line in text[body_start..body_end].lines() {
            let line = line.split("//").next().unwrap().trim();
            if line.is_empty() || line.starts_with(".reg") {
                continue;
            }
            if let Some(l) = line.strip_suffix(':') {
                labels.insert(l.to_string(), raw.len());
                continue;
            }
            let line = line
                .strip_suffix(';')
                .ok_or_else(|| format!("no `;`: {line}"))?;
            raw.push(line.to_string());
        }
        let mut insts = Vec::new();
        for line in raw {
            let (guard, rest) = if let Some(g) = line.strip_prefix('@') {
                let (p, rest) = g.split_once(char::is_whitespace).ok_or("bad guard")?;
                let (neg, p) = match p.strip_prefix('!') {
                    Some(p) => (true, p),
                    None => (false, p),
                };
                let n = regs.len();
                let slot = *regs.entry(p.to_string()).or_insert(n);
                (Some((slot, neg)), rest.trim())
            } else {
                (None, line.as_str())
            };
            let (op, operands) = match rest.split_once(char::is_whitespace) {
                Some((o, a)) => (o, a.trim()),
                None => (rest, ""),
            };
            let mut args = Vec::new();
            for a in operands.split(',').map(str::trim).filter(|a| !a.is_empty()) {
                let operand =
                    if let Some(inner) = a.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
                        if inner.starts_with('%') {
                            let n = regs.len();
                            Operand::Addr(*regs.entry(inner.to_string()).or_insert(n))
                        } else {
                            let i = params
                                .iter()
                                .position(|p| p == inner)
                                .ok_or_else(|| format!("unknown param {inner}"))?;
                            Operand::Param(i)
                        }
                    } else if let Some(s) = ["%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x"]
                        .iter()
                        .find(|s| **s == a)
                    {
                        Operand::Special(s)
                    } else if a.starts_with('%') {
                        let n = regs.len();
                        Operand::Reg(*regs.entry(a.to_string()).or_insert(n))
                    } else if let Some(&l) = labels.get(a) {
                        Operand::Label(l)
                    } else {
                        Operand::Imm(a.to_string())
                    };
                args.push(operand);
            }
            insts.push(Inst {
                guard,
                op: op.split('.').map(String::from).collect(),
                args,
                line: rest.to_string(),
            });
        }
        Ok(Program {
            params,
            insts,
            nregs: regs.len(),
        })
    }

    /// Runs the kernel on `grid × block` threads with `bufs` as its
    /// parameters (in order). Errors name the thread and instruction.
    pub fn run(&self, bufs: &mut [Buf], grid: u32, block: u32) -> Result<(), String> {
        if bufs.len() != self.params.len() {
            return Err(format!(
                "{} buffers for {} params",
                bufs.len(),
                self.params.len()
            ));
        }
        let mut writer: HashMap<u64, u64> = HashMap::new();
        for b in 0..grid {
            for t in 0..block {
                let thread = (b as u64) * block as u64 + t as u64;
                self.thread(bufs, [t, block, b, grid], thread, &mut writer)
                    .map_err(|e| format!("thread {thread}: {e}"))?;
            }
        }
        Ok(())
    }

    fn thread(
        &self,
        bufs: &mut [Buf],
        special: [u32; 4],
        thread: u64,
        writer: &mut HashMap<u64, u64>,
    ) -> Result<(), String> {
        let mut r = vec![0u64; self.nregs];
        let mut pc = 0usize;
        let mut steps = 0u64;
        while pc < self.insts.len() {
            steps += 1;
            if steps > 50_000_000 {
                return Err("runs too long".into());
            }
            let inst = &self.insts[pc];
            pc += 1;
            if let Some((p, neg)) = inst.guard {
                if (r[p] != 0) == neg {
                    continue;
                }
            }
            let e = |m: &str| format!("{m} in `{}`", inst.line);
            let op: Vec<&str> = inst.op.iter().map(String::as_str).collect();
            let ty = *op.last().unwrap();
            let val = |o: &Operand, r: &[u64]| -> Result<u64, String> {
                match o {
                    Operand::Reg(i) => Ok(r[*i]),
                    Operand::Imm(s) => imm(s, ty).ok_or_else(|| e(&format!("bad immediate {s}"))),
                    Operand::Special(s) => Ok(match *s {
                        "%tid.x" => special[0],
                        "%ntid.x" => special[1],
                        "%ctaid.x" => special[2],
                        _ => special[3],
                    } as u64),
                    _ => Err(e("operand is not a value")),
                }
            };
            let dst = |i: usize| match inst.args.get(i) {
                Some(Operand::Reg(d)) => Ok(*d),
                _ => Err(e("destination is not a register")),
            };
            match op[0] {
                "ret" => return Ok(()),
                "bra" => match inst.args[0] {
                    Operand::Label(l) => pc = l,
                    _ => return Err(e("branch target")),
                },
                "ld" if op[1] == "param" => match inst.args[1] {
                    Operand::Param(i) => r[dst(0)?] = BASE + SPACING * i as u64,
                    _ => return Err(e("param load")),
                },
                "cvta" => r[dst(0)?] = val(&inst.args[1], &r)?,
                "ld" | "st" => {
                    let (addr_op, reg_idx) = if op[0] == "ld" { (1, 0) } else { (0, 1) };
                    let addr = match inst.args[addr_op] {
                        Operand::Addr(a) => r[a],
                        _ => return Err(e("address")),
                    };
                    let size = if ty == "f64" { 8 } else { 4 };
                    let (b, off) = locate(bufs, addr, size).map_err(|m| e(&m))?;
                    if op[0] == "ld" {
                        let bytes = &bufs[b].bytes[off..off + size];
                        r[dst(reg_idx)?] = if size == 8 {
                            u64::from_le_bytes(bytes.try_into().unwrap())
                        } else {
                            u32::from_le_bytes(bytes.try_into().unwrap()) as u64
                        };
                    } else {
                        if !bufs[b].writable {
                            return Err(e(&format!("store into read-only parameter {b}")));
                        }
                        if let Some(&w) = writer.get(&addr) {
                            if w != thread {
                                return Err(e(&format!(
                                    "threads {w} and {thread} both store to {addr:#x}"
                                )));
                            }
                        }
                        writer.insert(addr, thread);
                        let v = val(&inst.args[reg_idx], &r)?;
                        let bytes = &mut bufs[b].bytes[off..off + size];
                        if size == 8 {
                            bytes.copy_from_slice(&v.to_le_bytes());
                        } else {
                            bytes.copy_from_slice(&(v as u32).to_le_bytes());
                        }
                    }
                }
                "setp" => {
                    let (a, b) = (val(&inst.args[1], &r)?, val(&inst.args[2], &r)?);
                    r[dst(0)?] = compare(op[1], ty, a, b).ok_or_else(|| e("comparison"))? as u64;
                }
                "selp" => {
                    let p = val(&inst.args[3], &r)?;
                    let v = if p != 0 {
                        val(&inst.args[1], &r)?
                    } else {
                        val(&inst.args[2], &r)?
                    };
                    r[dst(0)?] = v;
                }
                "mov" => r[dst(0)?] = val(&inst.args[1], &r)?,
                "cvt" => {
                    let a = val(&inst.args[1], &r)?;
                    r[dst(0)?] = convert(&op[1..], a).ok_or_else(|| e("conversion"))?;
                }
                "fma" if op.last() == Some(&"f32") => {
                    let (a, b, c) = (
                        f32b(val(&inst.args[1], &r)?),
                        f32b(val(&inst.args[2], &r)?),
                        f32b(val(&inst.args[3], &r)?),
                    );
                    r[dst(0)?] = f32u(a.mul_add(b, c));
                }
                "fma" => {
                    let (a, b, c) = (
                        f64::from_bits(val(&inst.args[1], &r)?),
                        f64::from_bits(val(&inst.args[2], &r)?),
                        f64::from_bits(val(&inst.args[3], &r)?),
                    );
                    r[dst(0)?] = a.mul_add(b, c).to_bits();
                }
                "mad" => {
                    let (a, b, c) = (
                        val(&inst.args[1], &r)?,
                        val(&inst.args[2], &r)?,
                        val(&inst.args[3], &r)?,
                    );
                    let s32 = |x: u64| x as u32 as i32 as i64;
                    r[dst(0)?] = match (op.get(1).copied(), op.last().copied()) {
                        (Some("wide"), Some("s32")) => {
                            (s32(a) * s32(b)).wrapping_add(c as i64) as u64
                        }
                        (_, Some("s32" | "u32")) => {
                            (a as u32).wrapping_mul(b as u32).wrapping_add(c as u32) as u64
                        }
                        _ => a.wrapping_mul(b).wrapping_add(c),
                    };
                }
                "not" => {
                    let a = val(&inst.args[1], &r)?;
                    r[dst(0)?] = (a == 0) as u64;
                }
                "neg" | "abs" | "sqrt" => {
                    let a = val(&inst.args[1], &r)?;
                    r[dst(0)?] = unary(op[0], ty, a).ok_or_else(|| e("unary"))?;
                }
                _ => {
                    if inst.args.len() != 3 {
                        return Err(e("unknown instruction"));
                    }
                    let (a, b) = (val(&inst.args[1], &r)?, val(&inst.args[2], &r)?);
                    r[dst(0)?] = binary(&op, a, b).ok_or_else(|| e("unknown instruction"))?;
                }
            }
        }
        Err("fell off the end without `ret`".into())
    }
}

/// The buffer and byte offset of `addr`, checked.
fn locate(bufs: &[Buf], addr: u64, size: usize) -> Result<(usize, usize), String> {
    if addr < BASE || (addr - BASE) / SPACING >= bufs.len() as u64 {
        return Err(format!("address {addr:#x} is in no buffer"));
    }
    let b = ((addr - BASE) / SPACING) as usize;
    let off = ((addr - BASE) % SPACING) as usize;
    if !off.is_multiple_of(size) {
        return Err(format!("misaligned access at {addr:#x}"));
    }
    if off + size > bufs[b].bytes.len() {
        return Err(format!(
            "out of bounds: element {} of parameter {b} ({} elements)",
            off / size,
            bufs[b].bytes.len() / size
        ));
    }
    Ok((b, off))
}

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

fn f32b(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
fn f32u(x: f32) -> u64 {
    x.to_bits() as u64
}
fn f64b(x: u64) -> f64 {
    f64::from_bits(x)
}

fn compare(cmp: &str, ty: &str, a: u64, b: u64) -> Option<bool> {
    Some(match ty {
        "f32" | "f64" => {
            let (x, y) = if ty == "f32" {
                (f32b(a) as f64, f32b(b) as f64)
            } else {
                (f64b(a), f64b(b))
            };
            match cmp {
                "eq" => x == y,
                "neu" => x != y,
                "ge" => x >= y,
                "gt" => x > y,
                "le" => x <= y,
                "lt" => x < y,
                "nan" => x.is_nan() || y.is_nan(),
                "num" => !x.is_nan() && !y.is_nan(),
                _ => return None,
            }
        }
        "s64" | "u64" | "s32" | "u32" => {
            let (x, y): (i128, i128) = match ty {
                "s64" => (a as i64 as i128, b as i64 as i128),
                "u64" => (a as i128, b as i128),
                "s32" => (a as u32 as i32 as i128, b as u32 as i32 as i128),
                _ => (a as u32 as i128, b as u32 as i128),
            };
            match cmp {
                "eq" => x == y,
                "ne" => x != y,
                "ge" => x >= y,
                "gt" => x > y,
                "le" => x <= y,
                "lt" => x < y,
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// `cvt` with its modifiers: `[rounding,] dst, src`.
fn convert(m: &[&str], a: u64) -> Option<u64> {
    let (round, dst, src) = match m {
        [d, s] => ("", *d, *s),
        [r, d, s] => (*r, *d, *s),
        _ => return None,
    };
    let as_f64 = |a: u64| match src {
        "f32" => Some(f32b(a) as f64),
        "f64" => Some(f64b(a)),
        _ => None,
    };
    let int_round = |x: f64| match round {
        "rzi" => Some(x.trunc()),
        "rni" => Some(x.round_ties_even()),
        "rmi" => Some(x.floor()),
        _ => None,
    };
    Some(match (dst, src) {
        ("u64", "u32") => a as u32 as u64,
        ("u32", "u64") => a as u32 as u64,
        ("f64", "f32") => f64::from(f32b(a)).to_bits(),
        ("f32", "f64") if round == "rn" => f32u(f64b(a) as f32),
        ("f32", "s64") if round == "rn" => f32u(a as i64 as f32),
        ("f32", "s32") if round == "rn" => f32u(a as u32 as i32 as f32),
        ("f64", "s32") if round == "rn" => (a as u32 as i32 as f64).to_bits(),
        ("f64", "s64") if round == "rn" => (a as i64 as f64).to_bits(),
        ("f64", "f64") => int_round(f64b(a))?.to_bits(),
        ("f32", "f32") => f32u(int_round(f32b(a) as f64)? as f32),
        ("s64", _) => int_round(as_f64(a)?)? as i64 as u64,
        ("s32", _) => int_round(as_f64(a)?)? as i32 as u32 as u64,
        _ => return None,
    })
}

fn unary(op: &str, ty: &str, a: u64) -> Option<u64> {
    Some(match (op, ty) {
        ("neg", "f32") => f32u(-f32b(a)),
        ("neg", "f64") => (-f64b(a)).to_bits(),
        ("abs", "f32") => f32u(f32b(a).abs()),
        ("abs", "f64") => f64b(a).abs().to_bits(),
        ("abs", "s32") => (a as u32 as i32).wrapping_abs() as u32 as u64,
        ("sqrt", "f32") => f32u(f32b(a).sqrt()),
        ("sqrt", "f64") => f64b(a).sqrt().to_bits(),
        _ => return None,
    })
}

fn binary(op: &[&str], a: u64, b: u64) -> Option<u64> {
    let ty = *op.last()?;
    let name = op[0];
    if ty == "f32" || ty == "f64" {
        if name != "copysign" && name != "min" && name != "max" && op.get(1) != Some(&"rn") {
            return None; // every float add/mul/div is `.rn`
        }
        if ty == "f32" {
            let (x, y) = (f32b(a), f32b(b));
            return Some(f32u(match name {
                "add" => x + y,
                "sub" => x - y,
                "mul" => x * y,
                "div" => x / y,
                "copysign" => y.copysign(x),
                _ => return None,
            }));
        }
        let (x, y) = (f64b(a), f64b(b));
        return Some(
            match name {
                "add" => x + y,
                "sub" => x - y,
                "mul" => x * y,
                "div" => x / y,
                "min" => x.min(y),
                "max" => x.max(y),
                "copysign" => y.copysign(x),
                _ => return None,
            }
            .to_bits(),
        );
    }
    let (sa, sb) = (a as i64, b as i64);
    Some(match (name, ty) {
        ("add", "s32" | "u32") => (a as u32).wrapping_add(b as u32) as u64,
        ("sub", "s32" | "u32") => (a as u32).wrapping_sub(b as u32) as u64,
        ("add", _) => a.wrapping_add(b),
        ("sub", _) => a.wrapping_sub(b),
        ("mul", "s64") if op[1] == "lo" => a.wrapping_mul(b),
        ("mul", "u32") if op[1] == "wide" => (a as u32 as u64) * (b as u32 as u64),
        ("div", "s64") => sa.checked_div(sb)? as u64,
        ("rem", "s64") => sa.checked_rem(sb)? as u64,
        ("div", "u64") => a.checked_div(b)?,
        ("rem", "u64") => a.checked_rem(b)?,
        ("div", "u32") => (a as u32).checked_div(b as u32)? as u64,
        ("rem", "u32") => (a as u32).checked_rem(b as u32)? as u64,
        ("max", "s64") => sa.max(sb) as u64,
        ("min", "s64") => sa.min(sb) as u64,
        ("mul", "s32" | "u32") if op[1] == "lo" => (a as u32).wrapping_mul(b as u32) as u64,
        ("div", "s32") => (a as u32 as i32).checked_div(b as u32 as i32)? as u32 as u64,
        ("rem", "s32") => (a as u32 as i32).checked_rem(b as u32 as i32)? as u32 as u64,
        ("max", "s32") => (a as u32 as i32).max(b as u32 as i32) as u32 as u64,
        ("min", "s32") => (a as u32 as i32).min(b as u32 as i32) as u32 as u64,
        ("shl", "b64") => a.checked_shl(b as u32)?,
        ("shr", "u64") => a.checked_shr(b as u32)?,
        ("shr", "u32") => ((a as u32).checked_shr(b as u32)?) as u64,
        ("and", "b64") => a & b,
        ("or", "b64") => a | b,
        ("and", "b32") => (a as u32 & b as u32) as u64,
        ("or", "b32") => (a as u32 | b as u32) as u64,
        ("shl", "b32") => (a as u32).checked_shl(b as u32)? as u64,
        ("shr", "s32") => ((a as u32 as i32).checked_shr(b as u32)?) as u32 as u64,
        ("and", "pred") => ((a != 0) && (b != 0)) as u64,
        ("or", "pred") => ((a != 0) || (b != 0)) as u64,
        _ => return None,
    })
}
