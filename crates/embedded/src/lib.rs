//! # compute-market-embedded
//!
//! An in-process cluster: litesvm 0.16 (the Agave 4.2.2 runtime) with `compute_market.so`
//! loaded, SPL token accounts written directly, and a clock that the owner advances. At slot N
//! the SlotHashes sysvar holds the 512 slots before N, as on a real cluster, so the program's
//! seed rule ("the first slot strictly after the submission") behaves as it does on-chain.
//!
//! The litesvm tests, the CU report and the keeper's embedded chain all run on this.

use std::path::PathBuf;

use anchor_lang::prelude::Pubkey;
use compute_market_protocol::hash::hashv;
use litesvm::LiteSVM;
use solana_account::Account;
use solana_hash::Hash;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_signer::Signer;
use solana_slot_hashes::SlotHashes;
use solana_transaction::Transaction;

pub use litesvm;

/// SPL Token program id.
pub const TOKEN_PROGRAM: Pubkey = anchor_spl::token::ID;
/// Entries SlotHashes keeps.
const SLOT_HASH_WINDOW: u64 = 512;

/// Path of the built program: `$COMPUTE_MARKET_SO`, else `<workspace>/target/deploy/compute_market.so`.
pub fn program_path() -> PathBuf {
    std::env::var_os("COMPUTE_MARKET_SO")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/deploy/compute_market.so")
        })
}

/// The hash the embedded cluster gives `slot` in SlotHashes.
pub fn slot_hash(slot: u64) -> [u8; 32] {
    hashv(&[b"slot", &slot.to_le_bytes()])
}

/// What one transaction did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Whether it succeeded.
    pub ok: bool,
    /// Compute units consumed.
    pub cu: u64,
    /// Program logs.
    pub logs: Vec<String>,
    /// The transaction error, if any.
    pub error: Option<String>,
    /// Bytes of the signed transaction on the wire (a packet holds at most 1 232).
    pub bytes: usize,
    /// The transaction's signature (base58).
    pub signature: String,
}

/// Length of `n` as a compact-u16 (the wire format's short vector length).
fn compact_len(n: usize) -> usize {
    match n {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        _ => 3,
    }
}

/// Bytes of a legacy transaction on the wire: signatures, then the message (header, keys,
/// blockhash, instructions).
pub fn wire_size(tx: &Transaction) -> usize {
    let m = &tx.message;
    let ixs: usize = m
        .instructions
        .iter()
        .map(|i| {
            1 + compact_len(i.accounts.len())
                + i.accounts.len()
                + compact_len(i.data.len())
                + i.data.len()
        })
        .sum();
    compact_len(tx.signatures.len())
        + 64 * tx.signatures.len()
        + 3
        + compact_len(m.account_keys.len())
        + 32 * m.account_keys.len()
        + 32
        + compact_len(m.instructions.len())
        + ixs
}

/// The cluster.
pub struct Cluster {
    /// The runtime.
    pub svm: LiteSVM,
    slot: u64,
    next_key: u64,
}

fn mint_data(authority: &Pubkey, supply: u64) -> Vec<u8> {
    let mut d = vec![0u8; 82];
    d[0..4].copy_from_slice(&1u32.to_le_bytes());
    d[4..36].copy_from_slice(authority.as_ref());
    d[36..44].copy_from_slice(&supply.to_le_bytes());
    d[44] = 6;
    d[45] = 1;
    d
}

fn token_account_data(mint: &Pubkey, owner: &Pubkey, amount: u64) -> Vec<u8> {
    let mut d = vec![0u8; 165];
    d[0..32].copy_from_slice(mint.as_ref());
    d[32..64].copy_from_slice(owner.as_ref());
    d[64..72].copy_from_slice(&amount.to_le_bytes());
    d[108] = 1;
    d
}

impl Cluster {
    /// A cluster with the program at [`program_path`] loaded, at slot 10.
    pub fn new() -> Result<Self, String> {
        let path = program_path();
        let bytes = std::fs::read(&path).map_err(|e| {
            format!(
                "cannot read {}: {e}; build it first with scripts/build (cargo build-sbf)",
                path.display()
            )
        })?;
        let mut svm = LiteSVM::new();
        svm.add_program(compute_market::ID, &bytes)
            .map_err(|e| format!("loading {}: {e:?}", path.display()))?;
        let mut c = Cluster {
            svm,
            slot: 0,
            next_key: 100,
        };
        c.advance(10);
        Ok(c)
    }

    /// A deterministic new keypair (reproducible PDA bumps and CU figures).
    pub fn keypair(&mut self, tag: &str) -> Keypair {
        self.next_key += 1;
        Keypair::new_from_array(hashv(&[tag.as_bytes(), &self.next_key.to_le_bytes()]))
    }

    /// Current slot.
    pub fn slot(&self) -> u64 {
        self.slot
    }

    /// Advances the clock by `n` slots and refreshes SlotHashes.
    pub fn advance(&mut self, n: u64) {
        self.slot += n;
        self.svm.warp_to_slot(self.slot);
        let first = self.slot.saturating_sub(SLOT_HASH_WINDOW);
        let entries: Vec<(u64, Hash)> = (first..self.slot)
            .map(|s| (s, Hash::new_from_array(slot_hash(s))))
            .collect();
        self.svm.set_sysvar(&SlotHashes::new(&entries));
    }

    /// Sets the upgrade authority recorded in the program's program-data account (litesvm
    /// loads the program upgradeable, with none): `initialize_config` must be signed by it.
    pub fn set_upgrade_authority(&mut self, authority: Option<&Pubkey>) {
        let key = compute_market::pda::program_data();
        let mut acc = self.svm.get_account(&key).expect("program data account");
        // bincode UpgradeableLoaderState::ProgramData { slot: u64, upgrade_authority: Option<Pubkey> }
        assert_eq!(
            acc.data[..4],
            3u32.to_le_bytes(),
            "not a program-data account"
        );
        match authority {
            Some(a) => {
                acc.data[12] = 1;
                acc.data[13..45].copy_from_slice(a.as_ref());
            }
            None => {
                acc.data[12] = 0;
                acc.data[13..45].fill(0);
            }
        }
        self.svm
            .set_account(key, acc)
            .expect("program data account");
    }

    /// A new SPL mint (6 decimals) with `authority` and a freeze authority (which
    /// `initialize_config` refuses).
    pub fn create_mint_with_freeze(&mut self, authority: &Pubkey, freeze: &Pubkey) -> Pubkey {
        let key = self.create_mint(authority);
        let mut acc = self.svm.get_account(&key).expect("mint");
        acc.data[46..50].copy_from_slice(&1u32.to_le_bytes());
        acc.data[50..82].copy_from_slice(freeze.as_ref());
        self.svm.set_account(key, acc).expect("mint");
        key
    }

    /// Lamports for `key`.
    pub fn airdrop(&mut self, key: &Pubkey, lamports: u64) {
        self.svm.airdrop(key, lamports).expect("airdrop");
    }

    /// A new SPL mint (6 decimals) with `authority`.
    pub fn create_mint(&mut self, authority: &Pubkey) -> Pubkey {
        let key = self.keypair("mint").pubkey();
        let rent = self.svm.minimum_balance_for_rent_exemption(82);
        let acc = Account {
            lamports: rent,
            data: mint_data(authority, u64::MAX / 2),
            owner: TOKEN_PROGRAM,
            executable: false,
            rent_epoch: 0,
        };
        self.svm.set_account(key, acc).expect("mint");
        key
    }

    /// A token account of `mint` owned by `owner` holding `amount`.
    pub fn token_account(&mut self, mint: &Pubkey, owner: &Pubkey, amount: u64) -> Pubkey {
        let key = self.keypair("token").pubkey();
        let rent = self.svm.minimum_balance_for_rent_exemption(165);
        let acc = Account {
            lamports: rent,
            data: token_account_data(mint, owner, amount),
            owner: TOKEN_PROGRAM,
            executable: false,
            rent_epoch: 0,
        };
        self.svm.set_account(key, acc).expect("token account");
        key
    }

    /// Token balance of a token account (0 when it does not exist).
    pub fn balance(&self, account: &Pubkey) -> u64 {
        self.svm
            .get_account(account)
            .filter(|a| a.data.len() >= 72 && a.lamports > 0)
            .map(|a| u64::from_le_bytes(a.data[64..72].try_into().expect("8 bytes")))
            .unwrap_or(0)
    }

    /// Whether an account exists (has lamports).
    pub fn exists(&self, key: &Pubkey) -> bool {
        self.svm.get_account(key).is_some_and(|a| a.lamports > 0)
    }

    /// Sends `ixs` paid by `payer`, signed by `payer` and `extra`.
    pub fn send(&mut self, ixs: &[Instruction], payer: &Keypair, extra: &[&Keypair]) -> Outcome {
        let mut signers = vec![payer];
        signers.extend_from_slice(extra);
        let tx = Transaction::new_signed_with_payer(
            ixs,
            Some(&payer.pubkey()),
            &signers,
            self.svm.latest_blockhash(),
        );
        let bytes = wire_size(&tx);
        let signature = tx.signatures[0].to_string();
        let res = self.svm.send_transaction(tx);
        self.svm.expire_blockhash();
        match res {
            Ok(m) => Outcome {
                ok: true,
                cu: m.compute_units_consumed,
                logs: m.logs,
                error: None,
                bytes,
                signature,
            },
            Err(e) => Outcome {
                ok: false,
                cu: e.meta.compute_units_consumed,
                logs: e.meta.logs,
                error: Some(format!("{:?}", e.err)),
                bytes,
                signature,
            },
        }
    }
}
