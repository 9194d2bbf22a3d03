//! The reference interpreter: slow, obviously correct, and the oracle for
//! every backend.
//!
//! Owns `eval_f64`/`eval_f32` over dense row-major inputs. It evaluates the
//! DAG point by point in f64 with one memo entry per node, keyed by the
//! values of the node's free index variables, so shared subexpressions are
//! computed once per point. Must not generate code or reorder arithmetic for
//! speed: its job is to be the definition.

use super::affine::VarId;
use super::expr::{BinaryOp, Cond, Node, NodeId, ReduceOp};
use super::index_fn::IndexFn;
use crate::Error;

impl IndexFn {
    /// Evaluates the function in f64. `inputs` names each declared argument
    /// with its dense row-major data; the result is row-major too.
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse_with_sizes("f[i] = sum{k}_0^(i) (x[k])", &[("x", &[4][..])], &[("i", 4)])?;
    /// assert_eq!(f.eval_f64(&[("x", &[1., 2., 3., 4.][..])])?, vec![1., 3., 6., 10.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn eval_f64(&self, inputs: &[(&str, &[f64])]) -> Result<Vec<f64>, Error> {
        let data = self.bind_inputs(inputs)?;
        let refs: Vec<&[f64]> = data.to_vec();
        Evaluator::new(self, refs).run()
    }

    /// Evaluates the function with f32 inputs and outputs. Arithmetic is done
    /// in f64 and rounded once at the end.
    pub fn eval_f32(&self, inputs: &[(&str, &[f32])]) -> Result<Vec<f32>, Error> {
        let widened: Vec<(&str, Vec<f64>)> = inputs
            .iter()
            .map(|(n, d)| (*n, d.iter().map(|&x| x as f64).collect()))
            .collect();
        let as_refs: Vec<(&str, &[f64])> =
            widened.iter().map(|(n, d)| (*n, d.as_slice())).collect();
        Ok(self
            .eval_f64(&as_refs)?
            .into_iter()
            .map(|x| x as f32)
            .collect())
    }

    /// Orders the inputs like the declared arguments and checks their sizes.
    fn bind_inputs<'a>(&self, inputs: &[(&str, &'a [f64])]) -> Result<Vec<&'a [f64]>, Error> {
        let op = format!("eval {}", self.name);
        for (name, _) in inputs {
            if self.arg_index(name).is_none() {
                return Err(Error::Shape {
                    op,
                    message: format!("`{name}` is not an argument of {}", self.name),
                });
            }
        }
        self.args
            .iter()
            .map(|decl| {
                let (_, data) = inputs
                    .iter()
                    .find(|(n, _)| *n == decl.name)
                    .ok_or_else(|| Error::Shape {
                        op: op.clone(),
                        message: format!("no data given for argument `{}`", decl.name),
                    })?;
                let expected: usize = decl.shape.iter().product();
                if data.len() != expected {
                    return Err(Error::Shape {
                        op: op.clone(),
                        message: format!(
                            "argument `{}` of shape {:?} needs {expected} values, got {}",
                            decl.name,
                            decl.shape,
                            data.len()
                        ),
                    });
                }
                Ok(*data)
            })
            .collect()
    }
}

struct Evaluator<'a> {
    f: &'a IndexFn,
    inputs: Vec<&'a [f64]>,
    env: Vec<i64>,
    memo: Vec<Option<(Vec<i64>, f64)>>,
}

impl<'a> Evaluator<'a> {
    fn new(f: &'a IndexFn, inputs: Vec<&'a [f64]>) -> Self {
        Evaluator {
            f,
            inputs,
            env: vec![0; f.var_names.len()],
            memo: vec![None; f.graph.len()],
        }
    }

    fn overflow(&self) -> Error {
        Error::Overflow {
            op: format!("eval {}", self.f.name),
        }
    }

    fn run(mut self) -> Result<Vec<f64>, Error> {
        let shape = self.f.out_shape.clone();
        let total: usize = shape.iter().product();
        let mut out = Vec::with_capacity(total);
        for flat in 0..total {
            let mut rest = flat;
            for (d, &n) in shape.iter().enumerate().rev() {
                self.env[self.f.out_vars[d].0 as usize] = (rest % n) as i64;
                rest /= n;
            }
            out.push(self.eval(self.f.root)?);
        }
        Ok(out)
    }

    fn var(&self, v: VarId) -> i64 {
        self.env[v.0 as usize]
    }

    fn eval(&mut self, n: NodeId) -> Result<f64, Error> {
        let key: Vec<i64> = self
            .f
            .graph
            .free_vars(n)
            .iter()
            .map(|v| self.var(*v))
            .collect();
        if let Some((k, value)) = &self.memo[n.0 as usize] {
            if *k == key {
                return Ok(*value);
            }
        }
        let value = self.compute(n)?;
        self.memo[n.0 as usize] = Some((key, value));
        Ok(value)
    }

    fn compute(&mut self, n: NodeId) -> Result<f64, Error> {
        let f = self.f;
        let env = |v: VarId| self.env[v.0 as usize];
        Ok(match f.graph.node(n) {
            Node::Const(bits) => f64::from_bits(*bits),
            Node::Index(a) => a.eval(&env).map_err(|_| self.overflow())? as f64,
            Node::Random { key, counter } => {
                let counter = counter.eval(&env).map_err(|_| self.overflow())?;
                let words = [self.eval(key[0])?, self.eval(key[1])?, self.eval(key[2])?];
                super::random::uniform(super::random::key(words), counter)
            }
            Node::Access { arg, index } => {
                let shape = &f.args[*arg].shape;
                let mut flat = 0usize;
                for (d, form) in index.iter().enumerate() {
                    let i = form.eval(&env).map_err(|_| self.overflow())?;
                    if i < 0 || i as usize >= shape[d] {
                        return Err(Error::OutOfBounds {
                            function: f.name.clone(),
                            access: super::print::node_to_string(f, n),
                            dimension: d,
                            size: shape[d],
                            message: format!("index {i} at evaluation"),
                        });
                    }
                    flat = flat * shape[d] + i as usize;
                }
                self.inputs[*arg][flat]
            }
            Node::Unary(op, a) => {
                let (op, a) = (*op, *a);
                op.apply(self.eval(a)?)
            }
            Node::Binary(op, a, b) => {
                let (op, a, b) = (*op, *a, *b);
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                op.apply(x, y)
            }
            Node::Select {
                cond,
                then,
                otherwise,
            } => {
                let (cond, then, otherwise) = (cond.clone(), *then, *otherwise);
                let taken = if self.holds(&cond)? { then } else { otherwise };
                self.eval(taken)?
            }
            Node::Reduce {
                op,
                var,
                range,
                body,
            } => {
                let (op, var, body) = (*op, *var, *body);
                let mut lo = i64::MIN;
                for b in &range.lower {
                    lo = lo.max(b.eval_ceil(&env).map_err(|_| self.overflow())?);
                }
                let mut hi = i64::MAX;
                for b in &range.upper {
                    hi = hi.min(b.eval_floor(&env).map_err(|_| self.overflow())?);
                }
                self.reduce(op, var, lo, hi, body)?
            }
        })
    }

    fn reduce(
        &mut self,
        op: ReduceOp,
        var: VarId,
        lo: i64,
        hi: i64,
        body: NodeId,
    ) -> Result<f64, Error> {
        let saved = self.var(var);
        let mut acc = match op {
            ReduceOp::Sum => 0.0,
            ReduceOp::Max => f64::NEG_INFINITY,
            ReduceOp::Min => f64::INFINITY,
            ReduceOp::ArgMax | ReduceOp::ArgMin => -1.0,
        };
        let mut best = match op {
            ReduceOp::ArgMin => f64::INFINITY,
            _ => f64::NEG_INFINITY,
        };
        let mut found = false;
        let mut k = lo;
        while k <= hi {
            self.env[var.0 as usize] = k;
            let x = self.eval(body)?;
            match op {
                ReduceOp::Sum => acc += x,
                ReduceOp::Max => acc = BinaryOp::Max.apply(acc, x),
                ReduceOp::Min => acc = BinaryOp::Min.apply(acc, x),
                ReduceOp::ArgMax | ReduceOp::ArgMin => {
                    // A NaN is better than any number (the max and min
                    // reductions return it too).
                    let better = (x.is_nan() && !best.is_nan())
                        || if op == ReduceOp::ArgMax {
                            x > best
                        } else {
                            x < best
                        };
                    if !found || better {
                        found = true;
                        best = x;
                        acc = k as f64;
                    }
                }
            }
            k += 1;
        }
        self.env[var.0 as usize] = saved;
        Ok(acc)
    }

    fn holds(&mut self, cond: &Cond) -> Result<bool, Error> {
        let env = |v: VarId| self.env[v.0 as usize];
        match cond {
            Cond::Index(r, op) => {
                // den > 0, so the sign of the numerator decides.
                let num = r.num.eval(&env).map_err(|_| self.overflow())?;
                Ok(op.holds(num, 0))
            }
            Cond::IsInt(r) => r.is_int_at(&env).map_err(|_| self.overflow()),
            Cond::Value(a, op, b) => {
                let (a, op, b) = (*a, *op, *b);
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                Ok(op.holds(x, y))
            }
        }
    }
}
