//! Disputes of jobs on the client's data (PROTOCOL §8.7): the program proves the job's
//! version-2 manifest, then one chunk of the inputs' slice strings at a time, recomputes the
//! disputed element (an `Mlp` logit or class through every layer, a `MatMulModP` entry of the
//! client's A and B) and decides as for generated jobs: colluding seats are overturned, a
//! rejected right result is restored, a wrong dispute forfeits its bond, a silent challenger
//! loses at its deadline, and a job posted with a version-1 manifest cannot be refereed.

use compute_market::{pda, state::MarketArgs, state::TaskStatus};
use compute_market_protocol::{
    commit::{VERDICT_CLAIMS_REFUTED, VERDICT_PROVEN_WRONG, VOTE_INVALID, VOTE_VALID},
    dispute::{self, invalid_evidence, DISPUTE_CLAIMS_FALSE},
    infer::{Layer, Mlp},
    job::{JobKind, JobSpec},
    manifest::{Manifest, Part, Role},
    sampling::sample_indices,
    P,
};
use compute_market_svm_tests::{
    disputes::{stake, supply, wind_up, Committed, Inputs},
    *,
};

/// The dispute window of the test market: long enough for a row through a model.
const D: u32 = 400;

fn market() -> MarketArgs {
    MarketArgs {
        dispute_window: D,
        ..test_market(1)
    }
}

fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

/// A 64-128-10 model of random weights, the digits model's shape (11 chunks of slices).
fn digits_shaped(seed: &mut u64) -> Mlp {
    let layer = |inp: usize, out: usize, hidden: bool, seed: &mut u64| Layer {
        inp,
        out,
        weight: (0..inp * out).map(|_| lcg(seed) as i8).collect(),
        bias: (0..out)
            .map(|_| (lcg(seed) % 2_000) as i32 - 1_000)
            .collect(),
        requant: hidden.then(|| {
            (
                (0..out).map(|_| 1 + (lcg(seed) % 1_000) as i32).collect(),
                (0..out).map(|_| 14 + (lcg(seed) % 4) as i32).collect(),
            )
        }),
    };
    Mlp {
        layers: vec![layer(64, 128, true, seed), layer(128, 10, false, seed)],
    }
}

/// An `Mlp` job of 20 rows, 8 a tile, its inputs and its right result.
fn mlp_job() -> (JobSpec, Inputs, Mlp, Vec<i8>, Committed) {
    let mut seed = 11;
    let model = digits_shaped(&mut seed);
    model.check(64, 10).unwrap();
    let x: Vec<i8> = (0..20 * 64).map(|_| (lcg(&mut seed) % 17) as i8).collect();
    let (job, inputs) = Inputs::mlp(&model, &x, 8);
    let rows: Vec<Vec<u8>> = x.chunks(64).map(|r| model.row(r)).collect();
    let right = Committed::new(job, |t, e| {
        let (row, w) = ((t * 8 + e / 11) as usize, (e % 11) as usize);
        let mut v = [0u8; 32];
        if let Some(r) = rows.get(row) {
            v[..4].copy_from_slice(&r[4 * w..4 * w + 4]);
        }
        v
    });
    (job, inputs, model, x, right)
}

/// `result` with word (tile, element) changed.
fn corrupt(result: &Committed, tile: u32, element: u32) -> Committed {
    let tiles = result.tiles.clone();
    Committed::new(result.job, |t, e| {
        let mut v = [0u8; 32];
        v[..4].copy_from_slice(&tiles[t as usize][4 * e as usize..4 * e as usize + 4]);
        if (t, e) == (tile, element) {
            v[0] ^= 1;
        }
        v
    })
}

/// Three colluders vouch for `wrong` (every tile sampled: samples = tiles); the client
/// disputes (tile, element) and wins; the provider and the three are slashed, the client
/// refunded and paid. Returns the dispute's records.
fn colluders_overturned_on_data(
    job: JobSpec,
    inputs: &Inputs,
    wrong: &Committed,
    at: (u32, u32),
) -> Vec<TxRecord> {
    let mut c = cast_in(3, 1, market());
    let task = c.submitted_job(1, job, job.tile_count() as u16, wrong.root());
    let before = supply(&c.w);
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    let ballots: Vec<(&Actor, Ballot)> = vs
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, Ballot::new(VOTE_VALID, i as u64)))
        .collect();
    w.decide(task, &ballots);
    assert_eq!(w.task(&task).status, TaskStatus::Accepted);
    assert!(
        w.task(&task).held,
        "held for the window: {:?} {:?}",
        JobSpec::decode(&w.task(&task).job),
        dispute::element_transactions(&job)
    );
    let client = c.client.clone();
    let records = w
        .argue_on_data(&client, task, wrong, inputs, at)
        .unwrap_or_else(|r| panic!("dispute: {:?}\n{}", r.error, r.logs.join("\n")));
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Rejected, VERDICT_PROVEN_WRONG)
    );
    let (vb, bond) = (t.verifier_bond, t.provider_bond);
    let (wallet, provider_stake) = (w.balance(&client.wallet), stake(w, &c.provider));
    let stakes: Vec<u64> = vs.iter().map(|v| stake(w, v)).collect();
    // a VALID vote vouched for the disputed tile if it sampled it (all of C for a product)
    let sampled: Vec<bool> = vs
        .iter()
        .map(|v| {
            job.kind == JobKind::MatMulModP
                || sample_indices(
                    &t.seed,
                    &v.node.to_bytes(),
                    t.samples as u32,
                    job.tile_count(),
                )
                .contains(&at.0)
        })
        .collect();
    assert!(sampled.iter().any(|s| *s));
    w.conclude(task).unwrap();
    wind_up(w, task, &vs, &[&client]);
    assert_eq!(stake(w, &c.provider), provider_stake - bond);
    let mut award = 0;
    for ((v, s), vouched) in vs.iter().zip(stakes).zip(&sampled) {
        let lost = if *vouched { vb } else { 0 };
        award += lost / 2;
        assert_eq!(
            stake(w, v),
            s - lost,
            "{} sampled the tile: {vouched}",
            v.name
        );
    }
    let client_part = bond * test_params().reject_client_bps as u64 / 10_000;
    assert_eq!(
        w.balance(&client.wallet),
        wallet + R + vb + client_part + award,
        "reward refunded, bond back, the provider's client part and the award"
    );
    assert_eq!(supply(w), before, "conserved");
    w.check_invariants(&[&c.provider, vs[0], vs[1], vs[2]], &[]);
    records
}

#[test]
fn three_colluders_vouching_for_a_wrong_mlp_logit_are_overturned_by_a_row_through_the_model() {
    let (job, inputs, _, _, right) = mlp_job();
    // tile 1, row 3 of it (row 11), logit 4
    let at = (1, 3 * 11 + 4);
    let records = colluders_overturned_on_data(job, &inputs, &corrupt(&right, at.0, at.1), at);
    let feeds = records.iter().filter(|r| r.label == "dispute_feed").count();
    // the batch's row (one chunk), the model's first layer (10 chunks), logit 4's record
    assert!((10..=13).contains(&feeds), "{feeds} chunks fed");
    let most = records.iter().map(|r| r.cu).max().unwrap();
    assert!(most < 1_400_000, "{most} CU");
    println!(
        "Mlp 64-128-10 logit: {} transactions, {feeds} chunks fed, at most {most} CU",
        records.len()
    );
}

#[test]
fn a_wrong_class_with_right_logits_is_overturned_too() {
    let (job, inputs, _, _, right) = mlp_job();
    // row 19 (tile 2, row 3): its class word
    let at = (2, 3 * 11 + 10);
    colluders_overturned_on_data(job, &inputs, &corrupt(&right, at.0, at.1), at);
}

#[test]
fn three_colluders_vouching_for_a_wrong_entry_of_the_clients_product_are_overturned() {
    let mut seed = 4;
    let [m, k, n] = [70u32, 300, 65];
    let a: Vec<u32> = (0..m * k).map(|_| (lcg(&mut seed) % P) as u32).collect();
    let b: Vec<u32> = (0..k * n).map(|_| (lcg(&mut seed) % P) as u32).collect();
    let (job, inputs) = Inputs::matmul(&a, &b, [m, k, n]);
    let entry = |i: u32, j: u32| {
        (0..k as u64).fold(0u64, |acc, l| {
            (acc + a[(i as u64 * k as u64 + l) as usize] as u64
                * b[(l * n as u64 + j as u64) as usize] as u64)
                % P
        }) as u32
    };
    // every entry zero but the disputed one's row is what a lazy check would not see
    let wrong = Committed::new(job, |t, e| {
        let mut v = [0u8; 32];
        if let Some((i, j)) = dispute::matmul_entry(&job, t, e) {
            if i == 0 {
                v[..4].copy_from_slice(&entry(i, j).to_le_bytes());
            }
        }
        v
    });
    // entry (65, 64): tile 3 (second row of tiles, second column), element 1·64 + 0
    let records = colluders_overturned_on_data(job, &inputs, &wrong, (3, 64));
    let feeds = records.iter().filter(|r| r.label == "dispute_feed").count();
    assert_eq!(
        feeds, 4,
        "two chunks of A's row and two of B's column (k = 300)"
    );
}

#[test]
fn a_rejected_right_mlp_result_is_restored_by_the_provider_and_a_wrong_dispute_forfeits() {
    let (job, inputs, _, _, right) = mlp_job();
    let mut c = cast_in(3, 1, market());
    let task = c.submitted_job(1, job, 3, right.root());
    let before = supply(&c.w);
    let stranger = c.w.actor("stranger", 10 * R);
    let w = &mut c.w;
    let [v0, v1, v2] = [&c.verifiers[0], &c.verifiers[1], &c.verifiers[2]];
    let invalid_at = |tile: u32, element: u32, tag: u64| {
        let mut b = Ballot::new(VOTE_INVALID, tag);
        b.evidence = invalid_evidence(tile, element, &b.evidence);
        b
    };
    // v1 points at a right logit, v2 at the right class of the padding row past N
    w.decide(
        task,
        &[
            (v0, Ballot::new(VOTE_VALID, 1)),
            (v1, invalid_at(0, 2 * 11 + 7, 2)),
            (v2, invalid_at(2, 5 * 11 + 10, 3)),
        ],
    );
    assert_eq!(w.task(&task).status, TaskStatus::Rejected);
    let provider = c.provider.clone();
    w.donate(&c.client, provider.wallet, R).unwrap();
    w.open_dispute(&provider, task, DISPUTE_CLAIMS_FALSE, 0, 0)
        .unwrap();
    w.refute_on_data(
        &provider,
        task,
        &right,
        &inputs,
        pda::vote(&task, &v1.node, 0),
    )
    .unwrap_or_else(|r| panic!("{:?}\n{}", r.error, r.logs.join("\n")));
    assert_eq!(w.task(&task).status, TaskStatus::Rejected, "one seat left");
    // the padding row's element is zero: no inputs needed (a step decides it)
    w.dispute_target(&provider, task, pda::vote(&task, &v2.node, 0))
        .unwrap();
    let d = w.dispute(&task, &provider).unwrap();
    w.prove_element(&provider, task, &right, d.tile, d.element)
        .unwrap();
    w.step_to_end(&provider, task, Some(pda::vote(&task, &v2.node, 0)))
        .unwrap();
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Accepted, VERDICT_CLAIMS_REFUTED)
    );
    // a stranger disputing a right element of the restored result: nothing to dispute (the
    // verdict is overturned); on a fresh task it forfeits, below
    refused(w, "VerdictOverturned", |w| {
        w.open_dispute(&stranger, task, 1, 0, 0)
    });
    let vb = t.verifier_bond;
    let stakes: Vec<u64> = [v1, v2].iter().map(|v| stake(w, v)).collect();
    w.conclude(task).unwrap();
    wind_up(w, task, &[v0, v1, v2], &[&provider]);
    assert_eq!(stake(w, v1), stakes[0] - vb);
    assert_eq!(stake(w, v2), stakes[1] - vb);
    assert_eq!(
        supply(w),
        before + 10 * R,
        "conserved (the stranger's tokens added)"
    );

    // a dispute of a right logit loses its bond to the provider
    let task = c.submitted_job(2, job, 3, right.root());
    let w = &mut c.w;
    let vs: Vec<&Actor> = c.verifiers.iter().collect();
    let ballots: Vec<(&Actor, Ballot)> = vs
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, Ballot::new(VOTE_VALID, 10 + i as u64)))
        .collect();
    w.decide(task, &ballots);
    let wallet = w.balance(&stranger.wallet);
    w.argue_on_data(&stranger, task, &right, &inputs, (1, 5 * 11 + 2))
        .unwrap();
    assert!(
        w.dispute(&task, &stranger).is_none(),
        "lost: closed at once"
    );
    let t = w.task(&task);
    assert_eq!(
        (t.status, t.tally().majority),
        (TaskStatus::Accepted, VOTE_VALID)
    );
    assert_eq!(w.balance(&stranger.wallet), wallet - t.verifier_bond);
    assert_eq!(t.dispute_forfeit, t.verifier_bond);
}

#[test]
fn a_silent_challenger_loses_and_a_version_1_manifest_or_a_wrong_chunk_proves_nothing() {
    let (job, inputs, _, _, right) = mlp_job();
    let at = (0, 11 + 3);
    let wrong = corrupt(&right, at.0, at.1);
    let mut c = cast_in(3, 1, market());
    let task = c.submitted_job(1, job, 3, wrong.root());
    let verifiers = c.verifiers.clone();
    let vs: Vec<&Actor> = verifiers.iter().collect();
    let w = &mut c.w;
    let ballots: Vec<(&Actor, Ballot)> = vs
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, Ballot::new(VOTE_VALID, i as u64)))
        .collect();
    w.decide(task, &ballots);
    let client = c.client.clone();
    w.open_dispute(&client, task, 1, at.0, at.1).unwrap();
    refused(w, "NotProven", |w| w.prove_inputs(&client, task, &inputs));
    w.prove_element(&client, task, &wrong, at.0, at.1).unwrap();
    // the element needs the inputs: a step does not decide it
    refused(w, "NeedsInputs", |w| w.dispute_step(&client, task, None, 1));
    // another manifest (its SHA-256 is not the job's input)
    let mut other = Inputs {
        manifest: inputs.manifest.clone(),
        ..inputs.clone()
    };
    other.manifest[20] ^= 1;
    refused(w, "InputsMismatch", |w| {
        w.prove_inputs(&client, task, &other)
    });
    w.prove_inputs(&client, task, &inputs).unwrap();
    // a chunk the recomputation does not need, and a chunk that is not the input's
    let kp = client.kp.insecure_clone();
    let feed = |w: &mut World, input: u8, chunk: u64| {
        w.send_all(
            "dispute_feed",
            &kp,
            &[],
            &[compute_market::client::dispute_feed(
                task,
                client.key(),
                None,
                input,
                chunk,
                0,
            )],
        )
    };
    refused(w, "WrongChunk", |w| feed(w, 0, 0));
    refused(w, "ProofMismatch", |w| feed(w, 1, 0));
    // then silence: at the deadline anyone ends it, the bond forfeit to the defenders
    w.advance(D as u64 + 1);
    w.dispute_timeout(task, &client).unwrap();
    assert!(w.dispute(&task, &client).is_none());
    assert_eq!(w.task(&task).dispute_forfeit, w.task(&task).verifier_bond);

    // a job posted with a version-1 manifest names no slices (its spec declares none): the
    // program cannot referee it, so its verdict settles at once and no dispute opens
    let v1 = Manifest::new(vec![
        Part::safetensors(Role::Model, &inputs.slices[0]),
        Part::safetensors(Role::Batch, &inputs.slices[1]),
    ]);
    let job1 = JobSpec {
        input: v1.hash(),
        slices_len: 0,
        ..job
    };
    let wrong1 = Committed::new(job1, |_, _| [1; 32]);
    let task = c.submitted_job(2, job1, 3, wrong1.root());
    let w = &mut c.w;
    let ballots: Vec<(&Actor, Ballot)> = vs
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, Ballot::new(VOTE_VALID, 20 + i as u64)))
        .collect();
    w.decide(task, &ballots);
    let t = w.task(&task);
    assert!(!t.held, "settled at once: nothing can overturn it");
    refused(w, "NotDisputable", |w| {
        w.open_dispute(&client, task, 1, 0, 0)
    });
    // a version-2 spec whose manifest is version 1 (it declares slices the manifest does not
    // name): its dispute cannot prove the inputs
    let job2 = JobSpec {
        input: v1.hash(),
        ..job
    };
    let old = Inputs {
        manifest: v1.encode(),
        ..inputs.clone()
    };
    let task = c.submitted_job(3, job2, 3, wrong1.root());
    let w = &mut c.w;
    let ballots: Vec<(&Actor, Ballot)> = vs
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, Ballot::new(VOTE_VALID, 30 + i as u64)))
        .collect();
    w.decide(task, &ballots);
    w.open_dispute(&client, task, 1, 0, 0).unwrap();
    w.prove_element(&client, task, &wrong1, 0, 0).unwrap();
    refused(w, "InputsNotSliced", |w| {
        w.prove_inputs(&client, task, &old)
    });
}
