//! Tensors on disk in the safetensors format (Hugging Face's), through the
//! `safetensors` crate: [`save`] and [`load`]. PyTorch reads the files with
//! `safetensors.torch.load_file` and writes files [`load`] reads.
//!
//! Owns the mapping between [`Tensor`]s and the format's named, typed,
//! little-endian byte buffers (`F32 F64 I32 I64`). Half-precision tensors
//! (`BF16`, `F16`: most published checkpoints) load as f32, widened
//! exactly (every half value is an f32 value; a NaN stays a NaN), until
//! tenjin has half-precision tensors of its own; a file holding another
//! dtype is an error naming the tensor and its dtype. Models and optimizers
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
/// the file, as dense constant tensors (`BF16` and `F16` ones as f32).
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
                Dtype::BF16 => Tensor::from_vec(le(data, |b| bf16_to_f32(u16::from_le_bytes(b))), &shape),
                Dtype::F16 => Tensor::from_vec(le(data, |b| f16_to_f32(u16::from_le_bytes(b))), &shape),
                other => {
                    return Err(io_error(
                        path,
                        format!("tensor `{name}` is {other:?}; tenjin reads F32, F64, I32, I64, and BF16 and F16 as F32"),
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

/// A bfloat16 value (its bits) as the f32 it is: the top half of an f32.
fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// An IEEE binary16 value (its bits) as the f32 it is: exact, subnormals
/// included; a NaN stays a NaN, quieted, its payload kept in the top of
/// the f32's (as x86's `vcvtph2ps` does).
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match exp {
        0 if man == 0 => sign,
        // man · 2⁻²⁴, exact in f32.
        0 => (man as f32 * f32::from_bits(0x3380_0000)).to_bits() | sign,
        0x1f if man == 0 => sign | 0x7f80_0000,
        0x1f => sign | 0x7fc0_0000 | (man << 13),
        e => sign | ((e + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}
