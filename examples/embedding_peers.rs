//! tenjin's side of `bench/embedding.sh`: embedding forward + backward for
//! a 32×128 batch of ids into a 5000×256 f32 table, one JSON line with
//! the median time in ms (`bench/embedding_peers.py` is PyTorch's side).
//!
//! One step: `h = table.index_select(0, ids)`, `loss = Σ h·g` with a fixed
//! `g` (so the incoming gradient is `g`), `loss.backward()` (the table's
//! gradient: a deterministic segmented sum), the gradient cleared.
//!
//! ```sh
//! TENJIN_NUM_THREADS=1 cargo run --release --example embedding_peers
//! cargo run --release --example embedding_peers -- smoke   # one repetition
//! ```

mod bench_common;

use bench_common::{data, median_ms, report};
use tenjin::nn::{Embedding, Module};
use tenjin::{Error, Tensor};

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let (vocab, dim, batch, seq) = (5000, 256, 32, 128);
    let emb = Embedding::new(vocab, dim, 0)?;
    let ids: Vec<i64> = data(batch * seq, 1, 1.0)
        .iter()
        .map(|&u| ((u + 1.0) * 0.5 * vocab as f32) as i64 % vocab as i64)
        .collect();
    let ids = Tensor::from_vec_i64(ids, &[batch, seq])?;
    let g = Tensor::from_vec(data(batch * seq * dim, 2, 1.0), &[batch, seq, dim])?;
    let step = || -> Result<(), Error> {
        emb.weight.zero_grad();
        let h = emb.forward(&ids)?;
        h.backward_with(&g)?;
        Ok(())
    };
    let ms = median_ms(if smoke { 1 } else { 200 }, step)?;
    report(
        "embedding_fwd_bwd",
        "32x128 ids, 5000x256 table",
        "median_ms",
        ms,
    );
    Ok(())
}
