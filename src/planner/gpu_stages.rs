//! The GPU's rewrites of a function as the planner stages it: a long sum
//! split into partial sums and their combine (`super::split_sums` decides),
//! a contraction's operands copied into a layout cuBLAS takes in fewer
//! calls, and a contraction computed in such an output order and copied
//! into its own (`super::blas_layout` decides).
//!
//! Owns the three `Builder` steps that apply those decisions: pushing the
//! two stages of a split sum, cutting the operand copies, and computing a
//! product in another output order (each kept only when the calls do drop
//! and the product still routes to a GEMM). The CPU target never comes
//! here. Must not decide what to split or copy.

use super::blas_layout::{cublas_calls, output_order, relayouts, Relayout};
use super::cut::cut;
use super::extract::{canonical, read_back, Builder, CutKey};
use super::program::Source;
use super::route::{route_for, routes_to_gemm, Route, Target};
use crate::symbolic::intervals::Intervals;
use crate::symbolic::Affine;
use crate::symbolic::IndexFn;
use crate::Error;

impl Builder {
    /// Pushes `partials`, then `combine` reading them, as the stage known
    /// by `cut` and `key` (those of the function split); returns the
    /// combine's stage.
    pub(super) fn push_split(
        &mut self,
        partials: IndexFn,
        combine: IndexFn,
        sources: Vec<Source>,
        cut: Option<CutKey>,
        key: CutKey,
    ) -> Result<usize, Error> {
        let id = self.stages.len();
        let partials = IndexFn {
            name: format!("s{id}"),
            ..partials
        };
        let key_p = CutKey::of_stage(&partials, &sources);
        let route = route_for(&partials, self.dtype, self.target)?;
        self.push_stage(partials, route, sources, None, key_p)?;
        let combine = match cut {
            Some(_) => IndexFn {
                name: format!("s{}", id + 1),
                ..combine
            },
            None => combine,
        };
        let route = route_for(&combine, self.dtype, self.target)?;
        self.push_stage(combine, route, vec![Source::Stage(id)], cut, key)
    }

    /// On the GPU, a contraction's operands copied into a layout cuBLAS
    /// takes in fewer calls (`blas_layout`), when the copies pass their
    /// bounds checks and the calls do drop; `f` as it is otherwise. A copy
    /// without which the calls are as few is left out (an im2col stage
    /// whose batch lies between its `K` and `N` is read where it is).
    pub(super) fn relayout_operands(
        &mut self,
        f: IndexFn,
        sources: Vec<Source>,
        use_wanted: bool,
    ) -> Result<(IndexFn, Vec<Source>), Error> {
        let Some(mut copies) = relayouts(&f) else {
            return Ok((f, sources));
        };
        let Some((mut g, mut keys)) = with_copies(&f, &sources, &copies) else {
            return Ok((f, sources));
        };
        let calls = cublas_calls(&g);
        let mut k = 0;
        while copies.len() > 1 && k < copies.len() {
            let mut fewer = copies.clone();
            fewer.remove(k);
            match with_copies(&f, &sources, &fewer) {
                Some((h, hk)) if cublas_calls(&h) == calls => {
                    (g, keys, copies) = (h, hk, fewer);
                }
                _ => k += 1,
            }
        }
        let before = cublas_calls(&f).unwrap_or(usize::MAX);
        let better = calls.is_some_and(|after| after < before)
            && routes_to_gemm(&g, Target::Gpu)
            && matches!(
                route_for(&g, self.dtype, self.target)?,
                Route::Gemm(_) | Route::GemmThenLoop { .. }
            );
        if !better || g.check_bounds().is_err() {
            return Ok((f, sources));
        }
        self.read_stages(g, keys, sources, use_wanted)
    }

    /// On the GPU, a contraction whose output layout costs cuBLAS calls
    /// (a gradient in the heads-interleaved `[B, T, H, E]` layout of its
    /// argument) computed in the order `blas_layout::output_order` gives,
    /// as a stage, and `f` a copy of it in its own order; `f` as it is
    /// otherwise.
    pub(super) fn relayout_output(
        &mut self,
        f: IndexFn,
        mut sources: Vec<Source>,
        use_wanted: bool,
    ) -> Result<(IndexFn, Vec<Source>), Error> {
        let Some(order) = output_order(&f) else {
            return Ok((f, sources));
        };
        // A product small enough to run as a loop kernel keeps its layout.
        if !matches!(
            route_for(&f, self.dtype, self.target)?,
            Route::Gemm(_) | Route::GemmThenLoop { .. }
        ) {
            return Ok((f, sources));
        }
        let shape: Vec<usize> = order
            .iter()
            .filter_map(|v| f.out_vars.iter().position(|o| o == v))
            .map(|k| f.out_shape[k])
            .collect();
        let inner = IndexFn {
            name: "s".into(),
            out_vars: order.clone(),
            out_shape: shape,
            ..f.clone()
        };
        // Worth a copy of the output only if the calls drop (with the
        // operands copied too, as the stage will be).
        let calls = |g: &IndexFn| {
            let copied = relayouts(g)
                .and_then(|c| with_copies(g, &sources, &c))
                .and_then(|(h, _)| cublas_calls(&h));
            [cublas_calls(g), copied].into_iter().flatten().min()
        };
        let before = cublas_calls(&f);
        if calls(&inner).is_none_or(|after| Some(after) >= before) {
            return Ok((f, sources));
        }
        let read: Vec<_> = order.iter().map(|&v| Affine::var(v)).collect();
        let (cf, csrc) = canonical(&inner, &sources);
        let key = CutKey::new(cf, csrc);
        let copy = read_back(&f, &[(f.root, read)], &key.f);
        if copy.check_bounds().is_err() {
            return Ok((f, sources));
        }
        let sid = self.stage_for(key, use_wanted)?;
        sources.push(Source::Stage(sid));
        let (graph, root) = copy.graph.extract(copy.root);
        Ok((
            IndexFn {
                graph,
                root,
                ..copy
            },
            sources,
        ))
    }
}

/// `f` reading the operand copies `copies` (each as the stage its key
/// names), or `None` when one cannot be cut in the order asked for.
fn with_copies(
    f: &IndexFn,
    sources: &[Source],
    copies: &[Relayout],
) -> Option<(IndexFn, Vec<CutKey>)> {
    let iv = Intervals::of(f);
    let mut g = f.clone();
    let mut keys = Vec::with_capacity(copies.len());
    for r in copies {
        let c = cut(f, &iv, r.node)?;
        // The copy's dimensions in the order asked for.
        let perm: Option<Vec<usize>> = r
            .order
            .iter()
            .map(|v| c.read.iter().position(|form| form.coeff(*v) != 0))
            .collect();
        let perm = perm.filter(|p| p.len() == c.read.len())?;
        let stage = IndexFn {
            out_vars: perm.iter().map(|&j| c.stage.out_vars[j]).collect(),
            out_shape: perm.iter().map(|&j| c.stage.out_shape[j]).collect(),
            ..c.stage.clone()
        };
        let read: Vec<_> = perm.iter().map(|&j| c.read[j].clone()).collect();
        let (cf, csrc) = canonical(&stage, sources);
        let key = CutKey::new(cf, csrc);
        g = read_back(&g, &[(r.node, read)], &key.f);
        keys.push(key);
    }
    Some((g, keys))
}
