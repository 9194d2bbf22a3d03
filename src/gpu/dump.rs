//! `TENJIN_PTX_DUMP=dir`: every PTX module tenjin emits is also written to
//! `dir`, one `.ptx` file per kernel named by its cache key.
//!
//! Owns only the writing; failures to write are reported once on stderr
//! and never fail a kernel.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

static WARNED: AtomicBool = AtomicBool::new(false);

/// The file name of a module: the structural key's hash, the dtype and
/// the architecture (`3f2a…-f32-sm_80.ptx`).
pub fn file_name(key_hash: u64, dtype: crate::DType, arch: super::ptx::Arch) -> String {
    let d = match dtype {
        crate::DType::F32 => "f32",
        crate::DType::F64 => "f64",
        crate::DType::I32 => "i32",
        crate::DType::I64 => "i64",
        crate::DType::BF16 => "bf16",
        crate::DType::F16 => "f16",
    };
    format!("{key_hash:016x}-{d}-{}.ptx", arch.target())
}

/// Writes `text` as `name` into `$TENJIN_PTX_DUMP` when it is set.
pub fn write(name: &str, text: &str) {
    let Some(dir) = std::env::var_os("TENJIN_PTX_DUMP") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let result = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join(name), text));
    if let Err(e) = result {
        if !WARNED.swap(true, Relaxed) {
            eprintln!(
                "tenjin: TENJIN_PTX_DUMP: cannot write {}: {e}",
                dir.join(name).display()
            );
        }
    }
}
