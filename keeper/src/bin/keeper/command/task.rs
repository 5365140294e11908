//! `keeper task`: post (one or a batch, generated inputs or the client's own), result, dispute,
//! cancel, status, list.

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use clap::Subcommand;
use compute_market_keeper::{chain::ChainExt, cli, clientdata, results::FetchPolicy};
use compute_market_protocol::job::JobSpec;
use serde_json::to_value;
use solana_signer::Signer;

use super::job::{JobArgs, Jobs};
use crate::context::{parse_address, select, Backend, Ctx};

/// Client tasks.
#[derive(Subcommand, Debug)]
// parsed once per run: the size of `Post`'s flags costs nothing
#[allow(clippy::large_enum_variant)]
pub enum TaskCmd {
    /// Posts a task; the reward moves into its escrow.
    Post {
        /// Market id.
        #[arg(long)]
        market: Option<u16>,
        /// What job.
        #[command(flatten)]
        job: JobArgs,
        /// The content store the inputs are uploaded to and fetched from
        /// (`http(s)://host:port`, e.g. a `keeper serve`); the task's input URI.
        #[arg(long)]
        store: Option<String>,
        /// Where providers and verifiers fetch the inputs from, when not --store itself (a
        /// public address in front of the store: a CDN, a gateway, a reverse proxy); it must
        /// serve `GET <uri>/c/<sha256-hex>` with the uploaded objects.
        #[arg(long, requires = "store")]
        input_uri: Option<String>,
        /// Reward in tokens (`1`, `0.5`: the stake mint's decimals read from chain), held in the
        /// task's escrow; base units with --base-units.
        #[arg(long, allow_hyphen_values = true, value_name = "TOKENS")]
        reward: String,
        /// Quorum V, the verifiers seated (0: the market's).
        #[arg(long, default_value_t = 0)]
        quorum: u8,
        /// Samples k, the tiles each verifier checks (0: the market's).
        #[arg(long, default_value_t = 0)]
        samples: u16,
        /// Preferred region code (continent·100 + zone; 0 = any). Providers rank nearer tasks first.
        #[arg(long, default_value_t = 0)]
        region: u16,
        /// Posts this many tasks, ids ID, ID+1, ... (each with its own seed unless --seed is
        /// given); prints one result per task.
        #[arg(long, default_value_t = 1)]
        count: u64,
        /// Makes this post a new task even when the same job and terms were posted before
        /// (any text: the task's id is derived from it too). Without it, the same post run
        /// again names the same task: it says that task exists, and in what state, and pays
        /// nothing.
        #[arg(long)]
        nonce: Option<String>,
        /// Posts without asking the market's providers whether any would take the job (their
        /// cards, or their declared hardware): one none would take waits until it expires or
        /// is cancelled, and its reward is refunded.
        #[arg(long)]
        anyway: bool,
        /// Read the providers' cards from loopback and private addresses (a local cluster).
        #[arg(long)]
        allow_private_urls: bool,
    },
    /// Downloads an Accepted task's result, checks every tile against the root on chain, and
    /// writes it (safetensors for matrices); nothing is written unless all of it matched. The
    /// provider's keeper is asked first, then the --from keepers, then every verifier seated
    /// on the task (its keeper keeps what it checked, PROTOCOL §8.12): tiles may come from
    /// several of them.
    Result {
        /// Task address.
        #[arg(value_parser = parse_address)]
        task: Pubkey,
        /// Output file [default: <task>.safetensors].
        #[arg(short = 'o', long = "out")]
        out: Option<std::path::PathBuf>,
        /// Only these tiles (comma-separated indices), with their proofs.
        #[arg(long, value_delimiter = ',', conflicts_with = "rows")]
        tiles: Vec<u32>,
        /// Only rows START..END of the output (END excluded; rows of C, or digests of a
        /// HashBatch): the tiles that hold them are fetched with their proofs.
        #[arg(long, value_parser = clientdata::Wanted::parse_rows)]
        rows: Option<std::ops::Range<u32>>,
        /// Other keepers that hold the result (result URLs `<base>/r/<root>`), tried after the
        /// provider's and before the verifiers'.
        #[arg(long = "from")]
        from: Vec<String>,
        /// Fetch from loopback and private addresses (a local cluster).
        #[arg(long)]
        allow_private_urls: bool,
        /// When no source serves it and the verdict is held Accepted, do not challenge its
        /// availability on chain (PROTOCOL §8.11: the challenge bonds one seat's bond, forfeit
        /// if the provider publishes the tiles; if it does not, the bond comes back, the
        /// provider is slashed and the client refunded in full). Without it, waits for the
        /// answer (up to the dispute window).
        #[arg(long)]
        no_challenge: bool,
    },
    /// Disputes an Accepted result held for its market's dispute window (PROTOCOL §8):
    /// recomputes its tiles here first (all of them, or --tile), refuses to bond when they are
    /// right, else bonds one seat's bond and argues the first wrong element until the program
    /// decides. Run again, it resumes its dispute.
    Dispute {
        /// Task address.
        #[arg(value_parser = parse_address)]
        task: Pubkey,
        /// Only these tiles (comma-separated indices) [default: every tile].
        #[arg(long = "tile", value_delimiter = ',')]
        tiles: Vec<u32>,
        /// Compute backend for the recomputation.
        #[arg(long, value_enum, default_value_t = Backend::Auto)]
        backend: Backend,
        /// Fetch from loopback and private addresses (a local cluster).
        #[arg(long)]
        allow_private_urls: bool,
    },
    /// Cancels an open task of this keypair.
    Cancel {
        /// The task: its address (as every other command names it), or its numeric id.
        task: String,
    },
    /// Shows a task: an open one with how long it has waited and why each provider leaves it
    /// (the reason its card gives, or the claim rule on its declared hardware); a closed one's
    /// outcome, read from its history.
    Status {
        /// Task address.
        #[arg(value_parser = parse_address)]
        task: Pubkey,
        /// Read the providers' cards from loopback and private addresses (a local cluster).
        #[arg(long)]
        allow_private_urls: bool,
    },
    /// Lists tasks.
    List {
        /// Only this market.
        #[arg(long)]
        market: Option<u16>,
    },
}

impl TaskCmd {
    /// Runs the command and prints its result.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        let chain = ctx.rpc();
        let v = match self {
            TaskCmd::Post {
                market: m,
                job,
                store,
                input_uri: public_uri,
                reward,
                quorum,
                samples,
                region,
                count,
                nonce,
                anyway,
                allow_private_urls,
            } => {
                // everything typed is checked before the cluster is asked anything: the keypair,
                // the amount's shape, the job's files
                let kp = ctx.keypair()?;
                let market = ctx.market(m);
                anyhow::ensure!(count >= 1, "--count must be at least 1");
                ctx.amount_shape(&reward, "--reward")?;
                let typed_reward = reward;
                let reward_cell = std::cell::OnceCell::new();
                let reward_of = || -> Result<u64> {
                    if let Some(r) = reward_cell.get() {
                        return Ok(*r);
                    }
                    let r = ctx.amount(&typed_reward, "--reward")?;
                    anyhow::ensure!(
                        r > 0,
                        "--reward is 0: a task pays its provider and verifiers; give a reward in tokens (e.g. --reward 1)"
                    );
                    Ok(*reward_cell.get_or_init(|| r))
                };
                let cards = FetchPolicy::private(allow_private_urls);
                // whether any provider would take the job, asked before uploading or paying
                // (not with --anyway)
                let ask = |job: &JobSpec| -> Result<()> {
                    if anyway {
                        return Ok(());
                    }
                    let o = cli::task_outlook(
                        chain.as_ref(),
                        market,
                        reward_of()?,
                        quorum,
                        samples,
                        job,
                        &cards,
                    );
                    cli::refuse_untaken(o, job)
                };
                let (mut input_uri, mut uploaded) = (String::new(), None);
                // the task's id, when not given: the client, what the job is and the terms (and
                // the nonce), hashed, so the same post run twice names the same task
                let me = kp.pubkey();
                let where_from = input_uri_flag(store.as_deref(), public_uri.as_deref());
                let default_id = |what: &[u8]| -> Result<u64> {
                    let terms = format!(
                        "{market} {} {quorum} {samples} {region} {where_from} {}",
                        reward_of()?,
                        nonce.as_deref().unwrap_or("")
                    );
                    let h = compute_market_protocol::hash::hashv(&[
                        b"keeper task id",
                        me.as_ref(),
                        terms.as_bytes(),
                        what,
                    ]);
                    // the top bit clear: --count ids after it never overflow
                    Ok(u64::from_le_bytes(h[..8].try_into().expect("8 bytes")) >> 1)
                };
                let jobs = job.jobs(Some(&me), count, &default_id)?;
                let reward = reward_of()?;
                cli::ensure_funds(chain.as_ref(), &kp.pubkey(), reward, count)?;
                // posted before (this run's own retry, or the same command again): said, and
                // nothing is uploaded, sent or paid for it
                let rpc = compute_market_keeper::chain::rpc::RpcChain::new(&ctx.url);
                let ids: Vec<u64> = match &jobs {
                    Jobs::Data(id, _) => vec![*id],
                    Jobs::Generated(j) => j.iter().map(|(id, _)| *id).collect(),
                };
                let mut existing = vec![];
                for &id in &ids {
                    let task = compute_market::pda::task(&me, id);
                    if let Some(state) =
                        already_posted(chain.as_ref(), &rpc, &task, ids.len() == 1)?
                    {
                        existing.push(serde_json::json!({
                            "task": task.to_string(),
                            "id": id,
                            "exists": true,
                            "status": state,
                            "note": "posted before with the same job and terms: nothing was sent or paid (give --nonce to post it again as a new task)",
                        }));
                    }
                }
                if existing.len() == ids.len() {
                    return ctx.print(&if existing.len() == 1 {
                        existing.remove(0)
                    } else {
                        serde_json::Value::Array(existing)
                    });
                }
                let skip: std::collections::HashSet<u64> =
                    existing.iter().filter_map(|e| e["id"].as_u64()).collect();
                let jobs = match jobs {
                    Jobs::Data(id, prepared) => {
                        for w in &prepared.warnings {
                            tracing::warn!("{w}");
                        }
                        let store = store.context(
                            "--input and --model need --store URL: the content store the inputs are uploaded to (keeper serve)",
                        )?;
                        ask(&prepared.job)?;
                        uploaded = Some((
                            clientdata::upload(&store, &prepared, &FetchPolicy::private(true))?,
                            prepared.warnings.clone(),
                        ));
                        input_uri = public_uri
                            .as_deref()
                            .unwrap_or(&store)
                            .trim_end_matches('/')
                            .to_string();
                        anyhow::ensure!(
                            input_uri.starts_with("http://") || input_uri.starts_with("https://"),
                            "--input-uri must be an http(s) URL, got {input_uri:?}"
                        );
                        vec![(id, prepared.job)]
                    }
                    Jobs::Generated(jobs) => {
                        ask(&jobs[0].1)?;
                        jobs.into_iter()
                            .filter(|(id, _)| !skip.contains(id))
                            .collect()
                    }
                };
                let terms = cli::TaskTerms {
                    input_uri,
                    market,
                    reward,
                    quorum,
                    samples,
                    region,
                };
                let mut posted = cli::task_post(chain.as_ref(), &kp, terms, jobs)?;
                if let Some((up, warnings)) = uploaded {
                    serde_json::json!({ "posted": posted.remove(0), "inputs": up, "warnings": warnings })
                } else if posted.len() == 1 && existing.is_empty() {
                    to_value(posted.remove(0))?
                } else {
                    let mut all = to_value(posted)?;
                    if let serde_json::Value::Array(a) = &mut all {
                        a.extend(existing);
                    }
                    all
                }
            }
            TaskCmd::Result {
                task,
                out,
                tiles,
                rows,
                from,
                allow_private_urls,
                no_challenge,
            } => {
                let rpc = compute_market_keeper::chain::rpc::RpcChain::new(&ctx.url);
                let c = clientdata::committed_over_rpc(&rpc, &task)?;
                let out = out.unwrap_or_else(|| format!("{task}.safetensors").into());
                let policy = FetchPolicy::private(allow_private_urls);
                let wanted = match (rows, tiles.is_empty()) {
                    (Some(r), _) => clientdata::Wanted::Rows(r),
                    (None, false) => clientdata::Wanted::Tiles(tiles),
                    (None, true) => clientdata::Wanted::All,
                };
                for f in &from {
                    anyhow::ensure!(
                        f.starts_with("http://") || f.starts_with("https://"),
                        "--from {f}: a source is a keeper's result URL, http(s)://host:port/r/<root>"
                    );
                }
                let sources = clientdata::result_sources(&rpc, &c, &from);
                tracing::info!(sources = ?sources, "fetching the result: the provider first, then the other keepers that hold it");
                match clientdata::task_result(&task, &c, wanted.clone(), &sources, &out, policy) {
                    Ok(r) => to_value(r)?,
                    Err(e) if format!("{e:#}").contains("no source served") => to_value(unserved(
                        &rpc,
                        ctx,
                        &task,
                        &c,
                        &wanted,
                        &out,
                        no_challenge,
                        e,
                    )?)?,
                    Err(e) => return Err(e),
                }
            }
            TaskCmd::Dispute {
                task,
                tiles,
                backend,
                allow_private_urls,
            } => {
                let policy = FetchPolicy::private(allow_private_urls);
                let backend = select(backend)?;
                let store =
                    compute_market_keeper::results::ResultStore::default().with_policy(policy);
                to_value(cli::task_dispute(
                    chain.as_ref(),
                    &ctx.keypair()?,
                    backend.as_ref(),
                    &store,
                    &task,
                    &tiles,
                )?)?
            }
            TaskCmd::Cancel { task } => {
                let kp = ctx.keypair()?;
                let id = match task.parse::<u64>() {
                    Ok(id) => id,
                    Err(_) => {
                        let address = parse_address(&task).map_err(anyhow::Error::msg)?;
                        let t = chain
                            .decoded::<compute_market::state::Task>(&address)?
                            .with_context(|| format!("no task at {address}: it was never posted, or it has closed (keeper task status {address} says how)"))?;
                        anyhow::ensure!(
                            t.client == kp.pubkey(),
                            "task {address} is {}'s, not this keypair's ({}): only its client cancels it (-k the client's keypair)",
                            t.client,
                            kp.pubkey()
                        );
                        t.task_id
                    }
                };
                to_value(cli::task_cancel(chain.as_ref(), &kp, id)?)?
            }
            TaskCmd::Status {
                task,
                allow_private_urls,
            } => {
                let rpc = compute_market_keeper::chain::rpc::RpcChain::new(&ctx.url);
                let slot = rpc
                    .slot_seconds()
                    .unwrap_or(compute_market_keeper::roles::provider::SLOT_SECONDS);
                let policy = FetchPolicy::private(allow_private_urls);
                // a closed task's history is indexed a few seconds after its close lands
                let mut tries = 0;
                loop {
                    match cli::task_report(chain.as_ref(), &task, &policy, slot, || {
                        rpc.logs_of(&task)
                    }) {
                        Ok(r) => break to_value(r)?,
                        Err(e) if tries < 10 && format!("{e}").contains("not in its history") => {
                            tries += 1;
                            std::thread::sleep(std::time::Duration::from_secs(3));
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            TaskCmd::List { market: m } => {
                to_value(cli::task_list(chain.as_ref(), m.or(ctx.file.market))?)?
            }
        };
        ctx.print(&v)
    }
}

/// No source served the result: what its provider published on chain answering availability
/// challenges; else, while the verdict is held Accepted, a challenge of the missing tiles
/// (unless `no_challenge`), followed until the provider answers or its deadline passes
/// (PROTOCOL §8.11).
#[allow(clippy::too_many_arguments)]
fn unserved(
    rpc: &compute_market_keeper::chain::rpc::RpcChain,
    ctx: &Ctx,
    task: &Pubkey,
    c: &clientdata::Committed,
    wanted: &clientdata::Wanted,
    out: &std::path::Path,
    no_challenge: bool,
    e: anyhow::Error,
) -> Result<clientdata::Retrieved> {
    use compute_market_keeper::roles::availability;
    if let Some(r) = clientdata::published_result(rpc, task, c, wanted, out)? {
        return Ok(r);
    }
    let Some(t) = rpc.task(task)? else {
        return Err(e.context("the provider is not serving the result, and the task is closed: nothing can be challenged any more"));
    };
    if !availability::challengeable(&t) {
        return Err(e.context("the provider is not serving the result; its verdict is not held Accepted, so its availability cannot be challenged"));
    }
    if no_challenge {
        return Err(e.context(format!(
            "the provider is not serving the result: challenge its availability before slot {} (run again without --no-challenge, or `keeper run --watch`)",
            t.dispute_deadline
        )));
    }
    let kp = ctx.keypair()?;
    let want = clientdata::wanted_tiles(&c.job, wanted)?;
    let named = availability::challenge_tiles(rpc, "task result", &kp, task, &t, &want)?;
    eprintln!(
        "the provider is not serving the result: challenged tiles {named:?} on chain; waiting for its answer (it must publish them within {} slots, or lose its bond)",
        t.dispute_window
    );
    let me = kp.pubkey();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(2));
        let mine: Vec<_> = availability::accounts(rpc, task)?
            .into_iter()
            .filter(|x| x.a.opener == me && x.a.named() == named.as_slice())
            .collect();
        let Some(acc) = mine.last() else {
            anyhow::bail!("the challenge of tiles {named:?} is gone from chain");
        };
        if acc.a.state != compute_market::state::AVAILABILITY_OPEN {
            break;
        }
    }
    if let Some(r) = clientdata::published_result(rpc, task, c, wanted, out)? {
        return Ok(r);
    }
    let t = rpc.task(task)?;
    if t.is_some_and(|t| t.tally().majority == compute_market_protocol::commit::VERDICT_UNSERVED) {
        anyhow::bail!("the provider did not publish the challenged tiles in time: its result is rejected as unserved, its bond slashed, and the reward comes back to the client in full at close");
    }
    let published: Vec<u32> = availability::published(rpc, task, &c.job, c.posted_slot)?
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    anyhow::bail!(
        "the provider published tiles {published:?} on chain; the result needs {} tiles: run `keeper task result` again to challenge the next ones",
        want.len()
    )
}

/// Where a post's inputs are fetched from, as its terms name it (`--input-uri`, else
/// `--store`), for the task's derived id.
fn input_uri_flag(store: Option<&str>, public: Option<&str>) -> String {
    public
        .or(store)
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string()
}

/// What an earlier post of task `task` left: its state while its account lives, else (with
/// `look_back`) its ending as its history records it; `None` when it was never posted. A
/// history counts only with this program's `TaskPosted` event in it (a stranger's transaction
/// naming the address does not).
fn already_posted(
    chain: &dyn compute_market_keeper::chain::Chain,
    rpc: &compute_market_keeper::chain::rpc::RpcChain,
    task: &Pubkey,
    look_back: bool,
) -> Result<Option<String>> {
    use compute_market::events::{TaskClosed, TaskPosted};
    use compute_market_keeper::chain::decode_events;
    if let Some(t) = chain.decoded::<compute_market::state::Task>(task)? {
        return Ok(Some(format!("{:?}", t.status)));
    }
    if !look_back {
        return Ok(None);
    }
    let logs = rpc.logs_of(task)?.concat();
    if decode_events::<TaskPosted>(&logs).is_empty() {
        return Ok(None);
    }
    Ok(Some(match decode_events::<TaskClosed>(&logs).pop() {
        Some(c) => format!("{:?} (closed)", c.status),
        None => "closed".into(),
    }))
}
