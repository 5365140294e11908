//! Random decoders and dense layers of odd shapes (the protocol crate's), random embeddings and
//! models, for the tests and the GPU's start-up self-test: every bound of `Decoder::check`
//! held, clamps reached, nothing to download.

pub use compute_market_protocol::decoder::random::{
    random_decoder, random_dense, Shape, ODD_SHAPES,
};

use compute_market_protocol::decoder::BLOCK;

use super::Model;

/// A random tied embedding of `vocab × h` (int8 values at both ends of their range, block
/// scales of either sign up to 2^17) and 11 rows of int16 to take its logits of.
pub fn random_embedding(vocab: usize, h: usize, seed: u64) -> (Vec<i8>, Vec<i32>, Vec<Vec<i64>>) {
    let (d, rows) = random_dense(vocab, h, seed);
    let q = (0..vocab * h)
        .map(|i| match i % 13 {
            0 => -128,
            1 => 127,
            _ => (d.q4[i / 2] as i8).wrapping_mul(3),
        })
        .collect();
    (q, d.d, rows)
}

/// The logits' accumulators `Σ_c d[t][c / 32] · q[t][c] · y[c]` of every row `y` and token `t`
/// of the embedding `(q, d)` of width `h`, in plain loops ([`Decoder::logits`] before `lm_rq`):
/// what a device's must equal.
pub fn embedding_accs(q: &[i8], d: &[i32], h: usize, ys: &[Vec<i64>]) -> Vec<Vec<i64>> {
    ys.iter()
        .map(|y| {
            (0..q.len() / h)
                .map(|t| {
                    (0..h)
                        .map(|c| {
                            i64::from(d[t * (h / BLOCK) + c / BLOCK])
                                * i64::from(q[t * h + c])
                                * y[c]
                        })
                        .sum()
                })
                .collect()
        })
        .collect()
}

/// [`random_decoder`] as a [`Model`] (a tokenizer of no tokens, end of turn at token 0; its
/// weights not packed): for generation on every path.
pub fn random_model(shape: Shape, seed: u64) -> Model {
    Model {
        decoder: random_decoder(shape, seed),
        tokenizer: tokenizers::Tokenizer::new(tokenizers::models::bpe::BPE::default()),
        chat_pre: String::new(),
        chat_post: String::new(),
        eos: 0,
        packed: vec![],
    }
}
