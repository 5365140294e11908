//! The start-up self-test: every device against the CPU reference, bit for bit, on sizes that
//! are not multiples of the tile.

use super::*;

/// Jobs the start-up self-test runs on every device: sizes that are not multiples of the tile.
pub fn self_test_jobs() -> Vec<JobSpec> {
    vec![
        JobSpec::matmul(70, 33, 130, [5; 32]),
        JobSpec::matmul(64, 64, 64, [6; 32]),
        JobSpec::hash_batch(3, 5, 2, [7; 32]),
    ]
}

/// Runs [`self_test_jobs`] on `backend` and compares every output, and the Freivalds
/// products, with the CPU reference.
pub fn self_test(backend: &dyn Backend) -> Result<()> {
    for job in self_test_jobs() {
        let got = backend.run(&job)?;
        let want = CpuBackend.run(&job)?;
        if let Some(i) = (0..want.len()).find(|&i| got.get(i) != Some(&want[i])) {
            bail!(
                "{:?} {:?}: tile {i} differs from the CPU",
                job.kind,
                job.dims
            );
        }
        // scattered tiles, as a verifier asks for them (launches that start past tile 0)
        let t = job.tile_count();
        let some = [t - 1, t / 2, 0];
        ensure!(
            backend.tiles(&job, &some)? == CpuBackend.tiles(&job, &some)?,
            "{:?} {:?}: tiles {some:?} asked for alone differ from the CPU",
            job.kind,
            job.dims
        );
        if job.kind == JobKind::MatMulModP {
            let rs: Vec<Vec<u32>> = (0..3u64)
                .map(|s| {
                    (0..job.dims[2] as u64)
                        .map(|i| compute_market_protocol::job::matrix_element(&s, i))
                        .collect()
                })
                .collect();
            ensure!(
                backend.freivalds(&job, &rs)? == CpuBackend.freivalds(&job, &rs)?,
                "Freivalds products differ from the CPU"
            );
        }
    }
    Ok(())
}

/// The integer MLP on the GPU against the CPU path, bit for bit, on
/// [`odd_synthetic`](crate::compute::mlp::odd_synthetic) over 37 rows (not a multiple of the
/// 8-row tile): every tile and scattered ones. Its inputs are never held (a daemon holds only
/// what it fetched and checked).
pub fn mlp_self_test(backend: &CudaBackend) -> Result<()> {
    use crate::compute::mlp::{odd_synthetic, run_rows};
    let (model, batch) = odd_synthetic(37);
    model
        .check(13, 10)
        .map_err(|e| anyhow!("the self-test's model: {e}"))?;
    let job = JobSpec::mlp(37, 13, 10, model.work_per_row(), 8, [0; 32]);
    let inputs = crate::compute::inputs::MlpInputs {
        model: Arc::new(model),
        batch: Arc::new(batch),
    };
    let t = job.tile_count();
    for indices in [(0..t).collect::<Vec<u32>>(), vec![t - 1, t / 2, 0]] {
        let got = backend.mlp_tiles(&inputs, &job, &indices)?;
        for (k, &i) in indices.iter().enumerate() {
            let want = run_rows(&inputs.model, &inputs.batch, i as usize * 8, 8);
            ensure!(
                got.get(k) == Some(&want),
                "Mlp tiles {indices:?}: tile {i} differs from the CPU"
            );
        }
    }
    Ok(())
}

/// The integer encoder on the GPU against the CPU's fast path, bit for bit: random encoders of
/// odd widths (their clamps reached) over texts of 1 to 24 tokens, every tile and scattered
/// ones. Its inputs are never held.
pub fn encoder_self_test(backend: &CudaBackend) -> Result<()> {
    for (shape, texts) in crate::compute::encoder::odd_encoders() {
        let e = compute_market_protocol::encoder::random_encoder(shape, 5);
        e.check()
            .map_err(|e| anyhow!("the self-test's encoder: {e}"))?;
        let longest = texts.iter().map(Vec::len).max().unwrap_or(1);
        let job = JobSpec::encoder(
            texts.len() as u32,
            longest as u32,
            e.hidden as u32,
            e.work_per_token(longest),
            2,
            [0; 32],
        );
        let inputs = crate::compute::inputs::EncoderInputs::new(e, texts);
        let t = job.tile_count();
        for indices in [(0..t).collect::<Vec<u32>>(), vec![t - 1, t / 2, 0]] {
            let got = backend.encoder_tiles(&inputs, &job, &indices)?;
            for (k, &i) in indices.iter().enumerate() {
                let want =
                    crate::compute::encoder::run_rows(&inputs.fast, &inputs.ids, i as usize * 2, 2);
                ensure!(
                    got.get(k) == Some(&want),
                    "Encoder {}/{}/{} tiles {indices:?}: tile {i} differs from the CPU",
                    shape.hidden,
                    shape.heads,
                    shape.ffn
                );
            }
        }
    }
    Ok(())
}

/// The decoder's kernels on the GPU against the protocol's reference, bit for bit: dense layers
/// of odd shapes (outputs not a multiple of anything, inputs of 1 to 48 blocks, so a warp's
/// lanes wrap or sit idle) over 1 to 11 rows and 41 (a warp's 8-row groups and their
/// remainders), with block scales and minimums of either sign and inputs at ±32 767; and the
/// logits' accumulators of a random int8 embedding of 37 tokens. The weights are uploaded for
/// the test alone.
pub fn decoder_self_test(backend: &CudaBackend) -> Result<()> {
    use crate::compute::decoder::random::{embedding_accs, random_dense, random_embedding};
    use compute_market_protocol::decoder::reference_acc;
    let dev = &backend.devices[0];
    for (out, inp) in [(1, 32), (17, 64), (33, 96), (50, 160), (37, 1536)] {
        let (d, rows) = random_dense(out, inp, (out * 1000 + inp) as u64);
        let w = dev.dense_q4_up(&d)?;
        for n in 1..=rows.len() {
            ensure!(
                dev.dense_q4_acc(&w, &rows[..n])? == reference_acc(&d, &rows[..n]),
                "dec_dense on {out}×{inp}, {n} rows: differs from the CPU"
            );
        }
        let many: Vec<Vec<i64>> = rows.iter().cycle().take(41).cloned().collect();
        ensure!(
            dev.dense_q4_acc(&w, &many)? == reference_acc(&d, &many),
            "dec_dense on {out}×{inp}, 41 rows: differs from the CPU"
        );
    }
    // logits: a 37-token embedding of width 96, int8 values at both ends, scales of either sign
    let (vocab, h) = (37usize, 96usize);
    let (eq, ed, rows) = random_embedding(vocab, h, 99);
    let want = embedding_accs(&eq, &ed, h, &rows);
    let (eqd, edd) = (
        de(dev.stream.clone_htod(&eq), "copy embedding")?,
        de(dev.stream.clone_htod(&ed), "copy embedding scales")?,
    );
    for n in 1..=rows.len() {
        ensure!(
            dev.logit_accs((&eqd, &edd), h, &rows[..n])? == want[..n],
            "dec_logits on {vocab}×{h}, {n} rows: differs from the CPU"
        );
    }
    // whole forward passes of random decoders through the GPU's dense layers and logits: every
    // position's logits and a greedy completion, as on the CPU
    use crate::compute::decoder::{generate_with, random, Path};
    for (i, shape) in random::ODD_SHAPES.into_iter().enumerate() {
        let model = Arc::new(random::random_model(shape, 7 + i as u64));
        let gpu = GpuDecoder::new(dev.clone(), model.clone())?;
        let ids: Vec<u32> = (0..shape[7] as u32 - 6)
            .map(|t| (t * 7 + 3) % shape[6] as u32)
            .collect();
        let run = |path: Path| {
            let mut c = model.decoder.cache();
            let ys = model.forward(path, &ids, &mut c);
            (
                model.logits(path, &ys),
                generate_with(&model, &ids[..5], 12, path),
            )
        };
        ensure!(
            run(Path::Offload(&gpu)) == run(Path::Fast),
            "a random decoder {shape:?} through the GPU: logits or tokens differ from the CPU's"
        );
        // the GPU's own results, not the CPU's in place of a failed call
        ensure!(
            gpu.failed() == 0,
            "a random decoder {shape:?}: {} GPU calls failed",
            gpu.failed()
        );
    }
    Ok(())
}
