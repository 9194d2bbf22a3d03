//! Modules as a tree: `train()`/`eval()` reach every module inside a
//! model, parameters are registered once (`named_parameters`, or children
//! through `named_children`), `ModuleList`, the `GELU`/`SiLU` modules, an
//! optimizer given no parameters, and dimensions counted from the back.

use tenjin::nn::{
    BatchNorm, Conv2d, Dropout, Embedding, LayerNorm, Linear, Mode, Module, ModuleList, ReLU,
    Sequential, SiLU, GELU,
};
use tenjin::optim::{Optimizer, SgdConfig, SGD};
use tenjin::{DType, Error, Tensor};

/// A custom block: a linear layer and a batch norm in a list, plus a
/// parameter of its own.
struct Block {
    layers: ModuleList,
    scale: Tensor,
}

impl Block {
    fn new(seed: u64) -> Result<Block, Error> {
        let mut layers = ModuleList::new();
        layers.push(Linear::with_options(3, 3, true, DType::F64, seed)?);
        layers.push(BatchNorm::new(3, 1e-5, 0.1, DType::F64)?);
        let scale = Tensor::ones(&[3], DType::F64)?.requires_grad();
        Ok(Block { layers, scale })
    }
}

impl Module for Block {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        let mut h = x.clone();
        for l in self.layers.iter() {
            h = l.forward(&h)?;
        }
        h.mul(&self.scale)
    }

    fn named_children(&self) -> Vec<(String, &dyn Module)> {
        vec![("layers".into(), &self.layers)]
    }

    /// Listed before the children's, as PyTorch lists a module's own.
    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("scale".into(), self.scale.clone())]
    }
}

fn model() -> Result<Sequential, Error> {
    Ok(Sequential::new()
        .add(Linear::with_options(4, 3, true, DType::F64, 1)?)
        .add(Block::new(2)?)
        .add(ReLU))
}

#[test]
fn train_and_eval_reach_every_module() -> Result<(), Error> {
    let m = model()?;
    let x = Tensor::randn(&[8, 4], DType::F64, 3)?;
    assert!(m.is_training());
    let trained = m.forward(&x)?.to_vec_f64()?;
    m.eval();
    assert!(!m.is_training());
    let block = &m.layers()[1];
    assert!(!block.is_training(), "the mode reached the custom block");
    let evaluated = m.forward(&x)?.to_vec_f64()?;
    assert_ne!(
        trained, evaluated,
        "the batch norm inside used its running statistics"
    );
    m.train();
    assert!(m.is_training() && block.is_training());
    Ok(())
}

/// A module that keeps its own flag, as a PyTorch module does.
struct Flagged {
    mode: Mode,
}

impl Module for Flagged {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        Ok(x.clone())
    }

    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }
}

#[test]
fn every_layer_keeps_its_own_mode() -> Result<(), Error> {
    let model = Sequential::new()
        .add(Linear::new(4, 4, 0)?)
        .add(Conv2d::new(1, 1, [1, 1], 0)?)
        .add(LayerNorm::new(&[4], 1e-5, DType::F32)?)
        .add(Embedding::new(4, 4, 0)?)
        .add(Dropout::new(0.5)?)
        .add(ModuleList::from_modules([Linear::new(4, 4, 1)?]))
        .add(Sequential::new().add(Linear::new(4, 4, 2)?))
        .add(Flagged {
            mode: Mode::default(),
        })
        .add(ReLU);
    let modes =
        |m: &Sequential| -> Vec<bool> { m.layers().iter().map(|l| l.is_training()).collect() };
    assert!(model.is_training() && modes(&model).iter().all(|t| *t));
    model.eval();
    // Each module with a flag reports evaluation; ReLU keeps none (a
    // stateless unit value) and reports training, and the container its own flag.
    assert_eq!(
        modes(&model),
        [false, false, false, false, false, false, false, false, true]
    );
    assert!(!model.is_training());
    // A layer switched on its own: the container keeps its flag, as in PyTorch.
    model.layers()[0].train();
    assert!(model.layers()[0].is_training() && !model.is_training());
    model.train();
    assert!(modes(&model).iter().all(|t| *t) && model.is_training());
    Ok(())
}

#[test]
fn parameters_are_registered_once_and_named_as_in_pytorch() -> Result<(), Error> {
    let m = model()?;
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "0.weight",
            "0.bias",
            "1.scale",
            "1.layers.0.weight",
            "1.layers.0.bias",
            "1.layers.1.weight",
            "1.layers.1.bias"
        ]
    );
    assert_eq!(m.parameters().len(), names.len());
    let buffers: Vec<String> = m.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        buffers,
        [
            "1.layers.1.running_mean",
            "1.layers.1.running_var",
            "1.layers.1.num_batches_tracked"
        ]
    );
    // Every parameter reaches the optimizer and gets a gradient; one SGD
    // step moves each whose gradient is not zero (the biases before the
    // batch norm have none: the batch mean removes any constant shift).
    let mut opt = SGD::new(m.parameters(), SgdConfig::default())?;
    let before: Vec<Vec<f64>> = m
        .parameters()
        .iter()
        .map(|p| p.to_vec_f64())
        .collect::<Result<_, _>>()?;
    let x = Tensor::randn(&[8, 4], DType::F64, 4)?;
    m.forward(&x)?.pow_scalar(2.0)?.sum()?.backward()?;
    opt.step()?;
    let mut moved = 0;
    for ((name, p), b) in m.named_parameters().iter().zip(&before) {
        let g = p
            .grad()
            .expect("every parameter gets a gradient")
            .to_vec_f64()?;
        let zero = g.iter().all(|v| v.abs() < 1e-12);
        let before_the_norm = name == "0.bias" || name == "1.layers.0.bias";
        assert_eq!(zero, before_the_norm, "{name}: {g:?}");
        if !zero {
            assert_ne!(&p.to_vec_f64()?, b, "{name} did not move");
            moved += 1;
        }
    }
    assert_eq!(moved, 5);
    Ok(())
}

#[test]
fn a_module_that_registers_nothing_is_an_error_to_optimize() {
    struct Forgetful(Tensor);
    impl Module for Forgetful {
        fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
            x.mul(&self.0)
        }
    }
    let m = Forgetful(Tensor::ones(&[2], DType::F32).unwrap().requires_grad());
    assert!(m.parameters().is_empty());
    let e = SGD::new(m.parameters(), SgdConfig::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("no parameters") && e.contains("named_parameters"),
        "{e}"
    );
}

#[test]
fn a_module_list_has_no_forward_of_its_own() -> Result<(), Error> {
    let mut l = ModuleList::new();
    l.push(GELU::default());
    l.push(SiLU);
    l.push(GELU::new("tanh")?);
    assert_eq!(l.len(), 3);
    let x = Tensor::from_vec_f64(vec![-1.5, 0.25, 2.0], &[3])?;
    let e = l.forward(&x).unwrap_err().to_string();
    assert!(e.contains("ModuleList") && e.contains("no forward"), "{e}");
    let got: Vec<Vec<f64>> = l
        .iter()
        .map(|m| m.forward(&x)?.to_vec_f64())
        .collect::<Result<_, _>>()?;
    assert_eq!(got[0], x.gelu()?.to_vec_f64()?);
    assert_eq!(got[1], x.silu()?.to_vec_f64()?);
    assert_eq!(got[2], x.gelu_tanh()?.to_vec_f64()?);
    Ok(())
}

#[test]
fn dimensions_count_from_the_back_when_negative() -> Result<(), Error> {
    let x = Tensor::randn(&[2, 3, 4], DType::F64, 5)?;
    let same = |a: Tensor, b: Tensor| -> Result<(), Error> {
        assert_eq!(a.shape(), b.shape());
        assert_eq!(a.to_vec_f64()?, b.to_vec_f64()?);
        Ok(())
    };
    same(x.softmax(-1)?, x.softmax(2)?)?;
    same(x.log_softmax(-2)?, x.log_softmax(1)?)?;
    same(x.transpose(-2, -1)?, x.transpose(1, 2)?)?;
    same(x.unsqueeze(-1)?, x.unsqueeze(3)?)?;
    same(x.unsqueeze(-4)?, x.unsqueeze(0)?)?;
    same(x.narrow(-1, 1, 2)?, x.narrow(2, 1, 2)?)?;
    same(x.cumsum(-1)?, x.cumsum(2)?)?;
    same(x.prod(-3, true)?, x.prod(0, true)?)?;
    same(Tensor::cat(&[&x, &x], -1)?, Tensor::cat(&[&x, &x], 2)?)?;
    same(Tensor::stack(&[&x, &x], -1)?, Tensor::stack(&[&x, &x], 3)?)?;
    assert_eq!(
        x.argmax(-1, false)?.to_vec_i64()?,
        x.argmax(2, false)?.to_vec_i64()?
    );
    assert_eq!(
        x.argmin(-2, true)?.to_vec_i64()?,
        x.argmin(1, true)?.to_vec_i64()?
    );
    let y = x.unsqueeze(-1)?;
    same(y.squeeze(-1)?, y.squeeze(3)?)?;
    same(x.permute(&[-1, 0, -2])?, x.permute(&[2, 0, 1])?)?;
    same(x.flip(&[-1, -3])?, x.flip(&[2, 0])?)?;
    same(x.slice(-1, 1, 4, 2)?, x.slice(2, 1, 4, 2)?)?;
    same(x.split(2, -1)?.remove(1), x.split(2, 2)?.remove(1))?;
    same(x.chunk(3, -2)?.remove(2), x.chunk(3, 1)?.remove(2))?;
    same(x.sum_dims(&[-1, -2], false)?, x.sum_dims(&[2, 1], false)?)?;
    same(x.mean_dims(&[-3], true)?, x.mean_dims(&[0], true)?)?;
    let ids = Tensor::from_vec_i64(vec![3, 0, 3], &[3])?;
    same(x.index_select(-1, &ids)?, x.index_select(2, &ids)?)?;
    let idx = Tensor::from_vec_i64(vec![1, 0, 2, 1, 0, 0], &[2, 3, 1])?;
    same(x.gather(-1, &idx)?, x.gather(2, &idx)?)?;
    // A `usize` variable still works.
    let d: usize = 1;
    same(x.softmax(d)?, x.softmax(1)?)?;
    for e in [
        x.softmax(-4).unwrap_err(),
        x.softmax(3).unwrap_err(),
        x.transpose(0, -5).unwrap_err(),
        x.unsqueeze(-5).unwrap_err(),
        Tensor::stack(&[&x], 4).unwrap_err(),
        x.permute(&[0, 1, -4]).unwrap_err(),
        x.flip(&[3]).unwrap_err(),
        x.slice(-4, 0, 1, 1).unwrap_err(),
        x.index_select(-4, &ids).unwrap_err(),
        x.gather(3, &idx).unwrap_err(),
    ] {
        let e = e.to_string();
        assert!(e.contains("out of range") && e.contains("[2, 3, 4]"), "{e}");
    }
    // The gradient through a negative-dimension op is the positive one's.
    let w = x.detach().requires_grad();
    w.softmax(-1)?.mul(&x)?.sum()?.backward()?;
    let g1 = w.grad().unwrap().to_vec_f64()?;
    w.zero_grad();
    w.softmax(2)?.mul(&x)?.sum()?.backward()?;
    assert_eq!(w.grad().unwrap().to_vec_f64()?, g1);
    Ok(())
}
