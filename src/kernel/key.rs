//! Structural cache keys of index functions, for every backend's kernel
//! cache.
//!
//! The key is a byte string that describes the function completely up to
//! the names of its index variables (alpha-renaming): the function's and
//! arguments' names, the body DAG with variables numbered by first
//! appearance (output indices first, by position), then the argument and
//! output shapes. Equal keys therefore mean the same computation, so a
//! cache may hand out one kernel for both. Functions built differently may
//! get different keys for the same computation: that costs a compilation,
//! never a wrong result.

use crate::symbolic::{Affine, Cond, IndexFn, Node, RatAffine, VarId};

/// The key of one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StructuralKey {
    /// The full key: expression, then shapes.
    pub bytes: Vec<u8>,
    /// Length of the prefix of `bytes` that describes the expression
    /// without the declared shapes.
    pub expr_len: usize,
    /// Hash of the expression prefix (for telling why a cache missed).
    pub expr_hash: u64,
    /// Hash of all of `bytes`.
    pub hash: u64,
}

/// Computes the structural key of `f`.
///
/// ```
/// use tenjin::symbolic::IndexFn;
/// use tenjin::kernel::key::structural_key;
/// let a = IndexFn::parse("f[i] = sum{k}_0^2 (x[i; k])", &[("x", &[4, 3][..])])?;
/// let b = IndexFn::parse("f[p] = sum{q}_0^2 (x[p; q])", &[("x", &[4, 3][..])])?;
/// let c = IndexFn::parse("f[p] = sum{q}_0^2 (x[p; q])", &[("x", &[5, 3][..])])?;
/// assert_eq!(structural_key(&a), structural_key(&b)); // index names do not matter
/// let (kb, kc) = (structural_key(&b), structural_key(&c));
/// assert_ne!(kb, kc);
/// assert_eq!(kb.expr_hash, kc.expr_hash); // same expression, new shapes
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn structural_key(f: &IndexFn) -> StructuralKey {
    let mut e = Encoder {
        out: Vec::with_capacity(64 + 16 * f.graph.len()),
        vars: vec![u32::MAX; f.var_names.len()],
        next_var: 0,
    };
    e.str(&f.name);
    e.u64(f.args.len() as u64);
    for a in &f.args {
        e.str(&a.name);
        e.u64(a.shape.len() as u64);
    }
    e.u64(f.out_vars.len() as u64);
    for &v in &f.out_vars {
        e.var(v);
    }
    // Every node in id order (ids are dense and children come first), so a
    // child is named by its id. Nodes unreachable from the root (parsing
    // and derivation leave none) only make the key more specific.
    e.u64(f.graph.len() as u64);
    for id in 0..f.graph.len() as u32 {
        e.node(f.graph.node(crate::symbolic::NodeId(id)));
    }
    e.u64(f.root.0 as u64);
    let expr_len = e.out.len();
    for a in &f.args {
        for &s in &a.shape {
            e.u64(s as u64);
        }
    }
    for &s in &f.out_shape {
        e.u64(s as u64);
    }
    let bytes = e.out;
    StructuralKey {
        expr_hash: hash_bytes(&bytes[..expr_len]),
        hash: hash_bytes(&bytes),
        bytes,
        expr_len,
    }
}

/// A fast 64-bit hash of a byte string (not cryptographic; keys are always
/// compared in full as well).
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h: u64 = bytes.len() as u64 ^ 0x243F_6A88_85A3_08D3;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(5) ^ w).wrapping_mul(K);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h.rotate_left(5) ^ u64::from_le_bytes(tail)).wrapping_mul(K);
    // Final avalanche (from splitmix64).
    h ^= h >> 30;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

struct Encoder {
    out: Vec<u8>,
    /// Canonical number of each variable, `u32::MAX` before its first use.
    vars: Vec<u32>,
    next_var: u32,
}

impl Encoder {
    fn u8(&mut self, x: u8) {
        self.out.push(x);
    }

    /// LEB128: small numbers (the common case) take one byte.
    fn u64(&mut self, mut x: u64) {
        while x >= 0x80 {
            self.out.push((x as u8) | 0x80);
            x >>= 7;
        }
        self.out.push(x as u8);
    }

    /// Zigzag, then LEB128.
    fn i64(&mut self, x: i64) {
        self.u64(((x << 1) ^ (x >> 63)) as u64);
    }

    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.out.extend_from_slice(s.as_bytes());
    }

    fn var(&mut self, v: VarId) {
        let slot = &mut self.vars[v.0 as usize];
        if *slot == u32::MAX {
            *slot = self.next_var;
            self.next_var += 1;
        }
        let c = *slot;
        self.u64(c as u64);
    }

    fn affine(&mut self, a: &Affine) {
        self.i64(a.constant);
        self.u64(a.terms.len() as u64);
        for &(v, c) in &a.terms {
            self.var(v);
            self.i64(c);
        }
    }

    fn rat(&mut self, r: &RatAffine) {
        self.i64(r.den);
        self.affine(&r.num);
    }

    fn child(&mut self, n: crate::symbolic::NodeId) {
        self.u64(n.0 as u64);
    }

    fn node(&mut self, node: &Node) {
        match node {
            Node::Const(bits) => {
                self.u8(1);
                self.u64(*bits);
            }
            Node::Access { arg, index } => {
                self.u8(2);
                self.u64(*arg as u64);
                for a in index {
                    self.affine(a);
                }
            }
            Node::Index(a) => {
                self.u8(3);
                self.affine(a);
            }
            Node::Random { key, counter } => {
                self.u8(8);
                key.iter().for_each(|k| self.child(*k));
                self.affine(counter);
            }
            Node::Unary(op, a) => {
                self.u8(4);
                self.u8(*op as u8);
                self.child(*a);
            }
            Node::Binary(op, a, b) => {
                self.u8(5);
                self.u8(*op as u8);
                self.child(*a);
                self.child(*b);
            }
            Node::Select {
                cond,
                then,
                otherwise,
            } => {
                self.u8(6);
                match cond {
                    Cond::Index(r, op) => {
                        self.u8(0);
                        self.u8(*op as u8);
                        self.rat(r);
                    }
                    Cond::IsInt(r) => {
                        self.u8(1);
                        self.rat(r);
                    }
                    Cond::Value(a, op, b) => {
                        self.u8(2);
                        self.u8(*op as u8);
                        self.child(*a);
                        self.child(*b);
                    }
                }
                self.child(*then);
                self.child(*otherwise);
            }
            Node::Reduce {
                op,
                var,
                range,
                body,
            } => {
                self.u8(7);
                self.u8(*op as u8);
                self.var(*var);
                self.u64(range.lower.len() as u64);
                for b in &range.lower {
                    self.rat(b);
                }
                self.u64(range.upper.len() as u64);
                for b in &range.upper {
                    self.rat(b);
                }
                self.child(*body);
            }
        }
    }
}
