use super::affine::*;
use std::collections::HashMap;
pub struct VarBounds {
    pub var: VarId,
    pub lower: Vec<RatAffine>,
    pub upper: Vec<RatAffine>,
}
pub struct Elimination {
    pub bounds: Vec<VarBounds>,
    pub conditions: Vec<Affine>,
    pub infeasible: bool,
}
fn norm(r: Affine) -> Option<Affine> {
    // None = trivially true; constant <0 kept
    let g = r.coeff_gcd();
    if g == 0 {
        return if r.constant >= 0 { None } else { Some(r) };
    }
    if g == 1 {
        return Some(r);
    }
    Some(Affine {
        terms: r.terms.iter().map(|&(v, c)| (v, c / g)).collect(),
        constant: num_integer::Integer::div_floor(&r.constant, &g),
    })
}
fn prune(rows: Vec<Affine>) -> Vec<Affine> {
    let mut best: HashMap<Vec<(VarId, i64)>, i64> = HashMap::new();
    let mut order = vec![];
    for r in rows {
        match best.get_mut(&r.terms) {
            Some(c) => {
                if r.constant < *c {
                    *c = r.constant
                }
            }
            None => {
                order.push(r.terms.clone());
                best.insert(r.terms, r.constant);
            }
        }
    }
    order
        .into_iter()
        .map(|t| {
            let c = best[&t];
            Affine {
                terms: t,
                constant: c,
            }
        })
        .collect()
}
pub fn eliminate(rows: &[Affine], order: &[VarId]) -> Result<Elimination, Overflow> {
    let mut cur: Vec<Affine> = prune(rows.iter().cloned().filter_map(norm).collect());
    let mut bounds = vec![];
    for &v in order {
        if cur.iter().any(|r| r.is_constant() && r.constant < 0) {
            return Ok(Elimination {
                bounds: vec![],
                conditions: vec![],
                infeasible: true,
            });
        }
        let (mut pos, mut neg, mut rest) = (vec![], vec![], vec![]);
        for r in cur {
            let c = r.coeff(v);
            if c > 0 {
                pos.push(r)
            } else if c < 0 {
                neg.push(r)
            } else {
                rest.push(r)
            }
        }
        let mut vb = VarBounds {
            var: v,
            lower: vec![],
            upper: vec![],
        };
        let without = |r: &Affine| {
            Affine::from_terms(r.terms.iter().copied().filter(|&(w, _)| w != v), r.constant)
        };
        for r in &pos {
            let c = r.coeff(v);
            vb.lower.push(RatAffine::new(without(r)?.scale(-1)?, c)?);
        }
        for r in &neg {
            let c = -r.coeff(v);
            vb.upper.push(RatAffine::new(without(r)?, c)?);
        }
        vb.lower.sort();
        vb.lower.dedup();
        vb.upper.sort();
        vb.upper.dedup();
        for p in &pos {
            for n in &neg {
                let a = p.coeff(v);
                let b = -n.coeff(v);
                let comb = p.scale(b)?.add(&n.scale(a)?)?;
                if let Some(r) = norm(comb) {
                    rest.push(r)
                }
            }
        }
        cur = prune(rest);
        bounds.push(vb);
    }
    let infeasible = cur.iter().any(|r| r.is_constant() && r.constant < 0);
    Ok(Elimination {
        bounds,
        conditions: cur,
        infeasible,
    })
}
pub fn has_integer_point(
    rows: &[Affine],
    order: &[VarId],
    p: &dyn Fn(VarId) -> i64,
) -> Result<bool, Overflow> {
    let e = eliminate(rows, order)?;
    if e.infeasible {
        return Ok(false);
    }
    for c in &e.conditions {
        if c.eval(p)? < 0 {
            return Ok(false);
        }
    }
    let mut vals: HashMap<VarId, i64> = HashMap::new();
    fn dfs(
        e: &Elimination,
        k: usize,
        vals: &mut HashMap<VarId, i64>,
        p: &dyn Fn(VarId) -> i64,
    ) -> Result<bool, Overflow> {
        if k == 0 {
            return Ok(true);
        }
        let vb = &e.bounds[k - 1];
        let get = |w: VarId| *vals.get(&w).unwrap_or(&p(w));
        let mut lo = i64::MIN;
        for l in &vb.lower {
            lo = lo.max(l.eval_ceil(&get)?);
        }
        let mut hi = i64::MAX;
        for u in &vb.upper {
            hi = hi.min(u.eval_floor(&get)?);
        }
        if lo == i64::MIN || hi == i64::MAX {
            return Ok(lo <= hi);
        }
        let mut x = lo;
        while x <= hi {
            vals.insert(vb.var, x);
            if dfs(e, k - 1, vals, p)? {
                return Ok(true);
            }
            x += 1;
        }
        vals.remove(&vb.var);
        Ok(false)
    }
    dfs(&e, e.bounds.len(), &mut vals, p)
}
