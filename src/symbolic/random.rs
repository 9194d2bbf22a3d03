//! The counter-based uniform stream behind `random(k₀, k₁, k₂; n)`.
//!
//! Owns the one definition every backend reproduces bit for bit: a 64-bit
//! key packed from three key words and an integer counter (an affine index
//! expression, usually the element's linear index) give a uniform value in
//! `[0, 1)` with 24 random bits, exact in f32 and f64 alike, so the same
//! key draws the same numbers at any dtype, thread count or backend.
//!
//! The generator is SplitMix64 (Steele, Lea & Flood, OOPSLA 2014) read as a
//! counter-based generator: the output function (Stafford's "Mix13") of the
//! Weyl sequence `key + n·γ`. It passes BigCrush, needs two 64-bit
//! multiplications per value, and has no state, so a value is recomputed
//! wherever it is needed (the mask of a dropout is drawn again in
//! backward, never stored). Different keys are different offsets of the
//! same sequence; with keys drawn by a hash of (seed, call), two calls
//! overlap only with probability `n / 2⁶⁴`.
//!
//! Key words are carried as numbers (so that they travel as ordinary
//! arguments of an index function): word `w` is `trunc(v)` saturated to an
//! `i64` (NaN → 0), masked to its width. Must not know about tensors or
//! backends: those call [`uniform`] or emit [`MIX`] in their own code.

/// Width in bits of each key word: `key = w₀ | w₁ << 24 | w₂ << 48`.
pub const WORD_BITS: [u32; 3] = [24, 24, 16];

/// The Weyl increment (⌊2⁶⁴/φ⌋, odd).
pub const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The output function: for each `(shift, multiplier)`,
/// `z = (z ^ (z >> shift)) · multiplier`; then `z ^= z >> FINAL_SHIFT`.
pub const MIX: [(u32, u64); 2] = [(30, 0xbf58_476d_1ce4_e5b9), (27, 0x94d0_49bb_1331_11eb)];

/// The last xor-shift of [`MIX`].
pub const FINAL_SHIFT: u32 = 31;

/// The value keeps the top 24 bits of the mixed word.
pub const OUT_SHIFT: u32 = 40;

/// `2⁻²⁴`: the spacing of the values.
pub const ULP: f64 = 1.0 / (1u64 << 24) as f64;

/// The bits of one key word carried as the number `v`.
pub fn key_word(v: f64, word: usize) -> u64 {
    (v as i64 as u64) & ((1u64 << WORD_BITS[word]) - 1)
}

/// The 64-bit key of three key words.
pub fn key(words: [f64; 3]) -> u64 {
    let mut shift = 0;
    let mut k = 0;
    for (w, v) in words.into_iter().enumerate() {
        k |= key_word(v, w) << shift;
        shift += WORD_BITS[w];
    }
    k
}

/// The key words (as exact numbers) that carry a 64-bit key.
pub fn words(key: u64) -> [f64; 3] {
    let mut out = [0.0; 3];
    let mut shift = 0;
    for (w, o) in out.iter_mut().enumerate() {
        *o = ((key >> shift) & ((1u64 << WORD_BITS[w]) - 1)) as f64;
        shift += WORD_BITS[w];
    }
    out
}

/// SplitMix64's output function.
pub fn mix(mut z: u64) -> u64 {
    for (shift, m) in MIX {
        z = (z ^ (z >> shift)).wrapping_mul(m);
    }
    z ^ (z >> FINAL_SHIFT)
}

/// The 24 random bits at `counter` of the stream `key`.
pub fn bits(key: u64, counter: i64) -> u64 {
    mix(key.wrapping_add((counter as u64).wrapping_mul(GAMMA))) >> OUT_SHIFT
}

/// The uniform value in `[0, 1)` at `counter` of the stream `key`.
///
/// ```
/// use tenjin::symbolic::random::{uniform, words, key};
/// let k = key(words(0x1234_5678_9abc_def0));
/// assert_eq!(k, 0x1234_5678_9abc_def0);
/// let u = uniform(k, 7);
/// assert!((0.0..1.0).contains(&u) && u == (u as f32) as f64);
/// ```
pub fn uniform(key: u64, counter: i64) -> f64 {
    bits(key, counter) as f64 * ULP
}

/// A 64-bit key for call `call` of the stream seeded `seed` (two rounds
/// of [`mix`], so that neighbouring seeds and calls give unrelated keys).
pub fn call_key(seed: u64, call: u64) -> u64 {
    mix(mix(seed.wrapping_add(GAMMA)) ^ call.wrapping_mul(GAMMA))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_carry_every_key_exactly_in_f32() {
        for k in [0u64, 1, u64::MAX, 0x8000_0000_0000_0001, call_key(3, 9)] {
            let w = words(k);
            assert!(w.iter().all(|&v| v == (v as f32) as f64));
            assert_eq!(key(w), k);
        }
    }

    #[test]
    fn key_words_saturate_and_mask() {
        assert_eq!(key_word(f64::NAN, 0), 0);
        assert_eq!(key_word(-1.0, 2), 0xffff);
        assert_eq!(key_word(3.9, 1), 3);
        assert_eq!(key_word(f64::INFINITY, 0), (1 << 24) - 1);
    }

    #[test]
    fn values_are_uniform_and_streams_differ() {
        let (a, b) = (call_key(1, 0), call_key(1, 1));
        let n = 100_000;
        let mean = (0..n).map(|i| uniform(a, i)).sum::<f64>() / n as f64;
        // σ of the mean is 1/√(12n) ≈ 0.0009.
        assert!((mean - 0.5).abs() < 0.005, "{mean}");
        let same = (0..n).filter(|&i| bits(a, i) == bits(b, i)).count();
        assert!(same < 5, "{same}");
        // Neighbouring counters are uncorrelated.
        let c: f64 = (0..n)
            .map(|i| (uniform(a, i) - 0.5) * (uniform(a, i + 1) - 0.5))
            .sum::<f64>()
            / n as f64
            * 12.0;
        assert!(c.abs() < 0.02, "{c}");
    }
}
