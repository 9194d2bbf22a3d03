//! Tensors on disk in the safetensors format (Hugging Face's), through the
//! `safetensors` crate: [`save`] and [`load`]. PyTorch reads the files with
//! `safetensors.torch.load_file` and writes files [`load`] reads.
//!
//! Owns the mapping between [`Tensor`]s and the format's named, typed,
//! little-endian byte buffers (`F32 F64 BF16 F16 I32 I64`, each loaded
//! and saved as itself, bit for bit); a file holding another dtype is an
//! error naming the tensor and its dtype. A half-precision checkpoint
//! (most published ones) loads into an f32 model through
//! [`crate::nn::Module::load_state_dict`], which converts each tensor to
//! its parameter's dtype (exactly: every half value is an f32 value).
//! Models and optimizers
//! name their tensors ([`crate::nn::Module::named_parameters`],
//! [`crate::optim::Optimizer::state_dict`]); this module only moves bytes.

use crate::{DType, Error, Tensor};
use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::path::Path;

/// A tensor's elements as the format's bytes.
struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn io_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::Invalid {
        function: "safetensors".into(),
        message: format!("{}: {what}", path.display()),
    }
}

fn bytes_of(t: &Tensor) -> Result<Bytes, Error> {
    let data: Vec<u8> = match t.dtype() {
        DType::F32 => t.to_vec()?.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::BF16 => t
            .to_vec_bf16()?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec_f16()?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        DType::F64 => t
            .to_vec_f64()?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        DType::I32 => t
            .to_vec_i64()?
            .iter()
            .flat_map(|&x| (x as i32).to_le_bytes())
            .collect(),
        DType::I64 => t
            .to_vec_i64()?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
    };
    let dtype = match t.dtype() {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::BF16 => Dtype::BF16,
        DType::F16 => Dtype::F16,
    };
    Ok(Bytes {
        dtype,
        shape: t.shape().to_vec(),
        data,
    })
}

/// Writes `tensors` to `path` (views are written as their elements, in
/// row-major order), with the metadata `format: pt` that PyTorch tools
/// expect. Names must be distinct. The format lays tensors out by dtype
/// and name, not in the order given.
///
/// ```
/// use tenjin::Tensor;
/// let dir = std::env::temp_dir().join(format!("tenjin-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("w.safetensors");
/// let w = Tensor::from_vec(vec![1., 2., 3., 4.], &[2, 2])?;
/// let ids = Tensor::from_vec_i64(vec![7, 8], &[2])?;
/// tenjin::safetensors::save(&path, &[("w", &w), ("ids", &ids)])?;
/// let back = tenjin::safetensors::load(&path)?;
/// let get = |name: &str| back.iter().find(|(n, _)| n == name).map(|(_, t)| t.clone()).unwrap();
/// assert_eq!(get("w").to_vec()?, vec![1., 2., 3., 4.]);
/// assert_eq!(get("ids").to_vec_i64()?, vec![7, 8]);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn save(path: impl AsRef<Path>, tensors: &[(&str, &Tensor)]) -> Result<(), Error> {
    let path = path.as_ref();
    for (i, (name, _)) in tensors.iter().enumerate() {
        if tensors[..i].iter().any(|(n, _)| n == name) {
            return Err(io_error(path, format!("the name `{name}` appears twice")));
        }
    }
    let bytes: Vec<(String, Bytes)> = tensors
        .iter()
        .map(|(n, t)| Ok((n.to_string(), bytes_of(t)?)))
        .collect::<Result<_, Error>>()?;
    let views = bytes.iter().map(|(n, b)| (n.clone(), b));
    let metadata = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(metadata), path).map_err(|e| io_error(path, e))
}

/// Reads every tensor of the file at `path`, in the order of their data in
/// the file, as dense constant tensors of the file's dtypes.
pub fn load(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>, Error> {
    let path = path.as_ref();
    let buffer = std::fs::read(path).map_err(|e| io_error(path, e))?;
    let file = SafeTensors::deserialize(&buffer).map_err(|e| io_error(path, e))?;
    let mut views: Vec<(String, safetensors::tensor::TensorView)> = file.tensors();
    views.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
    views
        .into_iter()
        .map(|(name, v)| {
            let shape = v.shape().to_vec();
            let data = v.data();
            let t = match v.dtype() {
                Dtype::F32 => Tensor::from_vec(le(data, f32::from_le_bytes), &shape),
                Dtype::F64 => Tensor::from_vec_f64(le(data, f64::from_le_bytes), &shape),
                Dtype::I32 => Tensor::from_vec_i32(le(data, i32::from_le_bytes), &shape),
                Dtype::I64 => Tensor::from_vec_i64(le(data, i64::from_le_bytes), &shape),
                Dtype::BF16 => Tensor::from_vec_bf16(le(data, crate::bf16::from_le_bytes), &shape),
                Dtype::F16 => Tensor::from_vec_f16(le(data, crate::f16::from_le_bytes), &shape),
                other => {
                    return Err(io_error(
                        path,
                        format!("tensor `{name}` is {other:?}; tenjin reads F32, F64, BF16, F16, I32 and I64"),
                    ))
                }
            }?;
            Ok((name, t))
        })
        .collect()
}

/// Little-endian elements of `N` bytes each.
fn le<T, const N: usize>(data: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N)
        .map(|c| from(c.try_into().expect("chunks of N bytes")))
        .collect()
}
