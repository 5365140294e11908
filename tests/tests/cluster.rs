//! The whole system on a real validator: keepers as separate processes over RPC, websockets and
//! HTTP; outcomes and balances read back over RPC and cross-checked with the stock `solana` CLI.

use anchor_lang::prelude::Pubkey;
use anyhow::Result;
use compute_market::pda;
use compute_market_cluster_tests::*;
use compute_market_keeper::chain::{Chain, ChainExt};
use solana_signer::Signer;

const REWARD: u64 = 1_000_000;

fn register(v: &Validator, who: &std::path::Path, roles: &str, stake: u64) -> Result<()> {
    v.keeper(who, &["node", "register", "--roles", roles, "--gflops", "60000", "--memory-gb", "80"])?;
    v.keeper(who, &["node", "stake", &stake.to_string()])?;
    Ok(())
}

fn post(v: &Validator, client: &std::path::Path, id: u64) -> Result<Pubkey> {
    let out = v.keeper(client, &["task", "post", "--id", &id.to_string(), "--kind", "matmul", "--dims", "96,64,80", "--reward", &REWARD.to_string()])?;
    Ok(out["task"].as_str().expect("task address").parse()?)
}

#[test]
fn honest_and_cheating_providers_end_with_the_right_balances() -> Result<()> {
    let v = Validator::start()?;
    let mint_out = v.dir.path().join("mint.json");
    v.keeper(&v.admin, &["init", "--windows", "40,15,15,15", "--mint-keypair-out", mint_out.to_str().unwrap()])?;
    // `init` again reuses everything
    let again = v.keeper(&v.admin, &["init", "--windows", "40,15,15,15", "--mint-keypair-out", mint_out.to_str().unwrap()])?;
    assert_eq!(again["created"].as_array().map(Vec::len), Some(0), "init is idempotent: {again}");
    let chain = v.chain();

    let client = v.wallet("client", 100 * REWARD)?;
    let honest = v.wallet("honest", 100 * REWARD)?;
    let cheat = v.wallet("cheat", 100 * REWARD)?;
    // the honest provider can bond exactly one task at a time, so the second goes to the cheater
    register(&v, &honest, "provider", 2 * REWARD)?;
    register(&v, &cheat, "provider", 50 * REWARD)?;
    let verifiers: Vec<_> = (0..3).map(|i| v.wallet(&format!("v{i}"), 100 * REWARD)).collect::<Result<_>>()?;
    for w in &verifiers {
        register(&v, w, "verifier", 50 * REWARD)?;
    }
    let node = |p: &std::path::Path| -> Pubkey { pda::node(&keypair(p).unwrap().pubkey()) };
    let mint = compute_market_keeper::cli::config(&chain)?.stake_mint;
    let client_ata = ata(&keypair(&client)?.pubkey(), &mint);
    let client_before = chain.token_balance(&client_ata)?;

    let t1 = post(&v, &client, 1)?;
    let _honest = v.spawn_keeper("honest", &honest, &["--provider"])?;
    wait_for(60, "the honest provider to claim task 1", || Ok(chain.task(&t1)?.filter(|t| t.provider == node(&honest)).map(|_| ())))?;
    let _cheat = v.spawn_keeper("cheat", &cheat, &["--provider", "--corrupt-fraction", "0.25"])?;
    let t2 = post(&v, &client, 2)?;
    wait_for(60, "the cheater to claim task 2", || Ok(chain.task(&t2)?.filter(|t| t.provider == node(&cheat)).map(|_| ())))?;
    let _v: Vec<_> = verifiers.iter().enumerate().map(|(i, w)| v.spawn_keeper(&format!("v{i}"), w, &["--verifier"])).collect::<Result<_>>()?;
    let _crank = v.spawn_keeper("crank", &v.admin, &["--crank"])?;
    wait_for(180, "both tasks to be closed", || Ok((chain.task(&t1)?.is_none() && chain.task(&t2)?.is_none()).then_some(())))?;

    // read back over RPC
    let h = chain.node(&node(&honest))?.expect("honest node");
    assert_eq!((h.free, h.bonded, h.earned, h.times_slashed, h.tasks_completed), (2 * REWARD, 0, 880_000, 0, 1));
    let c = chain.node(&node(&cheat))?.expect("cheater node");
    assert_eq!((c.free, c.bonded, c.earned, c.times_slashed), (48 * REWARD, 0, 0, 1), "the whole 2× bond slashed");
    for w in &verifiers {
        let n = chain.node(&node(w))?.expect("verifier node");
        // task 1: 100_000 pool / 3; task 2: 40% of the 2_000_000 bond / 3
        assert_eq!((n.earned, n.times_slashed, n.verifications, n.bonded), (33_333 + 266_666, 0, 2, 0));
    }
    // the client paid task 1 and got task 2's reward back plus half the cheater's bond
    assert_eq!(chain.token_balance(&client_ata)?, client_before - REWARD + REWARD);
    assert!(chain.tasks()?.is_empty(), "every task account closed");
    assert!(chain.votes(&t1)?.is_empty() && chain.votes(&t2)?.is_empty(), "every vote account closed");
    // every node vault holds exactly what its node accounts for
    for p in [&honest, &cheat].into_iter().chain(verifiers.iter()) {
        let n = chain.node(&node(p))?.unwrap();
        assert_eq!(chain.token_balance(&pda::vault(&node(p)))?, n.free + n.bonded + n.pending_unstake + n.earned + n.fees_due);
    }

    // the stock CLI sees the same chain
    let show = v.solana(&["program", "show", &compute_market::ID.to_string()])?;
    assert!(show.contains(&compute_market::ID.to_string()) && show.contains(&pubkey(&v.admin)?), "{show}");
    assert!(v.solana(&["account", &t1.to_string()]).is_err(), "the closed task has no account");
    let vault = v.solana(&["account", &pda::vault(&node(&honest)).to_string(), "--output", "json"])?;
    assert!(vault.contains("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"), "vaults are SPL token accounts: {vault}");
    Ok(())
}

fn ata(owner: &Pubkey, mint: &Pubkey) -> Pubkey {
    anchor_spl::associated_token::get_associated_token_address(owner, mint)
}

#[test]
fn a_verifier_killed_between_commit_and_reveal_reveals_after_restart() -> Result<()> {
    let v = Validator::start()?;
    let mint_out = v.dir.path().join("mint.json");
    v.keeper(&v.admin, &["init", "--windows", "40,15,20,20", "--mint-keypair-out", mint_out.to_str().unwrap()])?;
    let chain = v.chain();
    let client = v.wallet("client", 100 * REWARD)?;
    let provider = v.wallet("provider", 100 * REWARD)?;
    register(&v, &provider, "provider", 50 * REWARD)?;
    let verifiers: Vec<_> = (0..3).map(|i| v.wallet(&format!("v{i}"), 100 * REWARD)).collect::<Result<_>>()?;
    for w in &verifiers {
        register(&v, w, "verifier", 50 * REWARD)?;
    }
    let node = |p: &std::path::Path| -> Pubkey { pda::node(&keypair(p).unwrap().pubkey()) };
    let task = post(&v, &client, 7)?;
    let _p = v.spawn_keeper("provider", &provider, &["--provider"])?;
    let _v0 = v.spawn_keeper("v0", &verifiers[0], &["--verifier"])?;
    let _v1 = v.spawn_keeper("v1", &verifiers[1], &["--verifier"])?;
    let _crank = v.spawn_keeper("crank", &v.admin, &["--crank"])?;
    // v2 dies (abort, no clean-up) the moment its commit lands
    let mut crashing = v.spawn_keeper("v2", &verifiers[2], &["--verifier", "--crash-after-commit"])?;
    let status = wait_for(90, "v2 to crash after committing", || Ok(crashing.child.try_wait()?))?;
    assert!(!status.success(), "v2 aborted");
    let vote = pda::vote(&task, &node(&verifiers[2]), 0);
    let seat: compute_market::state::Vote = chain.account(&vote)?.and_then(|d| anchor_lang::AccountDeserialize::try_deserialize(&mut &d[..]).ok()).expect("v2's vote");
    assert!(seat.committed && !seat.revealed, "killed between commit and reveal");
    // restarted from the same keypair and store: it must reveal
    let _v2 = v.spawn_keeper("v2", &verifiers[2], &["--verifier"])?;
    wait_for(120, "the task to be closed", || Ok(chain.task(&task)?.is_none().then_some(())))?;
    let n = chain.node(&node(&verifiers[2]))?.expect("v2 node");
    assert_eq!((n.verifications, n.times_slashed, n.earned, n.bonded), (1, 0, 33_333, 0), "v2 revealed and was paid, not slashed");
    let p = chain.node(&node(&provider))?.expect("provider node");
    assert_eq!((p.earned, p.tasks_completed), (880_000, 1));
    Ok(())
}
