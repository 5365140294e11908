//! The TypeScript client's encoders against the Rust ones, both ways: this test writes
//! `app/client/test/fixtures/rust-written.json` (job specs, refused specs with the rule each
//! breaks, manifests of known parts, encoder work figures) and holds the checked-in file to it;
//! the client's tests read it. The client's tests write `ts-written.json`, which this test
//! decodes with the Rust decoders and holds to the fields the client recorded.
//! `UPDATE_FIXTURES=1` rewrites the Rust-written file.

use compute_market_protocol::{
    hash::hashv,
    job::{encoder_work_per_token, InputMode, JobSpec},
    manifest::{Manifest, Part, Role},
};
use serde_json::{json, Value};

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../app/client/test/fixtures")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn job_json(j: &JobSpec) -> Value {
    json!({
        "hex": hex(&j.encode()),
        "kind": j.kind as u8,
        "inputMode": j.input_mode as u8,
        "dims": j.dims,
        "input": hex(&j.input),
        "rowsPerTile": j.rows_per_tile,
        "workPerRow": j.work_per_row.to_string(),
        "tileCount": j.tile_count(),
        "tileLen": j.tile_len(),
        "work": j.work().to_string(),
    })
}

fn role_of(n: u64) -> Role {
    match n {
        1 => Role::A,
        2 => Role::B,
        3 => Role::Model,
        4 => Role::Batch,
        _ => Role::Texts,
    }
}

fn rust_written() -> Value {
    let seed = hashv(&[b"ts fixture"]);
    let mut matmul_own = JobSpec::matmul(100, 70, 3, seed);
    matmul_own.input_mode = InputMode::ContentHash;
    let wpt = encoder_work_per_token(6, 384, 1536, 12, 32);
    let gwpt =
        compute_market_protocol::job::decoder_work_per_token(30, 576, 1536, 9, 3, 64, 49_152, 224);
    let jobs = [
        JobSpec::matmul(70, 33, 130, seed),
        JobSpec::matmul(8192, 8192, 8192, [0xff; 32]),
        matmul_own,
        JobSpec::hash_batch(3, 5, 2, seed),
        JobSpec::mlp(450, 64, 10, 64 * 128 + 128 * 10, 8, seed),
        JobSpec::encoder(60, 32, 384, wpt, 2, seed),
        // an Encoder naming its slices (PROTOCOL §8.7): the model laid out for the replay
        JobSpec {
            slices_len: compute_market_protocol::slices::encoder::max_len(384, wpt),
            ..JobSpec::encoder(60, 32, 384, wpt, 2, seed)
        },
        // Generate: SmolLM2's shape at 96 + 128 positions; and three prompts, whose decode
        // steps are charged as DECODE_FLOOR tokens
        JobSpec::generate(40, 96, 128, gwpt, 1, seed),
        JobSpec::generate(3, 2_000, 48, gwpt, 2, seed),
    ];
    let gen = JobSpec::generate(40, 96, 128, gwpt, 1, seed).encode();
    let gedit = |f: &dyn Fn(&mut [u8; 64])| {
        let mut b = gen;
        f(&mut b);
        b
    };
    let base = JobSpec::encoder(60, 32, 384, wpt, 2, seed).encode();
    let edit = |f: &dyn Fn(&mut [u8; 64])| {
        let mut b = base;
        f(&mut b);
        b
    };
    let rejected: Vec<Value> = [
        (edit(&|b| b[0] = 1), "UnsupportedVersion"),
        (edit(&|b| b[1] = 6), "UnknownKind"),
        // Generate: G past 1 024, prompt and completion past 8 192 positions, no work, a model's
        // slice string longer than its work allows
        (
            gedit(&|b| b[12..16].copy_from_slice(&1_025u32.to_le_bytes())),
            "DimensionOutOfRange",
        ),
        (
            gedit(&|b| {
                b[8..12].copy_from_slice(&7_200u32.to_le_bytes());
                b[12..16].copy_from_slice(&1_000u32.to_le_bytes())
            }),
            "DimensionOutOfRange",
        ),
        (gedit(&|b| b[48..56].fill(0)), "DimensionOutOfRange"),
        (
            gedit(&|b| {
                let wpt = u64::from_le_bytes(b[48..56].try_into().unwrap());
                let most = compute_market_protocol::slices::decoder::max_len(wpt);
                b[56..64].copy_from_slice(&(most + 1).to_le_bytes())
            }),
            "DimensionOutOfRange",
        ),
        (edit(&|b| b[2] = 2), "UnknownInputMode"),
        (
            {
                // slices on generated inputs
                let mut b = JobSpec::hash_batch(3, 5, 2, seed).encode();
                b[60] = 1;
                b
            },
            "ReservedNotZero",
        ),
        (
            // an Encoder model's slices past what its width and work allow
            edit(&|b| {
                let most = compute_market_protocol::slices::encoder::max_len(384, wpt);
                b[56..64].copy_from_slice(&(most + 1).to_le_bytes())
            }),
            "DimensionOutOfRange",
        ),
        (
            edit(&|b| b[12..16].copy_from_slice(&513u32.to_le_bytes())),
            "DimensionOutOfRange",
        ),
        (edit(&|b| b[3] = 65), "DimensionOutOfRange"),
        (
            edit(&|b| b[48..56].copy_from_slice(&(wpt * 1000).to_le_bytes())),
            "DimensionOutOfRange",
        ),
        (edit(&|b| b[2] = 0), "InputModeNotAllowed"),
        (
            JobSpec::matmul(0, 1, 1, seed).encode(),
            "DimensionOutOfRange",
        ),
        (
            {
                let mut b = JobSpec::hash_batch(3, 5, 2, seed).encode();
                b[3] = 8;
                b
            },
            "ReservedNotZero",
        ),
    ]
    .iter()
    .map(|(b, e)| {
        assert_eq!(format!("{:?}", JobSpec::decode(b).unwrap_err()), *e);
        json!({ "hex": hex(b), "error": e })
    })
    .collect();
    let manifests: Vec<Value> = [
        vec![(1u64, b"A's bytes".to_vec()), (2, b"B's bytes".to_vec())],
        vec![(5, b"a text\nanother text\n".to_vec()), (3, vec![0u8; 300])],
        vec![(4, vec![7u8; 64]), (3, b"model".to_vec())],
    ]
    .iter()
    .map(|parts| {
        let m = Manifest::new(parts.iter().map(|(r, b)| Part::new(role_of(*r), b)).collect());
        json!({
            "parts": parts.iter().map(|(r, b)| json!({ "role": r, "content": hex(b) })).collect::<Vec<_>>(),
            "hex": hex(&m.encode()),
            "hash": hex(&m.hash()),
        })
    })
    .collect();
    let work: Vec<Value> = [(6u64, 384u64, 1536u64, 12u64, 32u64), (1, 1, 1, 1, 1), (24, 512, 4096, 512, 512)]
        .iter()
        .map(|&(b, h, f, n, l)| json!({ "blocks": b, "h": h, "f": f, "heads": n, "limit": l, "value": encoder_work_per_token(b, h, f, n, l).to_string() }))
        .collect();
    use anchor_lang::prelude::Pubkey;
    use compute_market::pda;
    let (client, authority) = (
        Pubkey::new_from_array([7; 32]),
        Pubkey::new_from_array([9; 32]),
    );
    let node = pda::node(&authority);
    let task = pda::task(&client, 1_764_000_000_123);
    let pdas = json!({
        "client": client.to_string(),
        "authority": authority.to_string(),
        "taskId": "1764000000123",
        "config": pda::config().to_string(),
        "market": pda::market(1).to_string(),
        "market65535": pda::market(65_535).to_string(),
        "node": node.to_string(),
        "vault": pda::vault(&node).to_string(),
        "task": task.to_string(),
        "escrow": pda::escrow(&task).to_string(),
        "vote0": pda::vote(&task, &node, 0).to_string(),
        "vote1": pda::vote(&task, &node, 1).to_string(),
    });
    // events as they appear in a transaction's log (`Program data: <base64>`), with their fields
    use anchor_lang::Event;
    use base64::Engine;
    let posted = compute_market::events::TaskPosted {
        task,
        client,
        market: pda::market(1),
        task_id: 1_764_000_000_123,
        job: JobSpec::encoder(60, 32, 384, wpt, 2, seed).encode(),
        reward: u64::MAX - 1,
        quorum: 3,
        samples: 16,
        open_deadline: 987_654_321,
        region: 301,
    };
    let closed = compute_market::events::TaskClosed {
        task,
        status: compute_market::state::TaskStatus::Accepted,
        refunded: 12,
        leftover_to_treasury: 0,
    };
    let line = |data: Vec<u8>| {
        format!(
            "Program data: {}",
            base64::engine::general_purpose::STANDARD.encode(data)
        )
    };
    let events = json!([
        {
            "log": line(posted.data()),
            "name": "TaskPosted",
            "data": {
                "task": task.to_string(), "client": client.to_string(), "market": pda::market(1).to_string(),
                "task_id": "1764000000123", "job": hex(&posted.job), "reward": (u64::MAX - 1).to_string(),
                "quorum": 3, "samples": 16, "open_deadline": "987654321", "region": 301,
            },
        },
        {
            "log": line(closed.data()),
            "name": "TaskClosed",
            "data": { "task": task.to_string(), "status": "Accepted", "refunded": "12", "leftover_to_treasury": "0" },
        },
    ]);
    // commitments: tiles (i·31 + j·7) mod 256, every leaf, the root, every tile's proof
    use compute_market_protocol::merkle::{leaf_hash, root_of_tiles, MerkleTree};
    let commitments: Vec<Value> = [(1u32, 100usize), (1, 3000), (5, 16_384), (7, 768), (3, 2000), (2, 1024)]
        .iter()
        .map(|&(count, len)| {
            let tiles: Vec<Vec<u8>> = (0..count)
                .map(|i| (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect())
                .collect();
            let leaves: Vec<_> = tiles.iter().enumerate().map(|(i, t)| leaf_hash(i as u32, count, t)).collect();
            let tree = MerkleTree::new(leaves.clone());
            assert_eq!(tree.root(), root_of_tiles(&tiles));
            json!({
                "count": count,
                "tileLen": len,
                "leaves": leaves.iter().map(|l| hex(l)).collect::<Vec<_>>(),
                "root": hex(&tree.root()),
                "proofs": (0..count).map(|i| tree.proof(i).unwrap().iter().map(|d| hex(d)).collect::<Vec<_>>()).collect::<Vec<_>>(),
            })
        })
        .collect();
    // what `GET /r/<root>/tiles?i=…` serves (results::wire): an Encoder result of 5 tiles
    let served = {
        let job = JobSpec::encoder(10, 16, 8, encoder_work_per_token(1, 8, 8, 1, 16), 2, seed);
        let tiles: Vec<Vec<u8>> = (0..job.tile_count())
            .map(|i| {
                (0..job.tile_len())
                    .map(|j| (i as usize * 13 + j) as u8)
                    .collect()
            })
            .collect();
        let leaves: Vec<_> = tiles
            .iter()
            .enumerate()
            .map(|(i, t)| leaf_hash(i as u32, 5, t))
            .collect();
        let tree = MerkleTree::new(leaves);
        let proven: Vec<compute_market_keeper::verify::ProvenTile> = [4u32, 0, 2]
            .iter()
            .map(|&i| compute_market_keeper::verify::ProvenTile {
                index: i,
                tile: tiles[i as usize].clone(),
                proof: tree.proof(i).unwrap(),
            })
            .collect();
        json!({
            "job": hex(&job.encode()),
            "root": hex(&tree.root()),
            "indices": [4, 0, 2],
            "tiles": hex(&compute_market_keeper::results::wire::encode_proven(&proven)),
            "all": hex(&tiles.concat()),
        })
    };
    json!({ "jobs": jobs.iter().map(job_json).collect::<Vec<_>>(), "rejected": rejected, "manifests": manifests, "encoderWork": work, "pdas": pdas, "events": events, "commitments": commitments, "served": served, "prepared": prepared(), "disputes": disputes() })
}

/// What a dispute proves (PROTOCOL §8.4), for the client's `expectedElement` and
/// `elementProof`: a `HashBatch` of two-chunk tiles and a generated `MatMulModP` with padding;
/// for some elements, the element's bytes, the tile's proof, the chunk's index and its path.
fn disputes() -> Value {
    use compute_market_keeper::dispute::element_proof;
    use compute_market_protocol::{
        dispute::{chunk_count, element_chunk, element_width, elements_per_tile, expected_element},
        merkle::{leaf_hash, MerkleTree},
    };
    let seed = hashv(&[b"dispute fixture"]);
    let cases = [
        (
            JobSpec::hash_batch(3, 40, 3, seed),
            vec![(0u32, 0u32), (1, 39), (2, 33)],
        ),
        (
            JobSpec::matmul(70, 5, 130, seed),
            vec![(0, 0), (2, 64 * 5 + 2), (4, 2000), (1, 4095)],
        ),
    ];
    let out: Vec<Value> = cases
        .iter()
        .map(|(job, points)| {
            let w = element_width(job);
            let tiles: Vec<Vec<u8>> = (0..job.tile_count())
                .map(|t| {
                    (0..elements_per_tile(job))
                        .flat_map(|e| expected_element(job, t, e).unwrap()[..w].to_vec())
                        .collect()
                })
                .collect();
            let count = job.tile_count();
            let tree = MerkleTree::new(
                tiles
                    .iter()
                    .enumerate()
                    .map(|(i, t)| leaf_hash(i as u32, count, t))
                    .collect(),
            );
            let points: Vec<Value> = points
                .iter()
                .map(|&(t, e)| {
                    let proof = tree.proof(t).unwrap();
                    let (chunk, path) = element_proof(job, t, e, &tiles[t as usize], &proof);
                    json!({
                        "tile": t,
                        "element": e,
                        "expected": hex(&expected_element(job, t, e).unwrap()[..w]),
                        "tileProof": proof.iter().map(|d| hex(d)).collect::<Vec<_>>(),
                        "chunkIndex": element_chunk(job, t, e).0,
                        "chunk": hex(&chunk),
                        "path": path.iter().map(|d| hex(d)).collect::<Vec<_>>(),
                    })
                })
                .collect();
            json!({
                "job": hex(&job.encode()),
                "root": hex(&tree.root()),
                "chunks": chunk_count(job),
                "points": points,
            })
        })
        .collect();
    json!(out)
}

/// Jobs on a client's data as `keeper task post --model` prepares them (the digits model over
/// three held-out rows; MiniLM over three texts at a token limit of 24), with the model as
/// `keeper model publish` describes it: the client's `mlpJob` and `encoderJob` must build the
/// same job spec, batch and manifest.
fn prepared() -> Value {
    use compute_market_keeper::clientdata::{describe_model, prepare_encoder, prepare_mlp};
    let dir = tempfile::tempdir().unwrap();
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    let info = |path: &std::path::Path| {
        let bytes = std::fs::read(path).unwrap();
        let mut v = serde_json::to_value(describe_model(&bytes).unwrap()).unwrap();
        v["sha256"] = json!(hex(&hashv(&[&bytes])));
        v["bytes"] = json!(bytes.len());
        v
    };
    let held = std::fs::read(models.join("digits-heldout.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&held).unwrap();
    let x = st.tensor("x").unwrap();
    let rows: Vec<&[u8]> = x.data().chunks_exact(64).take(3).collect();
    let three =
        safetensors::tensor::TensorView::new(safetensors::Dtype::I8, vec![3, 64], &x.data()[..192])
            .unwrap();
    let batch = dir.path().join("batch.safetensors");
    std::fs::write(
        &batch,
        safetensors::serialize([("x", three)], None).unwrap(),
    )
    .unwrap();
    let model = models.join("digits-mlp.safetensors");
    let mlp = prepare_mlp(&model, &batch, 8).unwrap();
    let texts = [
        "A cat sat on the mat.",
        "Zwei Hunde spielen im Park.",
        "Compute is verified by re-execution.",
    ];
    let file = dir.path().join("texts.txt");
    std::fs::write(&file, texts.join("\n") + "\n").unwrap();
    let minilm = compute_market_keeper::compute::encoder::minilm_path();
    let enc = prepare_encoder(&minilm, &file, 2, Some(24)).unwrap();
    // the CLI names the model's and the ids' slices (PROTOCOL §8.7), and so does the client
    // given the model's tokenizer; without it, the same job without them (version 1: not
    // refereed)
    assert!(enc.job.slices_len > 0 && enc.manifest.version() == 2);
    let unsliced = Manifest::new(
        enc.manifest
            .parts
            .iter()
            .map(|p| Part { slices: None, ..*p })
            .collect(),
    );
    let unsliced_job = JobSpec {
        slices_len: 0,
        input: unsliced.hash(),
        ..enc.job
    };
    // a Generate job: two prompts (one with a line break), sampled
    let smollm2 = compute_market_keeper::compute::decoder::smollm2_path();
    let prompts = vec![
        "What is the capital of France?".to_string(),
        "Write a haiku.\nAbout rain.".to_string(),
    ];
    let sampling = compute_market_protocol::decoder::Sampling {
        temperature: 180,
        top_k: 40,
        top_p: 58_982,
        seed: 7,
    };
    let gen = compute_market_keeper::clientdata::prepare_generate(
        &smollm2,
        &prompts,
        compute_market_keeper::clientdata::GenerateShape {
            max_new: 48,
            max_tokens: None,
            rows_per_tile: 1,
            sampling,
        },
    )
    .unwrap();
    json!({
        "generate": {
            "model": info(&smollm2),
            "prompts": prompts,
            "maxNew": 48,
            "sampling": { "temperature": 180, "topK": 40, "topP": 58_982, "seed": "7" },
            "job": hex(&gen.job.encode()),
            "part": hex(&gen.parts[1]),
            "manifest": hex(&gen.manifest.encode()),
        },
        "mlp": {
            "model": info(&model),
            "rows": rows.iter().map(|r| hex(r)).collect::<Vec<_>>(),
            "rowsPerTile": 8,
            "job": hex(&mlp.job.encode()),
            "batch": hex(&mlp.parts[1]),
            "manifest": hex(&mlp.manifest.encode()),
        },
        "encoder": {
            "model": info(&minilm),
            "texts": texts,
            "maxTokens": 24,
            "rowsPerTile": 2,
            "job": hex(&unsliced_job.encode()),
            "part": hex(&enc.parts[1]),
            "manifest": hex(&unsliced.encode()),
            "slicedJob": hex(&enc.job.encode()),
            "slicedManifest": hex(&enc.manifest.encode()),
        },
    })
}

#[test]
fn the_typescript_client_reads_what_rust_writes_and_rust_reads_what_it_writes() {
    held_to_fixture("rust-written.json", &rust_written(), true);

    // what the client wrote, decoded here
    let ts: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("ts-written.json")).unwrap())
            .unwrap();
    let jobs = ts["jobs"].as_array().unwrap();
    assert!(jobs.len() >= 4);
    for j in jobs {
        let bytes: [u8; 64] = unhex(j["hex"].as_str().unwrap()).try_into().unwrap();
        let spec = JobSpec::decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", j["hex"]));
        assert_eq!(job_json(&spec), *j, "the client's job spec decoded by Rust");
    }
    for m in ts["manifests"].as_array().unwrap() {
        let bytes = unhex(m["hex"].as_str().unwrap());
        let decoded = Manifest::decode(&bytes).unwrap();
        let parts: Vec<Part> = m["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                Part::new(
                    role_of(p["role"].as_u64().unwrap()),
                    &unhex(p["content"].as_str().unwrap()),
                )
            })
            .collect();
        assert_eq!(
            decoded,
            Manifest::new(parts),
            "the client's manifest decoded by Rust"
        );
        assert_eq!(hex(&decoded.hash()), m["hash"].as_str().unwrap());
    }
}

/// The texts the TypeScript client's tokenizers are held to: the 300 held-out texts of
/// `models/minilm-heldout.tsv` (prose, questions, code, numbers, punctuation, emoji, many
/// scripts) and the 76 prompts of `models/smollm2-prompts.tsv`.
fn token_texts() -> Vec<String> {
    let minilm = include_str!("../../models/minilm-heldout.tsv")
        .lines()
        .map(|l| l.split_once('\t').unwrap().1.to_string());
    let smollm2 = include_str!("../../models/smollm2-prompts.tsv")
        .lines()
        .map(|l| l.splitn(3, '\t').nth(2).unwrap().replace("\\n", "\n"));
    minilm.chain(smollm2).collect()
}

/// `app/client/test/fixtures/token-ids.json`: each text's ids by the keeper's MiniLM tokenizer
/// (with `[CLS]` and `[SEP]`) and SmolLM2's (without), and each text's ids as a prompt in
/// SmolLM2's chat template; the client's tokenizers (`src/tokenize.ts`, tokenizers.js) must
/// give the same (`test/tokenize.test.ts`). Held to the checked-in file; `UPDATE_FIXTURES=1`
/// rewrites it.
#[test]
fn the_keepers_token_ids_for_the_typescript_client() {
    use compute_market_keeper::compute::{decoder, encoder};
    let texts = token_texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let minilm = encoder::parse_model(&encoder::minilm_bytes().unwrap()).unwrap();
    let smollm2 = decoder::parse_model(&decoder::smollm2_bytes().unwrap()).unwrap();
    let want = json!({
        "texts": texts,
        "minilm": encoder::tokenize(&minilm, &refs, usize::MAX).unwrap(),
        "smollm2": refs
            .iter()
            .map(|t| smollm2.tokenizer.encode(*t, false).unwrap().get_ids().to_vec())
            .collect::<Vec<_>>(),
        "smollm2Chat": refs
            .iter()
            .map(|t| smollm2.prompt_ids(t).unwrap())
            .collect::<Vec<_>>(),
    });
    held_to_fixture("token-ids.json", &want, false);
}

/// Holds the checked-in fixture `name` to `want` (`UPDATE_FIXTURES=1` rewrites it first,
/// indented when `pretty`).
fn held_to_fixture(name: &str, want: &Value, pretty: bool) {
    let path = fixtures().join(name);
    if std::env::var_os("UPDATE_FIXTURES").is_some() {
        let text = if pretty {
            serde_json::to_string_pretty(want)
        } else {
            serde_json::to_string(want)
        };
        std::fs::write(&path, text.unwrap() + "\n").unwrap();
    }
    let have: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        have == *want,
        "{} is stale: run UPDATE_FIXTURES=1 cargo test -p compute-market-keeper --test ts_fixtures",
        path.display()
    );
}
