// The page: connect to a cluster, post a task on the person's own data (a drawn digit, typed
// sentences, files), watch it live with a link to every transaction, get the result verified
// tile by tile against the root on chain, and see the market. Every refusal is shown as what
// the person can do about it (src/errors.ts).

import {
  createSolanaRpc,
  createSolanaRpcSubscriptions,
  getBase16Decoder,
  getBase64Encoder,
  isAddress,
  lamports,
  type Address,
} from '@solana/kit';
import {
  assertHoldsTokens,
  AVAILABILITY_ANSWERED,
  AVAILABILITY_FAILED,
  AVAILABILITY_OPEN,
  availabilityBond,
  availabilityChallengeable,
  availabilityOf,
  availabilitySpace,
  buildTransaction,
  challengeAvailabilityInstructions,
  decodeAvailabilityAccount,
  decodeJobSpec,
  fetchMaybeTask,
  fetchResultOrPublished,
  KIND_CHALLENGE,
  maxTiles,
  ResultNotServed,
  slotLen,
  tileLen,
  VERDICT_CLAIMS_REFUTED,
  VERDICT_PROVEN_WRONG,
  VERDICT_SERVED,
  VERDICT_UNSERVED,
  verdictName,
  committedOf,
  cosine,
  fetchConfig,
  configAddress,
  getCancelTaskInstruction,
  getTaskSize,
  sendInstructions,
  embeddings,
  decodeManifest,
  fetchContent,
  Role,
  encoderJob,
  encoderTokenizer,
  chatTokenizer,
  completions,
  generateJob,
  type ChatTokenizer,
  fetchMarket,
  JobKind,
  marketAddress,
  mlpClasses,
  mlpJob,
  outcomeOf,
  encodeJobSpec,
  endpointsOf,
  parseUiAmount,
  postTaskInstructions,
  stakeTokenOf,
  taskHistory,
  toUiAmount,
  TaskStatus,
  tileCount,
  tokenAccountOf,
  tokenBalance,
  TransferError,
  uploadContent,
  watchTask,
  type AvailabilityAccount,
  type FetchedResult,
  type HistoryCache,
  type HistoryEntry,
  type KitClient,
  type ModelInfo,
  type PreparedJob,
  type Task,
  type WatchConnection,
} from '@compute-market/client';
import { keyboardPen, paintRow, Pad } from './digits';
import { describeError } from './errors';
import { measuredOf, nodesOf, perfOf, tasksOf, type Measured } from './market';
import { checkSettings, isLoopback, linkSettings, loadSession, saveSession, saveSettings, storedSettings, type Settings } from './settings';
import { clusterOf, connectWallet, GENESIS, localSigner, onWalletsChanged, solanaWallets, type Connection, type Signer, type WalletChange } from './wallet';

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const hex = (b: Uint8Array) => getBase16Decoder().decode(b);
const TERMINAL = ['Accepted', 'Rejected', 'Undecided', 'Cancelled', 'Expired'];

let settings: Settings;
let client: KitClient | null = null;
/** A new websocket client to the connected cluster: the watch re-subscribes on one each time
 * (kit pools its sockets, and a dead one can stay in the pool). */
let freshSubscriptions: (() => KitClient['rpcSubscriptions']) | undefined;
let signer: Signer | null = null;
/** The stake token (its mint and decimals, read from chain at connect): amounts are shown and
 * typed in tokens. */
let token: { mint: Address; decimals: number } | null = null;
/** The stake token's name: the symbol the market's settings give it, else "stake tokens". */
const unit = () => settings?.symbol ?? 'stake tokens';
/** An amount in base units (an event's or an account's), in tokens. */
const tk = (base: unknown) => (token ? toUiAmount(BigInt(base as bigint), token.decimals) : String(base));
let watching: AbortController | null = null;
/** The texts of the Encoder tasks posted from this page, for the similarity matrix's legend. */
const postedTexts = new Map<string, string[]>();
/** Each task's transactions read so far: a refresh reads only new ones. */
const histories = new Map<string, HistoryCache>();
const historyOf = (task: Address) => {
  if (!histories.has(task)) histories.set(task, new Map());
  return taskHistory(client!.rpc, task, histories.get(task));
};

/** Where an error is shown: beside the action that failed (the header's for connecting). */
type ErrorBox = 'error' | 'post-error' | 'watch-error' | 'market-error';

function showError(e: unknown, box: ErrorBox = 'error') {
  const el = $(box);
  el.textContent = describeError(e, settings);
  el.hidden = false;
  console.error(e);
}
function clearError(box: ErrorBox = 'error') {
  $(box).hidden = true;
}
/** Runs `f`, showing what went wrong in `box`. */
function guarded(f: () => Promise<void>, box: ErrorBox = 'error') {
  return () => {
    clearError(box);
    f().catch((e) => showError(e, box));
  };
}

function txLink(sig: string): HTMLAnchorElement {
  const a = document.createElement('a');
  a.href = (settings.explorer ?? 'https://explorer.solana.com/tx/{sig}?cluster=custom&customUrl={rpc}')
    .replace('{sig}', sig)
    .replace('{rpc}', encodeURIComponent(settings.rpc));
  a.textContent = `${sig.slice(0, 8)}…`;
  a.target = '_blank';
  a.rel = 'noopener';
  a.className = 'tx';
  return a;
}

// ---------------------------------------------------------------- connect

/** The wallet connected, when one is (not the local keypair). */
let connection: Connection | null = null;
/** What the chooser names the local keypair. */
const LOCAL = 'local';

/** The chooser: the local keypair (localnet settings only) and every Wallet Standard wallet
 * registered, kept up to date as wallets register later. */
function fillChooser(prefer?: string) {
  const sel = $<HTMLSelectElement>('wallet-choice');
  const keep = prefer ?? sel.value;
  sel.innerHTML = '';
  if (settings?.localKeypair) sel.add(new Option('Local keypair (localnet)', LOCAL));
  for (const w of solanaWallets()) sel.add(new Option(w.name, w.name));
  if (sel.options.length === 0) sel.add(new Option('No wallet found', ''));
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
}
onWalletsChanged(() => fillChooser());

/** The wallets registered, waiting up to 2 s for one named `name` (or any, for `''`) to
 * register. */
async function walletsWith(name: string): Promise<readonly ReturnType<typeof solanaWallets>[number][]> {
  const has = () => solanaWallets().some((w) => name === '' || w.name === name);
  if (!has()) {
    await new Promise<void>((resolve) => {
      const off = onWalletsChanged(() => has() && (off(), resolve()));
      setTimeout(() => (off(), resolve()), 2_000);
    });
  }
  return solanaWallets();
}

/** Forgets everything read from a cluster (perhaps another one comes next). */
function reset() {
  watching?.abort();
  histories.clear();
  postedTexts.clear();
  client = null;
  signer = null;
  token = null;
  $<HTMLButtonElement>('post-btn').disabled = true;
  $('disconnect-btn').hidden = true;
}

async function connect(choice = $<HTMLSelectElement>('wallet-choice').value) {
  settings = checkSettings({ ...settings, rpc: $<HTMLInputElement>('rpc').value.trim(), store: $<HTMLInputElement>('store').value.trim(), market: Number($<HTMLInputElement>('market-id').value) });
  saveSettings(settings);
  // nothing read from the cluster before (perhaps another one) stands for this one; nothing
  // can be posted until this connection is made (a post needs its signer and token)
  const old = connection;
  connection = null;
  reset();
  await old?.disconnect().catch(() => {});
  $('wallet').textContent = 'Connecting…';
  const { ws } = endpointsOf({ rpc: settings.rpc, ws: settings.ws });
  const fresh = () => createSolanaRpcSubscriptions(ws);
  const c: KitClient = { rpc: createSolanaRpc(settings.rpc), rpcSubscriptions: fresh() };
  const genesis = await c.rpc.getGenesisHash().send();
  let s: Signer;
  if (choice === LOCAL) {
    // the keypair signs for a local cluster only: a loopback host and no public genesis
    if (!settings.localKeypair) throw new Error('these settings hold no local keypair: choose a wallet');
    if (!isLoopback(settings.rpc) || Object.values(GENESIS).includes(genesis as any)) {
      throw new Error(`a local keypair signs on localnet only, and ${settings.rpc} is not one: use a wallet`);
    }
    s = await localSigner(settings.localKeypair);
  } else {
    // a wallet registers when its extension has loaded, perhaps after this page
    const wallets = await walletsWith(choice);
    if (wallets.length === 0) {
      throw new Error('No wallet: install a Solana wallet that supports Wallet Standard (or, on localnet, start the page with scripts/app, which hands it a local keypair)');
    }
    const wallet = wallets.find((w) => w.name === choice) ?? (choice === '' ? wallets[0] : undefined);
    if (!wallet) throw new Error(`the wallet ${choice} is not installed in this browser: choose another`);
    connection = await connectWallet(wallet, genesis, (change) => onWalletChange(wallet.name, change));
    s = connection;
    choice = wallet.name;
  }
  signer = s;
  token = await stakeTokenOf(c.rpc);
  client = c;
  freshSubscriptions = fresh;
  saveSession({ settings, wallet: choice });
  const cl = $('cluster');
  cl.innerHTML = '';
  cl.append(`Cluster: ${clusterOf(genesis)} (genesis `, code(genesis), `) at ${settings.rpc} · market ${settings.market} · content store ${settings.store}`);
  $('disconnect-btn').hidden = false;
  await showWallet();
  // a post under way keeps the button off until it ends
  offChain = false;
  $<HTMLButtonElement>('post-btn').disabled = posting;
}

/** Whether the wallet is on another network than the page's cluster (Post stays off). */
let offChain = false;

/** A change made in the wallet: another account reconnects, a disconnect stops posting until
 * the person connects again, another network until the wallet comes back. */
function onWalletChange(name: string, change: WalletChange) {
  if (change.kind === 'account') {
    guarded(() => connect(name))();
  } else if (change.kind === 'disconnected') {
    void disconnect().then(() => showError(new Error(`${name} disconnected: connect again to post`)));
  } else if (change.kind === 'chain') {
    offChain = true;
    $<HTMLButtonElement>('post-btn').disabled = true;
    showError(new Error(`${name} switched to ${change.chains.join(', ')}; this page is connected to ${settings.rpc}: switch the wallet back, or connect to that cluster`));
  } else if (offChain) {
    offChain = false;
    clearError();
    $<HTMLButtonElement>('post-btn').disabled = posting || !client;
  }
}

async function disconnect() {
  const old = connection;
  connection = null;
  reset();
  saveSession(null);
  sessionStorage.removeItem(WATCHING);
  await old?.disconnect().catch(() => {});
  $('wallet').textContent = 'Not connected.';
  $('cluster').textContent = '';
}

async function showWallet() {
  if (!client || !signer) return;
  const me = signer.signer.address;
  const sol = (await client.rpc.getBalance(me, { commitment: 'confirmed' }).send()).value;
  const tokens = await tokenBalance(client.rpc, await tokenAccountOf(me, token!.mint));
  $('wallet').innerHTML = '';
  $('wallet').append(`${signer.label}: `, code(me), ` · ${sol9(sol)} SOL · `, spanId('tokens', tk(tokens)), ` ${unit()}`);
  if (sol === lamports(0n)) throw new Error(`the wallet ${me} has no SOL to pay fees: on localnet, solana airdrop 1 ${me} -u ${settings.rpc}`);
}

/** Lamports in SOL. */
const sol9 = (l: bigint) => toUiAmount(BigInt(l), 9);

/** Fills a description list with `rows` of (term, what it is), as text (never HTML: the values
 * may come from a link). */
function describe(dl: HTMLElement, rows: [string, string][]) {
  dl.innerHTML = '';
  for (const [k, v] of rows) {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = v;
    dl.append(dt, dd);
  }
}

function code(s: string) {
  const c = document.createElement('code');
  c.textContent = s;
  return c;
}
function spanId(id: string, s: string) {
  const c = document.createElement('span');
  c.id = id;
  c.textContent = s;
  return c;
}

// ---------------------------------------------------------------- post

const pad = new Pad($<HTMLCanvasElement>('pad'));
pad.onChange = () => paintRow($<HTMLCanvasElement>('pad-8x8'), pad.row());
$('pad-clear').addEventListener('click', () => pad.clear());
keyboardPen(pad, $('pad-cursor'), (t) => ($('pad-said').textContent = t));
/** Digits kept for one task (each the row the model reads), in the order drawn. */
const batch: Int8Array[] = [];
/** Most digits in one task. */
const MAX_BATCH = 64;
function showBatch() {
  const box = $('batch');
  box.innerHTML = '';
  batch.forEach((row, i) => {
    const c = document.createElement('canvas');
    c.setAttribute('role', 'img');
    c.setAttribute('aria-label', `digit ${i + 1} of the batch`);
    paintRow(c, row);
    box.append(c);
  });
  $('batch-count').textContent = batch.length ? `${batch.length} digit${batch.length === 1 ? '' : 's'} in the batch${pad.row() ? ' (the pad’s drawing is added when you post)' : ''}` : '';
  $('batch-clear').hidden = batch.length === 0;
}
$('pad-add').addEventListener('click', () => {
  clearError('post-error');
  const row = pad.row();
  if (!row) return showError(new Error('draw a digit on the pad first'), 'post-error');
  if (batch.length >= MAX_BATCH) return showError(new Error(`a batch holds at most ${MAX_BATCH} digits: post these first`), 'post-error');
  batch.push(row);
  pad.clear();
  showBatch();
});
$('batch-clear').addEventListener('click', () => {
  batch.length = 0;
  showBatch();
});

function kind(): string {
  return (document.querySelector('input[name=kind]:checked') as HTMLInputElement).value;
}
document.querySelectorAll<HTMLInputElement>('input[name=kind]').forEach((r) =>
  r.addEventListener('change', () => {
    for (const k of ['digit', 'sentences', 'generate', 'files']) $(`kind-${k}`).hidden = kind() !== k;
  }),
);

function model(name: string): ModelInfo {
  const m = settings.models?.[name];
  if (!m) {
    throw new Error(`this page has no hosted ${name} model: publish it with "keeper model publish MODEL --store ${settings.store}" and add its line to the page's settings (models.${name})`);
  }
  return m;
}

/** A model's tokenizer file, fetched once from the content store by the address and length its
 * settings line names (no further than that length, within a minute, checked against the
 * address). */
const tokenizerFiles = new Map<string, Promise<Uint8Array>>();
function tokenizerFile({ sha256, bytes }: { sha256: string; bytes: number }): Promise<Uint8Array> {
  if (!tokenizerFiles.has(sha256)) {
    const load = fetchContent(settings.store, sha256, bytes).catch((e) => {
      throw new Error(`the model's tokenizer ${sha256.slice(0, 12)}… could not be read from the content store ${settings.store} (${(e as Error).message}): publish the model again with keeper model publish`);
    });
    load.catch(() => tokenizerFiles.delete(sha256));
    tokenizerFiles.set(sha256, load);
  }
  return tokenizerFiles.get(sha256)!;
}

/** An encoder model's tokenizer: with it the page counts tokens exactly and its posts name the
 * texts' ids, so the program referees them as it does the CLI's. `undefined` for a settings
 * line without one (an older `keeper model publish`): the job then prices at the character
 * bound and is not refereed. */
async function tokenizerOf(m: ModelInfo): Promise<ReturnType<typeof encoderTokenizer> | undefined> {
  if (m.kind !== 'encoder' || !m.tokenizer) return undefined;
  return encoderTokenizer(new TextDecoder().decode(await tokenizerFile(m.tokenizer)));
}

/** The tokenizer of the decoder a `Generate` job names, when the page's settings name that
 * model (its manifest read from the store, checked against the job's input, its model part
 * compared): the completion's text is then the one `keeper task result` prints; otherwise its
 * token ids are shown. */
async function chatOfJob(job: { input: Uint8Array }): Promise<ChatTokenizer | undefined> {
  const m = Object.values(settings.models ?? {}).find((x) => x.kind === 'decoder');
  if (!m) return undefined;
  const sha = hex(job.input);
  const manifest = decodeManifest(await fetchContent(settings.store, sha, 4096, 30_000, false));
  const model = manifest.find((p) => p.role === Role.Model);
  return model && hex(model.hash) === m.sha256 ? chatOf(m) : undefined;
}

/** A decoder model's tokenizer and chat template (its prompts are tokenized as providers do). */
async function chatOf(m: ModelInfo): Promise<ChatTokenizer> {
  if (m.kind !== 'decoder') throw new Error('not a decoder model');
  if (!m.tokenizer) throw new Error('the settings name no tokenizer for the decoder: publish it with keeper model publish and copy its line again');
  return chatTokenizer(await tokenizerFile(m.tokenizer));
}

/** The safetensors file's one I8 tensor "x" as rows. */
function batchRows(bytes: Uint8Array, features: number): Int8Array[] {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  if (bytes.length < 8) throw new Error('the batch file is not safetensors (shorter than 8 bytes)');
  const n = Number(v.getBigUint64(0, true));
  if (n > 65536 || 8 + n > bytes.length) throw new Error('the batch file is not safetensors (its header length is out of range)');
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
  const x = header['x'];
  const names = Object.keys(header).filter((k) => k !== '__metadata__');
  if (!x || names.length !== 1) throw new Error(`the batch must hold exactly one tensor named "x", it holds ${JSON.stringify(names)}`);
  if (x.dtype !== 'I8' || x.shape.length !== 2) throw new Error(`the batch's x is ${x.dtype} ${JSON.stringify(x.shape)}, it must be I8 [rows, features]`);
  const [rows, cols] = x.shape as number[];
  if (cols !== features) throw new Error(`the batch has ${cols} features a row, the model takes ${features}`);
  const [a, b] = x.data_offsets as number[];
  if (b - a !== rows * cols || 8 + n + b > bytes.length) throw new Error('the batch file is cut short');
  const data = bytes.subarray(8 + n + a, 8 + n + b);
  return Array.from({ length: rows }, (_, r) => new Int8Array(data.slice(r * cols, (r + 1) * cols).buffer));
}

async function prepare(): Promise<{ prepared: PreparedJob; model: ModelInfo; what: string; texts?: string[] }> {
  switch (kind()) {
    case 'digit': {
      const row = pad.row();
      const rows = row ? [...batch, row] : [...batch];
      if (rows.length === 0) throw new Error('draw a digit on the pad first');
      const m = model('digits');
      return { prepared: await mlpJob(m, rows), model: m, what: rows.length === 1 ? 'a drawn digit' : `${rows.length} drawn digits` };
    }
    case 'sentences': {
      const texts = $<HTMLTextAreaElement>('sentences').value.split('\n').map((t) => t.trim()).filter((t) => t !== '');
      if (texts.length === 0) throw new Error('type one sentence a line first');
      const m = model('minilm');
      return { prepared: await encoderJob(m, texts, 2, undefined, await tokenizerOf(m)), model: m, what: `${texts.length} sentences`, texts };
    }
    case 'generate': {
      const prompt = $<HTMLTextAreaElement>('prompt').value.trim();
      if (prompt === '') throw new Error('type a message first');
      const maxNew = Number($<HTMLInputElement>('max-new').value);
      const m = model('smollm2');
      const prepared = await generateJob(m, [prompt], await chatOf(m), { maxNew });
      return { prepared, model: m, what: `a message of ${prepared.job.dims[1]} tokens, answered in at most ${maxNew}`, texts: [prompt] };
    }
    default: {
      const f = $<HTMLInputElement>('file').files?.[0];
      if (!f) throw new Error('choose a file first');
      const m = model($<HTMLSelectElement>('file-model').value);
      const bytes = new Uint8Array(await f.arrayBuffer());
      if (m.kind === 'mlp') return { prepared: await mlpJob(m, batchRows(bytes, m.features)), model: m, what: f.name };
      let text: string;
      try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
      } catch {
        throw new Error(`${f.name} is not UTF-8 text`);
      }
      const texts = text.replace(/\n$/, '').split('\n');
      return { prepared: await encoderJob(m, texts, 2, undefined, await tokenizerOf(m)), model: m, what: f.name, texts };
    }
  }
}

/** The terms in the form, each checked and named when wrong. */
function readTerms() {
  const int = (id: string, what: string, lo: number, hi: number) => {
    const v = $<HTMLInputElement>(id).value.trim();
    if (!/^\d+$/.test(v) || Number(v) < lo || Number(v) > hi) throw new Error(`${what} must be a whole number from ${lo} to ${hi}, not ${JSON.stringify(v)}`);
    return Number(v);
  };
  if (!token) throw new Error('connect first');
  const reward = parseUiAmount($<HTMLInputElement>('reward').value, token.decimals);
  if (reward === 0n) throw new Error('the reward must be more than 0 tokens');
  return { reward, quorum: int('quorum', 'quorum V (0: the market\'s)', 0, 15), samples: int('samples', 'samples k (0: the market\'s)', 0, 256), region: int('region', 'the region (0: any)', 0, 65535) };
}

/** The post's stages, as the person sees them beside the button. */
function postStage(text: string, sig?: string) {
  const status = $('post-status');
  status.innerHTML = '';
  status.append(text);
  if (sig) status.append(' ', txLink(sig));
}

async function post() {
  if (!client || !signer) throw new Error('connect first');
  const terms = readTerms();
  const { prepared, model: m, what, texts } = await prepare();
  await checkTerms(terms, prepared.job);
  await assertHoldsTokens(client, signer.signer.address, terms.reward, 'the reward');
  // the model must be on the store the providers will fetch from
  postStage(`checking ${settings.store} holds the model…`);
  const head = await fetch(`${settings.store.replace(/\/$/, '')}/c/${m.sha256}`, { method: 'HEAD' });
  if (!head.ok) throw new Error(`the content store ${settings.store} does not hold the model ${m.sha256.slice(0, 12)}… (HTTP ${head.status}): publish it with keeper model publish`);
  // whoever signs is the one the summary is shown for: a wallet that changes account during
  // the post stops it
  const who = signer;
  const same = () => {
    if (signer !== who || !client) throw new Error('the wallet changed during the post: nothing was signed, post again');
  };
  const taskId = await postId(prepared.job, terms);
  const args = {
    client: signer.signer,
    market: settings.market,
    taskId,
    job: prepared.job,
    reward: terms.reward,
    quorum: terms.quorum,
    samples: terms.samples,
    region: terms.region,
    inputUri: settings.store,
  };
  postStage('estimating the fee…');
  const { task, instructions } = await postTaskInstructions(args, token!.mint);
  const built = await buildTransaction(client.rpc, signer.signer, instructions);
  await confirmSummary(terms, built, what);
  same();
  // the data goes to the store only once the person has said yes
  postStage(`uploading ${what}…`);
  for (const part of prepared.parts) await uploadContent(settings.store, part);
  await uploadContent(settings.store, prepared.manifest);
  same();
  postStage(`signing with ${who.label}…`);
  // the instructions summarized, with the limit and fee summarized (the reward was checked
  // against the balance before the summary)
  const signature = await sendInstructions(client!, who.signer, instructions, {
    computeUnits: built.computeUnits,
    priorityFee: built.priorityFee,
    onSent: (sig) => postStage('sent, waiting for the cluster to confirm it…', sig),
  });
  if (texts) postedTexts.set(task, texts);
  sessionStorage.removeItem(NONCE); // the next post is a new task
  if (kind() === 'digit') {
    batch.length = 0;
    pad.clear();
    showBatch();
  }
  const status = $('post-status');
  status.innerHTML = '';
  status.append('posted ', code(task), ' in ', txLink(signature));
  const recent = JSON.parse(localStorage.getItem('cm.recent') ?? '[]') as string[];
  localStorage.setItem('cm.recent', JSON.stringify([task, ...recent.filter((t) => t !== task)].slice(0, 20)));
  tab('watch');
  void watch(task as Address, signature);
  void showWallet().catch(() => {});
}

/** What signing this post costs, shown before the wallet is asked: the reward (held in
 * escrow), the bonds the market's nodes put up, the network fee, and the rent the task's
 * accounts hold until it closes. Resolves on "Sign", rejects on "Back". */
async function confirmSummary(terms: ReturnType<typeof readTerms>, built: { computeUnits: number; priorityFee: bigint }, what: string) {
  const rpc = client!.rpc;
  const params = (await fetchConfig(rpc, await configAddress())).data.params;
  const bps = (x: bigint, b: number) => (x * BigInt(b)) / 10_000n;
  const rent = async (bytes: number) => BigInt(await rpc.getMinimumBalanceForRentExemption(BigInt(bytes)).send());
  // the task account and its escrow (a token account, 165 bytes), both returned at close
  const held = (await rent(getTaskSize())) + (await rent(165));
  const fee = 5_000n + (BigInt(built.computeUnits) * built.priorityFee + 999_999n) / 1_000_000n;
  const rows: [string, string][] = [
    ['Posting', what],
    ['Reward', `${tk(terms.reward)} ${unit()}, held in the task's escrow: paid to the provider and verifiers if the result is accepted (less the protocol's ${params.feeBps / 100}% fee), refunded to you otherwise`],
    ['Bonds', `the provider bonds ${tk(bps(terms.reward, params.providerBondBps))} and each verifier ${tk(bps(terms.reward, params.verifierBondBps) || 1n)} of their own stake, slashed if they are wrong; nothing of yours`],
    ['Network fee', `${sol9(fee)} SOL (${built.computeUnits.toLocaleString('en')} compute units, priority fee ${built.priorityFee} micro-lamports a unit)`],
    ['Rent', `${sol9(held)} SOL for the task's accounts, returned to you when it closes`],
  ];
  await askToSign('summary', rows, 'not posted: you went back before signing (nothing was signed or paid)');
}

/** Shows `rows` in dialog `id` (its list `<id>-list`, its buttons `<id>-sign` and `<id>-back`)
 * before the wallet is asked. Resolves on "Sign", rejects with `back` on "Back" or Escape. */
async function askToSign(id: 'summary' | 'challenge-summary', rows: [string, string][], back: string) {
  describe($(`${id}-list`), rows);
  const dialog = $<HTMLDialogElement>(id);
  dialog.showModal();
  await new Promise<void>((resolve, reject) => {
    const done = (ok: boolean) => () => {
      $(`${id}-sign`).removeEventListener('click', yes);
      $(`${id}-back`).removeEventListener('click', no);
      dialog.removeEventListener('cancel', no);
      dialog.close();
      if (ok) resolve();
      else reject(new Error(back));
    };
    const yes = done(true);
    const no = done(false);
    $(`${id}-sign`).addEventListener('click', yes);
    $(`${id}-back`).addEventListener('click', no);
    dialog.addEventListener('cancel', no);
  });
}

/** The terms against the market as the chain holds it, refused by name before anything is
 * uploaded or signed: a quorum more than its verifiers with stake could never be seated (the
 * task would escalate and end Undecided), and more samples than the job has tiles cannot be
 * drawn. */
async function checkTerms(terms: ReturnType<typeof readTerms>, job: PreparedJob['job']) {
  const tiles = tileCount(job);
  if (terms.samples > tiles) throw new Error(`samples k = ${terms.samples} is more than this job's ${tiles} tile${tiles === 1 ? '' : 's'}: at most ${tiles} (0 takes the market's)`);
  if (terms.quorum === 0) return;
  const nodes = await nodesOf(client!.rpc, await marketAddress(settings.market));
  const verifiers = nodes.filter(({ data: n }) => (n.roles & 2) !== 0 && n.free + n.bonded > 0n).length;
  if (terms.quorum > verifiers) {
    throw new Error(`quorum V = ${terms.quorum} is more than market ${settings.market}'s ${verifiers} verifier${verifiers === 1 ? '' : 's'} with stake: no verdict could be reached (the task would end Undecided); at most ${verifiers}, or 0 for the market's own`);
  }
}

/** Where this tab keeps the nonce of the post it is making. */
const NONCE = 'cm.postNonce';

/** The task id of this post: the first 8 bytes of SHA-256(nonce, job spec, terms), the nonce
 * kept for the tab until a post lands. The same form posted again (a second click, a retry
 * after a lost confirmation) names the same task account, which the program creates once:
 * one task, one payment. */
async function postId(job: PreparedJob['job'], terms: ReturnType<typeof readTerms>): Promise<bigint> {
  let nonce = sessionStorage.getItem(NONCE);
  if (!nonce) {
    nonce = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, '0')).join('');
    sessionStorage.setItem(NONCE, nonce);
  }
  const what = new TextEncoder().encode(`${nonce} ${terms.reward} ${terms.quorum} ${terms.samples} ${terms.region} ${settings.market} `);
  const spec = encodeJobSpec(job);
  const all = new Uint8Array(what.length + spec.length);
  all.set(what);
  all.set(spec, what.length);
  const h = new DataView(await crypto.subtle.digest('SHA-256', all));
  return h.getBigUint64(0, true);
}

// ---------------------------------------------------------------- watch

function setStatus(s: string) {
  const el = $('status');
  el.textContent = s;
  el.className = `status ${s}`;
}

function phaseOf(t: Task, slot: bigint): string {
  const s = TaskStatus[t.status];
  const r = t.rounds[t.round];
  switch (t.status) {
    case TaskStatus.Open:
      return `waiting for a provider until slot ${t.openDeadline} (now ${slot})`;
    case TaskStatus.Claimed:
      return `claimed by node ${t.provider}, result due by slot ${t.submitDeadline}`;
    case TaskStatus.Verifying:
      return `verifying, round ${t.round}: ${r.seats}/${r.quorum} seats, ${r.committed} committed (until slot ${t.commitDeadline}), ${r.revealed} revealed (until ${t.revealDeadline}); seed ${t.seedDrawn ? 'drawn' : 'not drawn yet'}`;
    default:
      return `${s}: ${r.valid} valid, ${r.invalid} invalid, ${r.revealed - r.valid - r.invalid} unavailable of ${r.revealed} revealed${r.majority >= 3 ? ` (${verdictName(r.majority)})` : ''}`;
  }
}

/** How an availability account ended (PROTOCOL §8.11). */
const AVAILABILITY_OUTCOMES: Record<number, string> = { 1: 'answered: the tiles are on chain', 2: 'failed: nothing was published by its deadline', 3: 'moot' };

/** A revealed vote's name (PROTOCOL §3.4). */
const VOTE_NAMES: Record<number, string> = { 1: 'valid', 2: 'invalid', 3: 'unavailable' };

function describeEvent(name: string, d: Record<string, unknown>): string {
  const short = (a: unknown) => `${String(a).slice(0, 6)}…`;
  switch (name) {
    case 'TaskPosted':
      return `posted, reward ${tk(d.reward)}, quorum ${d.quorum}, samples ${d.samples}`;
    case 'TaskClaimed':
      return `claimed by ${short(d.provider)}, bond ${tk(d.bond)}`;
    case 'ResultSubmitted':
      return `result committed, root ${hex(d.result_root as Uint8Array).slice(0, 12)}…`;
    case 'SeedDrawn':
      return `seed drawn (round ${d.round}) from slot ${d.hashed_slot}`;
    case 'VerifierJoined':
      return `verifier ${short(d.verifier)} took seat ${d.seat} (holds ${tk(d.held)}; ${d.seats} seats taken), bond ${tk(d.bond)}`;
    case 'VerifierDisplaced':
      return `verifier ${short(d.displaced)} displaced from seat ${d.seat} by ${short(d.by)}`;
    case 'VoteCommitted':
      return `vote committed by ${short(d.verifier)}`;
    case 'VoteRevealed':
      return `vote revealed by ${short(d.verifier)}: ${VOTE_NAMES[d.vote as number] ?? `vote ${d.vote}`} (${d.seats} seat${d.seats === 1 ? '' : 's'})`;
    case 'TaskFinalized':
      return `finalized ${d.status}${(d.majority as number) >= 3 ? ` (${(d.majority as number) === 3 ? 'withheld' : verdictName(d.majority as number)})` : ''}: ${d.valid} valid, ${d.invalid} invalid, ${d.unavailable} unavailable; provider paid ${tk(d.provider_paid)}, slashed ${tk(d.provider_slashed)}; fee ${tk(d.fee)}`;
    case 'VoteSettled':
      return `vote of ${short(d.verifier)} settled: paid ${tk(d.paid)}, slashed ${tk(d.slashed)}`;
    case 'TaskConcluded':
      return `concluded ${d.status}${(d.majority as number) >= 3 ? ` (${verdictName(d.majority as number)})` : ''}: provider paid ${tk(d.provider_paid)}, slashed ${tk(d.provider_slashed)}; fee ${tk(d.fee)}`;
    case 'AvailabilityOpened':
      return d.kind === KIND_CHALLENGE
        ? `availability challenged by ${short(d.opener)}: tiles ${(d.tiles as number[]).join(', ')} to be published on chain by slot ${d.answer_deadline}, bond ${tk(d.bond)}`
        : `withheld verdict contested by its provider: tiles ${(d.tiles as number[]).join(', ')} (drawn from the seed) to be published on chain by slot ${d.answer_deadline}`;
    case 'AvailabilityPublished':
      return `chunk ${d.chunk} of tile ${d.tile} published on chain, proven against the root (${d.chunks_left} chunk${d.chunks_left === 1 ? '' : 's'} left)`;
    case 'AvailabilityEnded':
      return `${d.kind === KIND_CHALLENGE ? 'availability challenge' : 'contest'} ${AVAILABILITY_OUTCOMES[d.outcome as number] ?? `ended (${d.outcome})`}${d.bond_forfeit ? `, bond ${tk(d.bond_forfeit)} forfeit to the treasury` : ''}; verdict ${d.status}${(d.majority as number) >= 3 ? ` (${verdictName(d.majority as number)})` : ''}`;
    case 'AvailabilityClosed':
      return `availability account closed by ${short(d.opener)}, its rent returned`;
    case 'TaskCancelled':
      return 'cancelled by its client';
    case 'TaskExpired':
      return 'expired: no provider claimed it in time';
    case 'TaskClosed':
      return `closed ${d.status}, ${tk(d.refunded)} refunded`;
    default:
      return name;
  }
}

function renderHistory(h: HistoryEntry[]) {
  const ol = $('timeline');
  ol.innerHTML = '';
  for (const e of h) {
    for (const ev of e.events.length ? e.events : [{ name: e.failed ? 'failed transaction' : 'transaction', data: {} }]) {
      const li = document.createElement('li');
      li.dataset.event = ev.name;
      const when = e.blockTime ? new Date(Number(e.blockTime) * 1000).toLocaleTimeString() : '';
      const slot = document.createElement('span');
      slot.className = 'slot';
      slot.textContent = `slot ${e.slot} ${when} `;
      li.append(slot, `${describeEvent(ev.name, ev.data)} `, txLink(e.signature));
      ol.append(li);
    }
  }
  return outcomeOf(h);
}

/** The task this tab follows: a reload follows it again. */
const WATCHING = 'cm.watching';

/** A task's stages, each done when its event is in the history (with the transaction's
 * explorer link), the first not done the current one. */
const STAGES: { name: string; event: string; label: string }[] = [
  { name: 'posted', event: 'TaskPosted', label: 'posted' },
  { name: 'claimed', event: 'TaskClaimed', label: 'claimed by a provider' },
  { name: 'computed', event: 'ResultSubmitted', label: 'result committed' },
  { name: 'seated', event: 'VerifierJoined', label: 'verifiers seated' },
  { name: 'voted', event: 'VoteRevealed', label: 'votes revealed' },
  { name: 'verdict', event: 'TaskFinalized', label: 'verdict' },
  { name: 'verified', event: '', label: 'result fetched and checked against the root here' },
  { name: 'closed', event: 'TaskClosed', label: 'closed, rent returned' },
];

function renderStages(h: HistoryEntry[], outcome: string | undefined, verified: boolean, failed?: string) {
  const ol = $('stages');
  ol.innerHTML = '';
  const at = (event: string) => h.filter((e) => e.events.some((x) => x.name === event)).at(-1);
  const ended = outcome !== undefined && outcome !== 'Accepted';
  let current = false;
  for (const st of STAGES) {
    const li = document.createElement('li');
    li.dataset.stage = st.name;
    const entry = st.event ? at(st.event) : undefined;
    const done = st.name === 'verified' ? verified : entry !== undefined;
    if (st.name === 'verified' && ended) {
      li.className = 'pending';
      li.append(`no result to fetch (${outcome})`);
      ol.append(li);
      continue;
    }
    if (done) li.className = st.name === 'verdict' && ended ? 'failed' : 'done';
    else if (failed && st.name === 'verified') li.className = 'failed';
    else if (!current && !ended) {
      li.className = 'current';
      li.setAttribute('aria-current', 'step');
      current = true;
    } else li.className = 'pending';
    li.append(st.name === 'verdict' && outcome ? `verdict: ${outcome}` : st.label);
    if (failed && st.name === 'verified' && !done) li.append(`: ${failed}`);
    if (entry) li.append(' ', txLink(entry.signature));
    ol.append(li);
  }
}

/** The verdict in force as the history (or else the account) says: the majority of the last
 * finalize, availability end or conclusion. */
function majorityOf(h: HistoryEntry[], t?: Task): number | undefined {
  const last = h.flatMap((e) => e.events).filter((e) => ['TaskFinalized', 'AvailabilityEnded', 'TaskConcluded'].includes(e.name)).at(-1);
  return last ? Number(last.data.majority) : t?.rounds[t.round].majority;
}

/** What an ending means for the person who posted, and what they can do. */
function explain(outcome: string | undefined, t?: Task, majority?: number): string {
  if (outcome === 'Rejected' && majority === VERDICT_UNSERVED) return UNSERVED;
  if (outcome === 'Rejected' && majority === VERDICT_PROVEN_WRONG) {
    return 'Rejected (proven wrong): the seats had accepted the result, but a dispute made the program recompute one of its values, or replay one step of it, and it was wrong. The provider’s whole bond is slashed, part of it paid to you, and your reward is refunded in full; the seats that vouched for it lose their bonds.';
  }
  if (outcome === 'Accepted' && majority === VERDICT_CLAIMS_REFUTED) {
    return 'Accepted (claims refuted): the seats had rejected the result, but its provider showed the program that every value they called wrong is right. The result stands and is paid; the seats that rejected it lose their bonds.';
  }
  if (outcome === 'Accepted' && majority === VERDICT_SERVED) {
    return 'Accepted (served): the verifiers could not get the result, but its provider contested that by publishing tiles the seed drew on chain, each proven against the root. The result now stands on its content, open to disputes for a fresh window.';
  }
  switch (outcome) {
    case 'Undecided':
      return 'Undecided: the verifiers reached no majority (too few seats were filled or votes revealed in time, or they split), even after a second round. Your reward, and anything a late provider forfeited, is refunded when the task closes; the provider’s bond is released. You can post it again, perhaps with a smaller quorum.';
    case 'Expired':
      return `Expired: no provider claimed it before its open window ended${t ? ` (slot ${t.openDeadline})` : ''}. Nothing was computed; your reward is refunded at its close (anyone may close it; the market’s crank does). Post again, perhaps with a larger reward or another region.`;
    case 'Cancelled':
      return 'Cancelled: you withdrew it before a provider claimed it. Your reward is refunded at its close (anyone may close it; the market’s crank does).';
    case 'Rejected':
      return 'Rejected: the verifiers found the result wrong (or a majority could not get it). The provider’s bond is slashed, part of it paid to you, and your reward is refunded.';
    default:
      return '';
  }
}

async function watch(task: Address, postedIn?: string) {
  if (!client) return;
  watching?.abort();
  const me = new AbortController();
  watching = me;
  sessionStorage.setItem(WATCHING, task);
  clearError('watch-error');
  $('task-address').textContent = task;
  setStatus('…');
  for (const id of ['timeline', 'stages', 'result', 'phase', 'explain', 'connection', 'availability-text', 'availability-state']) $(id).innerHTML = '';
  $('cancel-btn').hidden = true;
  $('availability').hidden = true;
  $('challenge-btn').hidden = true;
  challenging = null;
  if (postedIn) renderStages([], undefined, false);
  let shown = false;
  let early = false;
  let fetchFailed: string | undefined;
  let lastTask: Task | undefined;
  let final: string | undefined;
  // one history read at a time; updates meanwhile ask for one more after it
  let reading: Promise<void> | null = null;
  let again = false;
  const readOnce = async () => {
    const h = await historyOf(task);
    if (me.signal.aborted) return;
    final = renderHistory(h);
    if (final) {
      setStatus(final);
      // the account's last state seen may be older than the ending the history shows
      if (!lastTask || !TERMINAL.includes(TaskStatus[lastTask.status])) $('phase').textContent = `${final}: see its transactions below`;
      $('connection').textContent = '';
    }
    $('explain').textContent = explain(final, lastTask, majorityOf(h, lastTask));
    renderStages(h, final, shown, fetchFailed);
    // a completion is shown as soon as its provider commits it, marked unverified; the
    // verified one replaces it at the verdict
    if (!final && !early && lastTask?.status === TaskStatus.Verifying && decodeJobSpec(new Uint8Array(lastTask.job)).kind === JobKind.Generate) {
      early = true; // once: a failure leaves the result to the verdict
      await showResult(task, me.signal, false).catch(() => ($('result').innerHTML = ''));
    }
    if (final && final !== 'Accepted' && early && !me.signal.aborted) {
      early = false;
      $('result').innerHTML = '';
      const p = document.createElement('p');
      p.id = 'not-verified';
      p.textContent = `${final}: the completion its provider committed was not verified, so it is not shown.`;
      $('result').append(p);
    }
    if (final === 'Accepted' && !shown && !fetchFailed) {
      try {
        await showResult(task, me.signal);
        shown = !me.signal.aborted;
        if (shown) $('availability').hidden = true;
      } catch (e) {
        fetchFailed = e instanceof Error ? e.message : String(e);
        if (e instanceof ResultNotServed) {
          // said in the section that offers the challenge, not as an error
          $('result').innerHTML = '';
          await offerChallenge(task, e, me.signal, retry).catch((x) => showError(x, 'watch-error'));
        } else showError(e, 'watch-error');
      }
      if (!me.signal.aborted) renderStages(h, final, shown, fetchFailed);
    }
  };
  /** Fetches the result again (the tiles are published on chain now). */
  const retry = () => {
    fetchFailed = undefined;
    void refresh().catch((e) => showError(e, 'watch-error'));
  };
  const refresh = async (): Promise<void> => {
    if (reading) {
      again = true;
      return reading;
    }
    reading = (async () => {
      do {
        again = false;
        await readOnce();
      } while (again && !me.signal.aborted);
    })().finally(() => (reading = null));
    return reading;
  };
  const onConnection = (state: WatchConnection) => {
    if (!me.signal.aborted) $('connection').textContent = state === 'live' ? '(live)' : '(connection lost: reading every 2 s while it reconnects)';
  };
  try {
    // just posted: an RPC node a little behind has no account yet (not closed)
    for await (const u of watchTask(client, task, { abortSignal: me.signal, onConnection, freshSubscriptions, awaitCreationMs: postedIn ? 30_000 : 0 })) {
      if (u.kind === 'state') {
        lastTask = u.task;
        setStatus(TaskStatus[u.task.status]);
        $('phase').textContent = phaseOf(u.task, u.slot);
        $('cancel-btn').hidden = !(u.task.status === TaskStatus.Open && signer?.signer.address === u.task.client);
      } else {
        $('cancel-btn').hidden = true;
      }
      await refresh().catch((e) => showError(e, 'watch-error'));
    }
    // closed: the history names the outcome (read again while the node indexes the last ones)
    for (let i = 0; i < 10 && !me.signal.aborted; i++) {
      await refresh().catch(() => {});
      if (final && TERMINAL.includes(final) && (final !== 'Accepted' || shown || fetchFailed) && renderedClose()) break;
      await new Promise((r) => setTimeout(r, 1500));
    }
    if (!me.signal.aborted) {
      $('connection').textContent = '';
      $('phase').textContent = final ? 'closed: its rent went back; the history below is read from its transactions' : 'no task at this address (and none in its transactions)';
    }
  } catch (e) {
    if (!me.signal.aborted) showError(e, 'watch-error');
  }
}

/** Whether the timeline shows the task's close. */
const renderedClose = () => document.querySelector('#timeline li[data-event=TaskClosed]') !== null;

$('cancel-btn').addEventListener('click', () => {
  const task = $('task-address').textContent as Address;
  const btn = $<HTMLButtonElement>('cancel-btn');
  if (btn.disabled || !client || !signer) return;
  btn.disabled = true;
  clearError('watch-error');
  sendInstructions(client, signer.signer, [getCancelTaskInstruction({ task, client: signer.signer })])
    .then(() => ($('explain').textContent = 'Cancelled: the reward is refunded when the task closes.'))
    .catch((e) => showError(e, 'watch-error'))
    .finally(() => (btn.disabled = false));
});

// ---------------------------------------------------------------- availability

const UNSERVED =
  'Rejected (unserved): the provider did not publish the tiles your availability challenge named on chain by its deadline. Its whole bond is slashed, part of it paid to you, and your reward is refunded in full when the task closes; your challenge bond is returned.';

/** The challenge this tab may open or follows, for the task watched. */
let challenging: { task: Address; tiles: number[]; follow: AbortController | null; answered: () => void } | null = null;

/** Says the provider is not serving the result (`e`, with the deadline), follows the task's
 * open availability accounts, or offers "Challenge availability" for the missing tiles while
 * the verdict is held (PROTOCOL §8.11). */
async function offerChallenge(task: Address, e: ResultNotServed, signal: AbortSignal, answered: () => void) {
  const section = $('availability');
  section.hidden = false;
  $('availability-text').textContent = `${e.message[0].toUpperCase()}${e.message.slice(1)}.`;
  const btn = $<HTMLButtonElement>('challenge-btn');
  btn.hidden = true;
  const t = await fetchMaybeTask(client!.rpc, task, { commitment: 'confirmed' });
  if (signal.aborted || !t.exists) return;
  const most = maxTiles(decodeJobSpec(new Uint8Array(t.data.job)), t.data.disputeWindow);
  challenging = { task, tiles: e.missing.slice(0, most), follow: null, answered };
  const open = (await availabilityOf(client!.rpc, task)).filter((a) => a.fields.state === AVAILABILITY_OPEN && a.fields.kind === KIND_CHALLENGE);
  if (open.length > 0) {
    void follow(task, open[0].address, signal).catch((x) => showError(x, 'watch-error'));
    return;
  }
  if (e.challengeBy === undefined || !availabilityChallengeable(t.data) || most === 0) return;
  const bond = availabilityBond(t.data);
  btn.textContent = `Challenge availability (bond ${tk(bond)} ${unit()})`;
  btn.hidden = false;
  $('availability-state').textContent = `A challenge names tiles ${challenging.tiles.join(', ')}; the provider must publish them on chain within the market's dispute window or lose its bond.${signer ? '' : ' Connect a wallet to challenge.'}`;
  btn.disabled = false;
}

$('challenge-btn').addEventListener('click', () => {
  const btn = $<HTMLButtonElement>('challenge-btn');
  if (btn.disabled || !client || !challenging) return;
  clearError('watch-error');
  if (!signer) return showError(new Error('connect a wallet first: the challenger signs and bonds'), 'watch-error');
  btn.disabled = true;
  const { task } = challenging;
  challenge()
    .then((account) => {
      btn.hidden = true;
      if (watching) void follow(task, account, watching.signal).catch((x) => showError(x, 'watch-error'));
    })
    .catch((e) => showError(e, 'watch-error'))
    .finally(() => (btn.disabled = false));
});

/** Opens the challenge: the bond checked against the wallet first, then what signing costs
 * (the bond, the fee, the account's rent) shown before the wallet is asked. */
async function challenge(): Promise<Address> {
  const who = signer!;
  const { task, tiles } = challenging!;
  const t = (await fetchMaybeTask(client!.rpc, task, { commitment: 'confirmed' }));
  if (!t.exists || !availabilityChallengeable(t.data)) throw new Error('the task no longer has an Accepted verdict held for disputes: there is nothing to challenge');
  const bond = availabilityBond(t.data);
  await assertHoldsTokens(client!, who.signer.address, bond, 'the availability bond');
  const source = await tokenAccountOf(who.signer.address, token!.mint);
  const { availability, instructions } = await challengeAvailabilityInstructions({ challenger: who.signer, task, tiles, source }, t.data);
  const built = await buildTransaction(client!.rpc, who.signer, instructions);
  const job = decodeJobSpec(new Uint8Array(t.data.job));
  const rent = BigInt(await client!.rpc.getMinimumBalanceForRentExemption(BigInt(availabilitySpace(tiles.length, slotLen(tileLen(job))))).send());
  const fee = 5_000n + (BigInt(built.computeUnits) * built.priorityFee + 999_999n) / 1_000_000n;
  await askToSign(
    'challenge-summary',
    [
      ['Challenging', `the availability of task ${task}'s result: its provider must publish tiles ${tiles.join(', ')} on chain, each proven against the root, within ${t.data.disputeWindow} slots`],
      ['Bond', `${tk(bond)} ${unit()} from your stake-token account: returned if the provider does not publish them (it is then slashed and your reward refunded in full); forfeit to the treasury if it does`],
      ['Network fee', `${sol9(fee)} SOL (${built.computeUnits.toLocaleString('en')} compute units, priority fee ${built.priorityFee} micro-lamports a unit)`],
      ['Rent', `${sol9(rent)} SOL for the challenge's account (the published tiles), returned to you when you close it after it ends`],
    ],
    'not challenged: you went back before signing (nothing was signed or paid)',
  );
  if (signer !== who) throw new Error('the wallet changed before signing: nothing was signed, challenge again');
  $('availability-state').textContent = `signing with ${who.label}…`;
  await sendInstructions(client!, who.signer, instructions, {
    computeUnits: built.computeUnits,
    priorityFee: built.priorityFee,
    onSent: (sig) => {
      const st = $('availability-state');
      st.innerHTML = '';
      st.append('challenge sent, waiting for the cluster to confirm it… ', txLink(sig));
    },
  });
  return availability;
}

/** Follows availability account `account` every 2 s until it ends: answered, the result is
 * fetched again (its tiles now on chain); failed, the provider was slashed and the reward is
 * refunded in full; moot, nothing changed. */
async function follow(task: Address, account: Address, signal: AbortSignal) {
  if (challenging?.follow) challenging.follow.abort();
  const me = new AbortController();
  signal.addEventListener('abort', () => me.abort());
  if (challenging) challenging.follow = me;
  const state = $('availability-state');
  $('availability').hidden = false;
  while (!me.signal.aborted) {
    const [{ value }, slot] = await Promise.all([
      client!.rpc.getAccountInfo(account, { commitment: 'confirmed', encoding: 'base64' }).send(),
      client!.rpc.getSlot({ commitment: 'confirmed' }).send(),
    ]);
    if (me.signal.aborted) return;
    if (!value) {
      state.textContent = 'The challenge has ended and its account is closed: the task’s transactions below say how.';
      return;
    }
    const a: AvailabilityAccount = decodeAvailabilityAccount(account, new Uint8Array(getBase64Encoder().encode(String(value.data[0]))));
    const f = a.fields;
    if (f.state === AVAILABILITY_OPEN) {
      state.textContent =
        slot <= f.answerDeadline
          ? `Challenge open: the provider must publish tiles ${f.tiles.slice(0, f.tileCount).join(', ')} on chain by slot ${f.answerDeadline} (now ${slot}); ${f.chunksLeft} chunk${f.chunksLeft === 1 ? '' : 's'} of 1 KiB left to prove.`
          : `The deadline (slot ${f.answerDeadline}) has passed unanswered: once the challenge is timed out (anyone may; the market’s crank does), the provider is slashed and your reward refunded in full.`;
    } else if (f.state === AVAILABILITY_ANSWERED) {
      state.textContent = 'Answered: the provider published the tiles on chain, each chunk proven against the root by the program (your bond went to the treasury). Fetching the result with them…';
      $('challenge-btn').hidden = true;
      challenging?.answered();
      return;
    } else if (f.state === AVAILABILITY_FAILED) {
      state.textContent = `Failed: the provider did not publish the tiles by slot ${f.answerDeadline}. The verdict is now unserved (Rejected): the provider’s whole bond is slashed, part of it paid to you, your reward is refunded in full when the task closes, and your challenge bond is returned.`;
      $('challenge-btn').hidden = true;
      return;
    } else {
      state.textContent = 'Moot: the result no longer stands Accepted (a dispute proved it wrong, or another challenge failed first); this challenge changed nothing and its bond is returned.';
      return;
    }
    await new Promise((r) => setTimeout(r, 2000));
  }
}

// ---------------------------------------------------------------- result

/** `f`, tried again after 1, 2 and 4 s when it fails for a reason other than a result that
 * does not verify (that is an answer, not a hiccup). */
async function retried<T>(f: () => Promise<T>, what: string, signal: AbortSignal): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await f();
    } catch (e) {
      if (i === 3 || e instanceof TransferError || signal.aborted) throw e;
      $('result').textContent = `${what} failed (${(e as Error).message}); trying again (${i + 2} of 4)…`;
      await new Promise((r) => setTimeout(r, 1000 << i));
    }
  }
}

/** The committed result, fetched and checked against the root; `verified`: the verdict is
 * Accepted (else the provider's commitment alone, shown as such). */
async function showResult(task: Address, signal: AbortSignal, verified = true) {
  if (!histories.has(task)) histories.set(task, new Map());
  const box = $('result');
  box.innerHTML = '<p>fetching the result…</p>';
  const c = await retried(() => committedOf(client!.rpc, task, histories.get(task), { pending: !verified }), 'reading the committed result', signal);
  // a provider's address, read from chain: private hosts only when the cluster is local; the
  // tiles it does not serve are taken from those published on chain under a challenge
  const from = new URL(c.resultUri).host;
  const fetched: FetchedResult = await retried(
    () => fetchResultOrPublished(client!.rpc, task, c, { allowPrivate: isLoopback(settings.rpc) }),
    `fetching the result from ${from}`,
    signal,
  );
  const tiles = fetched.tiles;
  if (signal.aborted) return;
  box.innerHTML = '';
  const p = document.createElement('p');
  p.id = 'verified';
  const count = tileCount(c.job);
  const source =
    fetched.published.length === 0
      ? `served by ${from}`
      : fetched.published.length === count
        ? 'published on chain by the provider under an availability challenge, each chunk proven by the program'
        : `served by ${from}; tiles ${fetched.published.join(', ')} published on chain under an availability challenge`;
  p.textContent = verified
    ? `Verified: all ${count} tiles (${source}) hash to the root ${hex(c.root).slice(0, 16)}… committed on chain.`
    : `Not yet verified: the provider committed this result (${source}, hashing to the root ${hex(c.root).slice(0, 16)}… on chain); the verifiers are checking it.`;
  if (!verified) p.id = 'unverified';
  box.append(p);
  if (c.job.kind === JobKind.Mlp) {
    const rows = mlpClasses(c.job, tiles);
    if (rows.length === 1) {
      const big = document.createElement('div');
      big.id = 'result-class';
      big.textContent = String(rows[0].class);
      box.append('The market read it as ', big);
    } else {
      box.append(table(['row', 'class'], rows.map((r, i) => [String(i + 1), String(r.class)]), 'result-classes'));
    }
  } else if (c.job.kind === JobKind.Encoder) {
    const e = embeddings(c.job, tiles);
    const t = table(
      ['', ...e.map((_, i) => `#${i + 1}`)],
      e.map((a, i) => [`#${i + 1}`, ...e.map((b) => cosine(a, b).toFixed(3))]),
      'similarity',
    );
    t.classList.add('sim');
    t.querySelectorAll('td').forEach((td) => {
      const v = Number(td.textContent);
      if (Number.isNaN(v)) return;
      const [bg, fg] = shade(Math.max(0, v));
      td.style.background = bg;
      td.style.color = fg;
    });
    box.append('Cosine similarity of the verified embeddings:', t);
    const texts = postedTexts.get(task);
    if (texts?.length === e.length) {
      const ol = document.createElement('ol');
      ol.id = 'texts';
      texts.forEach((x) => (ol.appendChild(document.createElement('li')).textContent = x));
      box.append(ol);
    }
  } else if (c.job.kind === JobKind.Generate) {
    const asked = postedTexts.get(task);
    const chat = await chatOfJob(c.job).catch(() => undefined);
    if (signal.aborted) return;
    completions(c.job, tiles).forEach((ids, i) => {
      if (asked?.[i]) {
        const q = document.createElement('p');
        q.className = 'asked';
        q.textContent = `You: ${asked[i]}`;
        box.append(q);
      }
      const a = document.createElement('p');
      a.id = i === 0 ? 'completion' : `completion-${i + 1}`;
      a.className = verified ? 'completion' : 'completion unverified';
      // the end-of-turn token and the template's specials dropped, as keeper task result prints it
      a.textContent = chat ? chat.tokenizer.decode(ids, { skip_special_tokens: true }) : `token ids ${ids.join(' ')}`;
      const how = document.createElement('p');
      how.className = 'hint';
      const ending = ids.length < c.job.dims[2] || (chat && ids.at(-1) === chat.eos) ? 'finished' : `cut at the ${c.job.dims[2]}-token limit`;
      how.textContent = verified
        ? `${ids.length} tokens, ${ending}; verified${c.job.slicesLen ? ' (the job names its slices: in a market whose dispute window holds a game, one honest party overturns a wrong token, PROTOCOL §8.13)' : ' and final (not refereed by the program: a majority of seats decided)'}.`
        : `${ids.length} tokens, ${ending}; unverified: the verifiers are checking it.`;
      box.append(a, how);
    });
  }
  if (!verified) return;
  const all = new Uint8Array(tiles.reduce((n, t) => n + t.length, 0));
  tiles.reduce((at, t) => (all.set(t, at), at + t.length), 0);
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([all]));
  a.download = `${task}.bin`;
  a.id = 'download';
  a.textContent = `Download the verified output (${all.length} bytes)`;
  box.append(document.createElement('br'), a);
}

/** A cell's background for a similarity `a` (0‥1: white to the page's blue) and the text
 * colour, black or white, whichever contrasts more with it (WCAG's relative luminance). */
function shade(a: number): [string, string] {
  const rgb = [53, 88, 216].map((c) => Math.round(255 + (c - 255) * a));
  const lin = (c: number) => ((c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
  const l = 0.2126 * lin(rgb[0]) + 0.7152 * lin(rgb[1]) + 0.0722 * lin(rgb[2]);
  return [`rgb(${rgb.join(', ')})`, (l + 0.05) / 0.05 >= 1.05 / (l + 0.05) ? '#000' : '#fff'];
}

function table(head: string[], rows: string[][], id: string): HTMLTableElement {
  const t = document.createElement('table');
  t.id = id;
  const tr = t.insertRow();
  head.forEach((h) => {
    const th = document.createElement('th');
    th.textContent = h;
    tr.append(th);
  });
  rows.forEach((r) => {
    const row = t.insertRow();
    r.forEach((v) => (row.insertCell().textContent = v));
  });
  return t;
}

// ---------------------------------------------------------------- market

async function showMarket() {
  if (!client) throw new Error('connect first');
  const market = await marketAddress(settings.market);
  const m = (await fetchMarket(client.rpc, market)).data;
  const name = new TextDecoder().decode(m.name).replace(/\0+$/, '');
  $('market-summary').textContent = `market ${settings.market} "${name}": ${m.providers} providers, ${m.verifiers} verifiers, verifier stake ${m.verifierStake}; quorum ${m.quorum}, samples ${m.samples}`;
  const nodes = await nodesOf(client.rpc, market);
  const role = (r: number) => [(r & 1) && 'provider', (r & 2) && 'verifier'].filter(Boolean).join('+');
  $('nodes').replaceWith(
    table(
      ['node', 'roles', 'stake', 'bonded', 'GFLOPS', 'memory GB', 'region', 'completed', 'verified', 'slashed'],
      nodes.map(({ address, data: n }) => [
        `${address.slice(0, 8)}…`,
        role(n.roles),
        String(n.free + n.bonded),
        String(n.bonded),
        String(n.hardware.gflops),
        String(n.hardware.memoryGb),
        String(n.hardware.region),
        String(n.tasksCompleted),
        String(n.verifications),
        String(n.timesSlashed),
      ]),
      'nodes',
    ),
  );
  const live = await tasksOf(client.rpc, market);
  const recent = (JSON.parse(localStorage.getItem('cm.recent') ?? '[]') as Address[]).slice(0, 10);
  const measured: Measured[] = [];
  const rows: string[][] = live.map(({ address, data: t }) => [`${address.slice(0, 8)}…`, TaskStatus[t.status], tk(t.reward), String(t.tileCount)]);
  for (const addr of recent.filter((a) => !live.some((l) => l.address === a))) {
    const h = await historyOf(addr);
    const mm = measuredOf(h);
    if (mm) measured.push(mm);
    rows.push([`${addr.slice(0, 8)}…`, `${outcomeOf(h) ?? '?'} (closed)`, '', '']);
  }
  $('tasks').replaceWith(table(['task', 'status', 'reward', 'tiles'], rows, 'tasks'));
  const perf = perfOf(
    nodes.map((n) => n.data),
    measured,
  );
  $('perf').textContent = perf
    ? `P = N·G·E/(1+L/C) with N = ${perf.n}, G = ${perf.g.toExponential(3)} work/s, E = ${perf.e.toFixed(2)}, L = ${perf.l.toFixed(1)} s, C = ${perf.c.toFixed(2)} s ⇒ P = ${perf.p.toExponential(3)} work/s (${perf.basis})`
    : 'P = N·G·E/(1+L/C): no finished task measured yet (post one, then refresh)';
}

// ---------------------------------------------------------------- tabs and start

const TABS = ['post', 'watch', 'market'];

/** Shows one tab (WAI-ARIA tabs: the selected one focusable, the others by arrow keys). */
function tab(name: string, focus = false) {
  document.querySelectorAll<HTMLButtonElement>('nav [role=tab]').forEach((b) => {
    const on = b.dataset.tab === name;
    b.classList.toggle('active', on);
    b.setAttribute('aria-selected', String(on));
    b.tabIndex = on ? 0 : -1;
    if (on && focus) b.focus();
  });
  for (const t of TABS) $(`tab-${t}`).hidden = t !== name;
  if (name === 'market' && client) guarded(showMarket, 'market-error')();
}
document.querySelectorAll<HTMLButtonElement>('nav [role=tab]').forEach((b) => {
  b.addEventListener('click', () => tab(b.dataset.tab!));
  b.addEventListener('keydown', (e) => {
    const i = TABS.indexOf(b.dataset.tab!);
    const to = { ArrowRight: i + 1, ArrowLeft: i - 1 + TABS.length, Home: 0, End: TABS.length - 1 }[e.key];
    if (to === undefined) return;
    e.preventDefault();
    tab(TABS[to % TABS.length], true);
  });
});
$('market-refresh').addEventListener('click', guarded(showMarket, 'market-error'));
$('open-task').addEventListener('submit', (e) => {
  e.preventDefault();
  guarded(async () => {
    if (!client) throw new Error('connect first');
    const a = $<HTMLInputElement>('open-address').value.trim();
    if (!isAddress(a)) throw new Error(`${JSON.stringify(a)} is not a task address (base58, 32 bytes)`);
    void watch(a as Address);
  }, 'watch-error')();
});
/** Whether a post is under way (a reconnect meanwhile leaves Post off). */
let posting = false;
$('post-btn').addEventListener('click', () => {
  // disabled before anything awaits: a second click while this post is in flight does nothing
  const btn = $<HTMLButtonElement>('post-btn');
  if (btn.disabled || posting) return;
  btn.disabled = true;
  posting = true;
  clearError('post-error');
  post()
    .catch((e) => {
      $('post-status').textContent = 'not posted';
      showError(e, 'post-error');
    })
    .finally(() => {
      posting = false;
      btn.disabled = !client || offChain;
    });
});
$('connect').addEventListener('submit', (e) => {
  e.preventDefault();
  guarded(() => connect())();
});
$('disconnect-btn').addEventListener('click', guarded(disconnect));

/** Puts `s` in force: the form's fields, the chooser, the models. */
function useSettings(s: Settings, wallet?: string) {
  settings = s;
  $<HTMLInputElement>('rpc').value = s.rpc;
  $<HTMLInputElement>('store').value = s.store;
  $<HTMLInputElement>('market-id').value = String(s.market);
  $('reward-unit').textContent = unit();
  const sel = $<HTMLSelectElement>('file-model');
  sel.innerHTML = '';
  for (const name of Object.keys(s.models ?? {})) sel.add(new Option(`${name} (${s.models![name].kind})`, name));
  fillChooser(wallet ?? (s.localKeypair ? LOCAL : undefined));
}

/** A link's settings, shown; used once the person says so. */
function offerLink(s: Settings) {
  const rows: [string, string][] = [
    ['Cluster', s.rpc],
    ['Websocket', endpointsOf({ rpc: s.rpc, ws: s.ws }).ws],
    ['Market', String(s.market)],
    ['Content store', s.store],
    ['Models', Object.entries(s.models ?? {}).map(([n, m]) => `${n} ${m.sha256.slice(0, 12)}…`).join(', ') || 'none'],
    ['Signs with', s.localKeypair ? 'a local keypair the link carries (localnet only)' : 'your wallet'],
    ['Token symbol', s.symbol ?? '(none: "stake tokens")'],
    ['Explorer links', s.explorer ?? 'explorer.solana.com (custom cluster)'],
    ['From', s.from ?? 'the link itself (#config=)'],
  ];
  describe($('link-list'), rows);
  $('link-settings').hidden = false;
  $('link-use').onclick = () => {
    $('link-settings').hidden = true;
    useSettings(s, $<HTMLSelectElement>('wallet-choice').value || undefined);
    guarded(() => connect())();
  };
  $('link-ignore').onclick = () => {
    $('link-settings').hidden = true;
    useSettings(storedSettings());
  };
}

async function start() {
  const link = await linkSettings();
  const session = loadSession();
  if (link) {
    // a link in the address asks first, even in a connected tab
    useSettings(storedSettings());
    offerLink(link);
    return;
  }
  if (session) {
    // a reload: the tab's connection and the task it followed, again
    useSettings(session.settings, session.wallet);
    await connect(session.wallet);
    const task = sessionStorage.getItem(WATCHING);
    if (task && isAddress(task)) {
      tab('watch');
      void watch(task as Address);
    }
    return;
  }
  useSettings(storedSettings());
}
start().catch((e) => showError(e));
