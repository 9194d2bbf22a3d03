//! Activation checkpointing: [`checkpoint`] runs a block without keeping
//! its intermediate values and recomputes them during backward.
//!
//! The block becomes one recorded node (a host op, `crate::planner::host`)
//! that saves only its inputs. Its forward runs `f` with recording off.
//! Its backward, when the first gradient of the node is needed, runs `f`
//! again with recording on, over fresh leaves holding the saved inputs,
//! and runs a backward of that recomputed graph from the incoming
//! gradient: the inputs' gradients are delivered along the node's edges,
//! and parameters the block captures (a layer's weights) receive theirs
//! from that inner backward directly. A private scalar leaf, an argument
//! of every checkpoint node, keeps the node on the tape when no input
//! requires a gradient (a first layer reading data).
//!
//! Its stages run on the device of their operands, whichever backend runs
//! them (`DeviceForm::Block`): the saved inputs and the incoming gradient
//! become tensors there, and the recomputation runs there too.
//!
//! Must not know how ops or backward work inside: it only calls `f` and
//! [`Tensor::backward_with`].

use crate::kernel::backend::{Operand, OperandMut};
use crate::kernel::host::DeviceForm;
use crate::planner::host::{host_stage, HostIn, HostKernel, HostOp, HostOut, Workers};
use crate::planner::{NodePlan, Program, Source};
use crate::runtime::{backend_for, Storage};
use crate::trace::Origin;
use crate::{DType, Error, Tensor};
use std::sync::{Arc, Mutex};

type Block = dyn Fn(&[Tensor]) -> Result<Tensor, Error> + Send + Sync;

/// Runs `f(inputs)` so that its intermediate values are not kept for
/// backward but recomputed from `inputs` when backward needs them (PyTorch's
/// `torch.utils.checkpoint`). Gradients are the same as without
/// checkpointing; memory held between forward and backward is the block's
/// inputs and output only. Blocks on half-precision tensors work as any
/// other, and a block run under `autocast` is recomputed under the same
/// scope (as PyTorch's), so its gradients are those without checkpointing.
/// `f` must compute the same function each time
/// (it runs again during backward); parameters it captures get their
/// gradients during that second run, outside the all-or-nothing commit of
/// the outer backward. A graph of gradients (`create_graph`) through a
/// checkpoint is not supported yet (an error says so).
///
/// ```
/// use tenjin::{checkpoint, DType, Tensor};
/// let w = Tensor::randn(&[8, 8], DType::F64, 1)?.requires_grad();
/// let x = Tensor::randn(&[4, 8], DType::F64, 2)?.requires_grad();
/// let block = {
///     let w = w.clone();
///     move |t: &[Tensor]| t[0].matmul(&w)?.tanh()?.matmul(&w)?.tanh()
/// };
/// let y = checkpoint(block.clone(), &[x.clone()])?;
/// y.sum()?.backward()?;
/// let (gx, gw) = (x.grad().unwrap().to_vec_f64()?, w.grad().unwrap().to_vec_f64()?);
/// x.zero_grad();
/// w.zero_grad();
/// block(&[x.clone()])?.sum()?.backward()?;
/// assert_eq!(gx, x.grad().unwrap().to_vec_f64()?);
/// assert_eq!(gw, w.grad().unwrap().to_vec_f64()?);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn checkpoint<F>(f: F, inputs: &[Tensor]) -> Result<Tensor, Error>
where
    F: Fn(&[Tensor]) -> Result<Tensor, Error> + Send + Sync + 'static,
{
    let dense: Vec<Tensor> = inputs
        .iter()
        .map(Tensor::contiguous)
        .collect::<Result<_, _>>()?;
    let out = crate::trace::no_grad(|| f(&dense))?.contiguous()?;
    if !crate::trace::is_grad_enabled() {
        return Ok(out);
    }
    let dtype = out.dtype();
    if !dtype.is_float() {
        return Ok(out);
    }
    let anchor = Tensor::zeros_on(&[1], dtype, out.device())?.requires_grad();
    let block = Arc::new(CheckpointOp(Arc::new(Checkpoint {
        f: Arc::new(f),
        shapes: dense
            .iter()
            .map(|t| (t.shape().to_vec(), t.dtype()))
            .collect(),
        needs: dense.iter().map(Tensor::is_requires_grad).collect(),
        out_shape: out.shape().to_vec(),
        dtype,
        autocast: crate::ops::autocast_dtype(),
        forward: Mutex::new(Some(out)),
        grads: Mutex::new(Vec::new()),
    })));
    let names: Vec<String> = (0..dense.len()).map(|k| format!("x{k}")).collect();
    let mut args: Vec<(&str, &Tensor)> = vec![("anchor", &anchor)];
    args.extend(names.iter().map(String::as_str).zip(&dense));
    crate::ops::apply_host_once("checkpoint", block, &args, dtype)
}

struct Checkpoint {
    f: Arc<Block>,
    /// Per input: shape and dtype.
    shapes: Vec<(Vec<usize>, DType)>,
    /// Per input: whether it requires a gradient.
    needs: Vec<bool>,
    out_shape: Vec<usize>,
    dtype: DType,
    /// The autocast scope the block first ran in: it runs in it again
    /// (the backward runs outside any scope), so its recomputed values are
    /// the first ones.
    autocast: Option<DType>,
    /// The output computed by `checkpoint`, handed to the forward stage.
    forward: Mutex<Option<Tensor>>,
    /// Per argument (the anchor first): its gradient from the last
    /// recomputation, until its stage takes it.
    grads: Mutex<Vec<Option<Tensor>>>,
}

impl Checkpoint {
    fn arg_shapes(&self) -> Vec<(String, Vec<usize>)> {
        std::iter::once(("anchor".to_string(), vec![1]))
            .chain(
                self.shapes
                    .iter()
                    .enumerate()
                    .map(|(k, (s, _))| (format!("x{k}"), s.clone())),
            )
            .collect()
    }

    fn program(
        &self,
        stage_for: impl FnOnce(&[(&str, &[usize])]) -> Result<crate::planner::Stage, Error>,
    ) -> Result<Program, Error> {
        let shapes = self.arg_shapes();
        let args: Vec<(&str, &[usize])> =
            shapes.iter().map(|(n, s)| (n.as_str(), &s[..])).collect();
        let stage = stage_for(&args)?;
        Ok(crate::planner::host::single_stage_program(&args, stage))
    }

    /// Recomputes the block over fresh leaves holding `inputs` and runs
    /// its backward from `seed`, on their device: the gradient of every
    /// argument (the anchor's is zero).
    fn recompute(&self, inputs: Vec<Tensor>, seed: &Tensor) -> Result<Vec<Tensor>, Error> {
        let device = seed.device();
        crate::trace::with_grad_enabled(true, || {
            let leaves: Vec<Tensor> = inputs
                .into_iter()
                .zip(&self.needs)
                .map(|(t, &needs)| if needs { t.requires_grad() } else { t })
                .collect();
            let out = match self.autocast {
                Some(half) => crate::ops::autocast(half, || (self.f)(&leaves))?,
                None => (self.f)(&leaves)?,
            };
            if out.shape() != self.out_shape {
                return Err(Error::shape(
                    "checkpoint",
                    format!(
                        "the block gave shape {:?} when recomputed, {:?} the first time",
                        out.shape(),
                        self.out_shape
                    ),
                ));
            }
            if out.is_requires_grad() {
                out.backward_with(seed)?;
            }
            let mut grads = vec![Tensor::zeros_on(&[1], self.dtype, device)?];
            for (t, (shape, dtype)) in leaves.iter().zip(&self.shapes) {
                grads.push(match t.grad() {
                    Some(g) => g,
                    None => Tensor::zeros_on(shape, *dtype, device)?,
                });
            }
            Ok(grads)
        })
    }

    /// The gradient of argument `which`: left by the last recomputation,
    /// else recomputed from the block's `inputs` and the output's gradient
    /// `seed` (the other arguments' gradients kept for their stages).
    fn gradient(&self, which: usize, inputs: Vec<Tensor>, seed: &Tensor) -> Result<Tensor, Error> {
        let taken = {
            let mut grads = self.grads.lock().unwrap_or_else(|e| e.into_inner());
            grads.get_mut(which).and_then(Option::take)
        };
        if let Some(g) = taken {
            return Ok(g);
        }
        let all = self.recompute(inputs, seed)?;
        let mine = all[which].clone();
        let mut grads = self.grads.lock().unwrap_or_else(|e| e.into_inner());
        *grads = all
            .into_iter()
            .enumerate()
            .map(|(k, g)| (k != which).then_some(g))
            .collect();
        Ok(mine)
    }
}

/// A tensor of `shape` holding a copy of `data` (on its device).
fn tensor_of(data: &Operand<'_>, shape: &[usize]) -> Result<Tensor, Error> {
    let storage = Storage::uninit_on(data.device(), data.dtype(), data.len())?;
    {
        let mut g = storage.write()?;
        backend_for(data.device())?.copy(*data, storage.operand_mut(&mut g)?)?;
    }
    Ok(Tensor::dense(shape.to_vec(), storage, Origin::Constant))
}

/// Copies the elements of `t` into `out` (same device and element type).
fn write_into(t: &Tensor, out: OperandMut<'_>) -> Result<(), Error> {
    let t = t.contiguous()?;
    let (storage, _) = t.storage_and_origin();
    let g = storage.read()?;
    backend_for(out.device())?.copy(storage.operand(&g, t.numel())?, out)
}

/// The forward stage: the output `checkpoint` computed.
#[derive(Debug)]
struct Forward(Arc<Checkpoint>);

/// The backward stage of argument `which` (0: the anchor).
#[derive(Debug)]
struct Backward(Arc<Checkpoint>, usize);

/// The block as a host op (its programs hand the block to their kernels).
struct CheckpointOp(Arc<Checkpoint>);

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "checkpoint({:?})", self.out_shape)
    }
}

/// A checkpoint's stages compute with tensors on the device of their
/// operands (the block's own ops run there): every backend hands them the
/// operands (`DeviceForm::Block`), never host slices.
fn host_slices(name: &str) -> Error {
    Error::Invalid {
        function: name.into(),
        message: "internal: a checkpoint stage was handed host slices".into(),
    }
}

impl HostKernel for Forward {
    fn name(&self) -> &str {
        "checkpoint"
    }

    fn run(&self, _: &[HostIn], _: HostOut, _: &dyn Workers) -> Result<(), Error> {
        Err(host_slices(self.name()))
    }

    fn device_form(&self) -> Option<DeviceForm> {
        Some(DeviceForm::Block)
    }

    fn run_on(&self, _inputs: &[Operand<'_>], out: OperandMut<'_>) -> Result<(), Error> {
        let t = self
            .0
            .forward
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let t = t.ok_or_else(|| Error::Invalid {
            function: "checkpoint".into(),
            message: "internal: the forward stage ran twice".into(),
        })?;
        write_into(&t, out)
    }
}

impl HostKernel for Backward {
    fn name(&self) -> &str {
        "checkpoint_backward"
    }

    fn run(&self, _: &[HostIn], _: HostOut, _: &dyn Workers) -> Result<(), Error> {
        Err(host_slices(self.name()))
    }

    fn device_form(&self) -> Option<DeviceForm> {
        Some(DeviceForm::Block)
    }

    fn run_on(&self, inputs: &[Operand<'_>], out: OperandMut<'_>) -> Result<(), Error> {
        let block = &self.0;
        // inputs: the block's inputs (not the anchor), then the gradient.
        let n = block.shapes.len();
        let (Some(xs), Some(dy)) = (inputs.get(..n), inputs.get(n)) else {
            return Err(host_slices(self.name()));
        };
        let xs = xs
            .iter()
            .zip(&block.shapes)
            .map(|(x, (shape, _))| tensor_of(x, shape))
            .collect::<Result<_, Error>>()?;
        let seed = tensor_of(dy, &block.out_shape)?;
        write_into(&block.gradient(self.1, xs, &seed)?, out)
    }

    fn out_dtype(&self) -> Option<DType> {
        match self.1 {
            0 => Some(self.0.dtype),
            k => Some(self.0.shapes[k - 1].1),
        }
    }
}

impl HostOp for CheckpointOp {
    fn forward(&self) -> Result<Program, Error> {
        let me = self.0.clone();
        let sources = (0..=self.0.shapes.len()).map(Source::Input).collect();
        self.0.program(|args| {
            host_stage(
                "checkpoint",
                args,
                sources,
                &self.0.out_shape,
                Arc::new(Forward(me)),
            )
        })
    }

    fn node_plan(&self, wrt: &[usize]) -> Result<NodePlan, Error> {
        let c = &self.0;
        let n = c.shapes.len();
        if let Some(&k) = wrt
            .iter()
            .find(|&&k| k > 0 && !c.shapes[k - 1].1.is_float())
        {
            return Err(Error::Invalid {
                function: "checkpoint".into(),
                message: format!("input {} is an integer tensor and takes no gradient", k - 1),
            });
        }
        let shapes = c.arg_shapes();
        // Backward inputs: anchor, x0…, the output's gradient, the output.
        let mut inputs: Vec<(&str, &[usize])> =
            shapes.iter().map(|(s, v)| (s.as_str(), &v[..])).collect();
        inputs.push(("dcheckpoint", &c.out_shape));
        inputs.push(("checkpoint", &c.out_shape));
        let reads: Vec<(&str, &[usize])> = inputs[1..=n + 1].to_vec();
        let sources: Vec<Source> = (1..=n + 1).map(Source::Input).collect();
        let mut stages = Vec::new();
        for &k in wrt {
            let me = c.clone();
            let shape = &shapes[k].1;
            stages.push(host_stage(
                "checkpoint_backward",
                &reads,
                sources.clone(),
                shape,
                Arc::new(Backward(me, k)),
            )?);
        }
        let backward = Program {
            inputs: inputs
                .iter()
                .map(|(name, s)| crate::symbolic::ArgDecl {
                    name: name.to_string(),
                    shape: s.to_vec(),
                })
                .collect(),
            outputs: (0..stages.len()).collect(),
            stages,
        };
        Ok(NodePlan {
            forward: self.forward()?,
            backward,
            wrt: wrt.to_vec(),
            derivatives: Vec::new(),
            forward_is_plain: false,
        })
    }
}
