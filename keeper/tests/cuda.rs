//! The CUDA backend against the CPU reference, bit for bit. Compiled everywhere; executed where
//! a GPU is present. Without one, each test prints why it did not run (it never passes
//! silently) and checks what can be checked: `--backend auto` falls back to the CPU and
//! `--backend cuda` fails with the reason.

use compute_market_keeper::compute::{
    cpu::CpuBackend,
    cuda::{cubin_in, nvrtc_probe, probe, self_test, CudaBackend},
    device::{select, BackendChoice},
    Backend,
};
use compute_market_protocol::job::{matrix_element, JobSpec};

/// `Some(reason)` when there is no usable GPU here.
fn no_gpu(test: &str) -> Option<String> {
    match probe() {
        Ok(()) => None,
        Err(why) => {
            eprintln!("SKIPPED {test} on CUDA: {why}");
            Some(why)
        }
    }
}

#[test]
fn without_a_gpu_auto_falls_back_to_the_cpu_and_cuda_says_why() {
    let Some(why) = no_gpu("backend selection") else {
        let b = select(BackendChoice::Auto).expect("auto");
        assert!(
            b.name().starts_with("cuda:"),
            "auto picks the GPU when it passes its self-test: {}",
            b.name()
        );
        return;
    };
    assert!(select(BackendChoice::Auto)
        .unwrap()
        .name()
        .starts_with("cpu"));
    let err = format!(
        "{:#}",
        select(BackendChoice::Cuda)
            .err()
            .expect("no GPU: cuda must fail")
    );
    assert!(err.contains(&why), "the error names the reason: {err}");
}

#[test]
fn every_kernel_equals_the_cpu_bit_for_bit_including_ragged_sizes() {
    if no_gpu("bit identity").is_some() {
        return;
    }
    let gpu = CudaBackend::shared().expect("a machine with a GPU must open it");
    self_test(gpu.as_ref()).expect("self-test");
    // every MatMulModP kernel the device has, whichever the self-test chose
    let preferred = gpu.devices[0].matmul_kernel();
    for kernel in gpu.matmul_kernels() {
        gpu.use_matmul_kernel(kernel).unwrap();
        eprintln!("MatMulModP on the {} kernel", kernel.name());
        for (m, k, n) in [
            (1, 1, 1),
            (63, 65, 127),
            (8, 17, 9),
            (130, 70, 200),
            (1000, 513, 1025),
        ] {
            let job = JobSpec::matmul(m, k, n, [m as u8; 32]);
            assert!(
                gpu.run(&job).unwrap() == CpuBackend.run(&job).unwrap(),
                "{} kernel, {m}×{k}×{n}",
                kernel.name()
            );
        }
    }
    gpu.use_matmul_kernel(preferred).unwrap();
    assert!(
        gpu.fallbacks.is_empty(),
        "a MatMulModP kernel failed the self-test: {:?}",
        gpu.fallbacks
    );
    let jobs = [
        JobSpec::matmul(1, 1, 1, [1; 32]),
        JobSpec::matmul(63, 65, 127, [2; 32]),
        JobSpec::matmul(64, 64, 64, [3; 32]),
        JobSpec::matmul(130, 70, 200, [4; 32]),
        JobSpec::matmul(1000, 513, 1025, [5; 32]),
        JobSpec::hash_batch(1, 1, 1, [6; 32]),
        JobSpec::hash_batch(7, 3, 5, [7; 32]),
        JobSpec::hash_batch(300, 64, 16, [8; 32]),
    ];
    for job in jobs {
        assert!(
            gpu.run(&job).unwrap() == CpuBackend.run(&job).unwrap(),
            "{:?} {:?}",
            job.kind,
            job.dims
        );
        // a scattered subset, in a scrambled order, with a repeat
        let t = job.tile_count();
        let some: Vec<u32> = [t - 1, 0, t / 2, t - 1].into_iter().collect();
        assert_eq!(
            gpu.tiles(&job, &some).unwrap(),
            CpuBackend.tiles(&job, &some).unwrap(),
            "{:?} {:?} subset",
            job.kind,
            job.dims
        );
        if job.kind == compute_market_protocol::job::JobKind::MatMulModP {
            let rs: Vec<Vec<u32>> = (0..5u64)
                .map(|s| {
                    (0..job.dims[2] as u64)
                        .map(|i| matrix_element(&(s * 7 + 1), i))
                        .collect()
                })
                .collect();
            assert_eq!(
                gpu.freivalds(&job, &rs).unwrap(),
                CpuBackend.freivalds(&job, &rs).unwrap(),
                "Freivalds {:?}",
                job.dims
            );
        }
    }
}

#[test]
fn kernels_are_cached_on_disk_after_the_first_compile() {
    if no_gpu("kernel cache").is_some() {
        return;
    }
    let gpu = CudaBackend::shared().expect("GPU");
    let arch = format!(
        "sm_{}{}",
        gpu.devices[0].capability.0, gpu.devices[0].capability.1
    );
    let (first, _) = compute_market_keeper::compute::cuda::cubin(&arch).unwrap();
    let (again, cached) = compute_market_keeper::compute::cuda::cubin(&arch).unwrap();
    assert!(cached, "the second compile is read from the cache");
    assert_eq!(first, again);
}

/// NVRTC needs no GPU: where it is installed (CI installs the PyPI wheel), the kernels are
/// compiled for the architectures providers run, and the disk cache answers the second time.
#[test]
fn kernels_compile_to_cubins_with_nvrtc_even_without_a_gpu() {
    if let Err(why) = nvrtc_probe() {
        eprintln!("SKIPPED kernel compilation: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for arch in ["sm_80", "sm_90"] {
        let (bin, cached) = cubin_in(arch, dir.path()).unwrap_or_else(|e| panic!("{arch}: {e:#}"));
        assert!(!cached, "{arch}: compiled the first time");
        assert_eq!(&bin[..4], b"\x7fELF", "{arch}: a CUBIN is an ELF image");
        for kernel in [
            "gen_matrix",
            "matmul_tiles",
            "matmul_tiles_imma",
            "matmul_tiles_imma_wide",
            "byte_planes",
            "gen_rows_dot",
            "hash_batch",
            "mlp_layer",
            "enc_embed",
            "enc_norm",
            "enc_gemm",
            "enc_attention",
            "enc_residual",
            "enc_gelu",
            "enc_pool",
            "dec_dense",
            "dec_logits",
        ] {
            assert!(
                bin.windows(kernel.len()).any(|w| w == kernel.as_bytes()),
                "{arch}: {kernel} is in the CUBIN"
            );
        }
        let (again, cached) = cubin_in(arch, dir.path()).unwrap();
        assert!(cached && again == bin, "{arch}: read back from the cache");
    }
}

/// The digits MLP on the GPU's dp4a kernel: the same bytes as the CPU path over the 450
/// held-out rows (whose logits equal numpy's, tests/inference.rs), every tile and a scattered
/// subset, and the kernel passed its start-up self-test.
#[test]
fn the_digits_model_on_the_gpu_equals_the_cpu_bit_for_bit() {
    use compute_market_keeper::compute::{inputs, mlp};
    if no_gpu("the integer MLP").is_some() {
        return;
    }
    let gpu = CudaBackend::shared().expect("a machine with a GPU must open it");
    assert_eq!(
        gpu.mlp_on_gpu,
        Ok(()),
        "the Mlp kernel passed its self-test"
    );
    let (batch, labels) = mlp::digits_heldout().unwrap();
    let model = mlp::parse_model(mlp::DIGITS_MODEL, 64, 10).unwrap();
    let batch = mlp::parse_batch(&batch, labels.len(), 64).unwrap();
    let job = JobSpec::mlp(450, 64, 10, model.work_per_row(), 8, [0xd1; 32]);
    inputs::hold_mlp(
        job.input,
        inputs::MlpInputs {
            model: std::sync::Arc::new(model),
            batch: std::sync::Arc::new(batch),
        },
    );
    assert!(
        gpu.run(&job).unwrap() == CpuBackend.run(&job).unwrap(),
        "every tile"
    );
    let some = [56, 0, 28, 56];
    assert_eq!(
        gpu.tiles(&job, &some).unwrap(),
        CpuBackend.tiles(&job, &some).unwrap()
    );
}

/// The decoder's kernels (`dec_dense`, `dec_logits`), their CUDA C compiled for the CPU by g++
/// and run as a GPU runs them (`tests/warp_emulator.cpp`: blocks and warps one after another,
/// each warp 32 threads that meet at every shuffle), give the reference's accumulators on odd
/// shapes: 1 to 48 blocks of inputs (lanes wrapping and idle), row counts around the warps'
/// 8-row groups, and grids of one block (every warp looping) and of enough blocks. What the
/// GPU's start-up self-test checks again on the device.
#[test]
fn the_decoder_kernels_give_the_reference_as_warps_run_them() {
    use compute_market_keeper::compute::decoder::random::{
        embedding_accs, random_dense, random_embedding,
    };
    use compute_market_protocol::decoder::reference_acc;
    let src = include_str!("../src/compute/kernels.cu");
    let section = &src[src
        .find("// ---- Generate:")
        .expect("the decoder's section")..];
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("decoder_kernels.cu"), section).unwrap();
    std::fs::write(
        dir.path().join("warp_emulator.cpp"),
        include_str!("warp_emulator.cpp"),
    )
    .unwrap();
    let exe = dir.path().join("warp_emulator");
    let built = std::process::Command::new("g++")
        .args(["-std=c++20", "-O1", "-pthread", "-o"])
        .arg(&exe)
        .arg(dir.path().join("warp_emulator.cpp"))
        .output()
        .expect("g++ (Debian's build-essential) compiles the emulator");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run =
        |kind: u32, width: usize, rows: &[Vec<i64>], outs: usize, blocks: u32, arrays: &[u8]| {
            let mut b: Vec<u8> = [kind, width as u32, rows.len() as u32, outs as u32, blocks]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            b.extend(
                rows.iter()
                    .flatten()
                    .flat_map(|&v| (v as i16).to_le_bytes()),
            );
            b.extend(arrays);
            let (i, o) = (dir.path().join("in"), dir.path().join("out"));
            std::fs::write(&i, b).unwrap();
            let st = std::process::Command::new(&exe)
                .arg(&i)
                .arg(&o)
                .status()
                .unwrap();
            assert!(st.success(), "the emulator failed: {st}");
            let out = std::fs::read(&o).unwrap();
            out.chunks_exact(8 * outs)
                .map(|r| {
                    r.chunks_exact(8)
                        .map(|w| i64::from_le_bytes(w.try_into().unwrap()))
                        .collect::<Vec<i64>>()
                })
                .collect::<Vec<_>>()
        };
    let words = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    for (out, inp) in [(1, 32), (17, 64), (50, 160), (9, 1536)] {
        let (d, base) = random_dense(out, inp, (out * 1000 + inp) as u64);
        let mut arrays = d.q4.clone();
        arrays.extend(words(&d.d));
        arrays.extend(words(&d.min));
        for n in [1, 7, 8, 9, 17] {
            let rows: Vec<Vec<i64>> = base.iter().cycle().take(n).cloned().collect();
            let want = reference_acc(&d, &rows);
            for blocks in [1, 3] {
                assert_eq!(
                    run(0, inp, &rows, out, blocks, &arrays),
                    want,
                    "dec_dense {out}×{inp}, {n} rows, {blocks} blocks"
                );
            }
        }
    }
    // logits: 37 tokens of width 96, int8 values at both ends, scales of either sign
    let (vocab, h) = (37usize, 96usize);
    let (eq, ed, rows) = random_embedding(vocab, h, 99);
    let mut arrays: Vec<u8> = eq.iter().map(|&v| v as u8).collect();
    arrays.extend(words(&ed));
    let want = embedding_accs(&eq, &ed, h, &rows);
    for blocks in [1, 2] {
        assert_eq!(
            run(1, h, &rows, vocab, blocks, &arrays),
            want,
            "dec_logits, {blocks} blocks"
        );
    }
}
