// The page: connect to a cluster, post a task on the person's own data (a drawn digit, typed
// sentences, files), watch it live with a link to every transaction, get the result verified
// tile by tile against the root on chain, and see the market. Every refusal is shown as what
// the person can do about it (src/errors.ts).

import '@picocss/pico/css/pico.min.css';
import './style.css';
import {
  createSolanaRpc,
  createSolanaRpcSubscriptions,
  getBase16Decoder,
  isSignature,
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
  sendSigned,
  signInstructions,
  SignRejected,
  fetchMaybeMarket,
  marketsOf,
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
import { measuredOf, nodesOf, perfOf, SLOT_SECONDS, tasksOf, type Measured } from './market';
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
/** The stake token's name: the symbol the page's settings give it, else "tokens". */
const unit = () => settings?.symbol ?? 'tokens';
/** An amount in base units (an event's or an account's), in tokens (never shown in base units:
 * before the decimals are read, nothing is shown). */
const tk = (base: unknown) => (token ? toUiAmount(BigInt(base as bigint), token.decimals) : '…');
/** An amount in base units, in tokens with the symbol: how every amount is shown. */
const amt = (base: unknown) => `${tk(base)} ${unit()}`;
let watching: AbortController | null = null;
/** The texts of the Encoder tasks posted from this page, for the similarity matrix's legend. */
const postedTexts = new Map<string, string[]>();
/** The rows of the digits tasks posted from this page: each class is shown beside its picture. */
const postedRows = new Map<string, Int8Array[]>();
/** Each task's transactions read so far: a refresh reads only new ones. */
const histories = new Map<string, HistoryCache>();
const historyOf = (task: Address) => {
  if (!histories.has(task)) histories.set(task, new Map());
  return taskHistory(client!.rpc, task, histories.get(task));
};

/** Where an error is shown: beside the action that failed (the header's for connecting). */
type ErrorBox = 'error' | 'post-error' | 'watch-error' | 'market-error' | 'mine-error';

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

/** An explorer link for a transaction (`tx`) or an account (`address`): the settings'
 * template (`{sig}`, `{rpc}`; an account's link is its `/address/` page), else Solana
 * Explorer on this cluster. */
function explorer(kind: 'tx' | 'address', id: string): string {
  const template = settings.explorer ?? 'https://explorer.solana.com/tx/{sig}?cluster=custom&customUrl={rpc}';
  const t = kind === 'tx' ? template : template.replace('/tx/{sig}', '/address/{sig}');
  return t.replace('{sig}', () => id).replace('{rpc}', () => encodeURIComponent(settings.rpc));
}

function link(href: string, text: string, className: string): HTMLAnchorElement {
  const a = document.createElement('a');
  a.href = href;
  a.textContent = text;
  a.target = '_blank';
  a.rel = 'noopener';
  a.className = className;
  return a;
}

/** A transaction's explorer link, by its signature's first characters. */
const txLink = (sig: string) => link(explorer('tx', sig), `${sig.slice(0, 8)}…`, 'tx');
/** An account's explorer link, by its address's first and last characters. */
const addrLink = (address: string) => link(explorer('address', address), `${address.slice(0, 4)}…${address.slice(-4)}`, 'account');

/** A short notice at the corner (pending, confirmed, failed), gone after `ms`. */
function toast(text: string, kind: 'info' | 'ok' | 'bad' = 'info', sig?: string, ms = 8_000) {
  const t = document.createElement('div');
  t.className = `toast ${kind}`;
  t.append(text);
  if (sig) t.append(' ', txLink(sig));
  const box = $('toasts');
  box.append(t);
  while (box.childElementCount > 2) box.firstElementChild!.remove();
  setTimeout(() => t.remove(), Math.min(ms, 6_000));
}

// ---------------------------------------------------------------- connect

/** The wallet connected, when one is (not the local keypair). */
let connection: Connection | null = null;
/** What the chooser names the local keypair. */
const LOCAL = 'local';

/** The chooser: the local keypair (localnet settings only) and every Wallet Standard wallet
 * registered, each with its icon, kept up to date as wallets register later. */
function fillChooser() {
  const list = $('wallet-list');
  list.innerHTML = '';
  const add = (value: string, name: string, icon?: string) => {
    const li = document.createElement('li');
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'secondary outline';
    b.dataset.wallet = value;
    if (icon?.startsWith('data:image/')) {
      const img = document.createElement('img');
      img.src = icon;
      img.alt = '';
      b.append(img);
    }
    b.append(name);
    b.addEventListener('click', () => {
      $<HTMLDialogElement>('wallet-dialog').close();
      guarded(() => connect(value))();
    });
    li.append(b);
    list.append(li);
  };
  if (settings?.localKeypair) add(LOCAL, 'Local keypair (localnet)');
  for (const w of solanaWallets()) add(w.name, w.name, w.icon);
  $('wallet-none').hidden = list.childElementCount > 0;
}
onWalletsChanged(() => fillChooser());
$('connect-btn').addEventListener('click', () => {
  fillChooser();
  $<HTMLDialogElement>('wallet-dialog').showModal();
});
$('wallet-dialog-close').addEventListener('click', () => $<HTMLDialogElement>('wallet-dialog').close());
$('settings-btn').addEventListener('click', () => $<HTMLDialogElement>('settings-dialog').showModal());
$('settings-close').addEventListener('click', () => $<HTMLDialogElement>('settings-dialog').close());
$('copy-btn').addEventListener('click', () => {
  if (!signer) return;
  void navigator.clipboard
    .writeText(signer.signer.address)
    .then(() => toast('Address copied', 'ok', undefined, 2_000))
    .catch(() => toast(`Copy it by hand: ${signer?.signer.address}`, 'bad'));
});

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
  health?.abort();
  health = null;
  quiet = null;
  $('rpc-banner').hidden = true;
  histories.clear();
  postedTexts.clear();
  postedRows.clear();
  client = null;
  signer = null;
  token = null;
  offChain = false;
  $('faucet-said').textContent = '';
  $('disconnect-btn').hidden = true;
  $('account').hidden = true;
  $('funds').hidden = true;
  $('network').hidden = true;
  $('connect-btn').hidden = false;
  updatePost();
}

/** `p`, or a rejection after `ms` naming what did not answer. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(what)), ms))]);
}

/** The cluster's name for the badge and the faucet: localnet, devnet, testnet, mainnet. */
let network = '';

async function connect(choice = LOCAL) {
  settings = checkSettings({ ...settings, rpc: $<HTMLInputElement>('rpc').value.trim(), store: $<HTMLInputElement>('store').value.trim(), market: Number($<HTMLInputElement>('market-id').value) });
  saveSettings(settings);
  // nothing read from the cluster before (perhaps another one) stands for this one; nothing
  // can be posted until this connection is made (a post needs its signer and token)
  const old = connection;
  connection = null;
  reset();
  await old?.disconnect().catch(() => {});
  $('wallet').textContent = 'Connecting…';
  try {
    await connectTo(choice);
  } catch (e) {
    // never "Connecting…" above an error, nor the last connection's views
    if (!client) {
      $('wallet').textContent = 'Not connected.';
      $('cluster').textContent = '';
      for (const id of ['market-summary', 'perf', 'nodes', 'tasks', 'mine', 'post-status']) $(id).replaceChildren();
      $('mine-said').textContent = 'Connect a wallet to see its tasks.';
    }
    throw e;
  }
}

async function connectTo(choice: string) {
  const { ws } = endpointsOf({ rpc: settings.rpc, ws: settings.ws });
  const fresh = () => createSolanaRpcSubscriptions(ws);
  const c: KitClient = { rpc: createSolanaRpc(settings.rpc), rpcSubscriptions: fresh() };
  const dead = `The cluster at ${settings.rpc} does not answer: check its address in Settings, or start it (scripts/app starts a local one)`;
  const genesis = await within(c.rpc.getGenesisHash().send(), 8_000, dead).catch((e) => {
    throw new Error(e instanceof Error && e.message === dead ? dead : `${dead}.`);
  });
  // the market named, read before anything else: a market that does not exist is said now
  const market = await fetchMaybeMarket(c.rpc, await marketAddress(settings.market), { commitment: 'confirmed' }).catch(() => null);
  if (!market?.exists) {
    const ids = await marketsOf(c.rpc)
      .then((all) => all.map((m) => m.data.id))
      .catch(() => [] as number[]);
    const have = ids.length === 0 ? 'it has no market yet' : ids.length === 1 ? `its one market is ${ids[0]}` : `its markets are ${ids.join(', ')}`;
    throw new Error(`Market ${settings.market} does not exist on the cluster at ${settings.rpc} (${have}): choose one that does in Settings`);
  }
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
  chosen = choice;
  network = clusterOf(genesis);
  const badge = $('network');
  badge.textContent = network;
  badge.className = `badge ${network}`;
  badge.hidden = false;
  const cl = $('cluster');
  cl.innerHTML = '';
  cl.append(`${network} (genesis `, code(genesis), `) at ${settings.rpc} · market ${settings.market} · content store ${settings.store} · stake token `, addrLink(token.mint));
  $('disconnect-btn').hidden = false;
  $('connect-btn').hidden = true;
  watchHealth(c);
  offChain = false;
  try {
    await showWallet();
  } finally {
    updatePost();
    // focus where the Connect button was
    $('disconnect-btn').focus();
  }
}

/** Whether the wallet is on another network than the page's cluster (Post stays off). */
let offChain = false;

/** Post on or off, and why not in words beside it. */
function updatePost() {
  const why = !client || !signer
    ? 'Connect a wallet to post.'
    : quiet
      ? `Post is held: ${quiet}`
      : offChain
        ? 'Post is held: the wallet is on another network than this page.'
        : posting
          ? 'Posting…'
          : '';
  $<HTMLButtonElement>('post-btn').disabled = why !== '';
  $('post-held').textContent = why;
  $('post-held').hidden = why === '' || posting;
}

// ---------------------------------------------------------------- the cluster's health

/** What is wrong with the cluster now (`null`: it answers and makes slots). */
let quiet: string | null = null;
let health: AbortController | null = null;
/** Quiet for this long (no answer, or no new slot) and the page says so. */
const QUIET_MS = 3_000;

/** Asks the cluster for its slot every second, each ask bounded: when it has not answered, or
 * its slot has not moved, for {@link QUIET_MS} since an ask went out, a banner says so and Post
 * is held until it answers with a new slot again. A frozen validator accepts connections and
 * answers nothing, and its websocket goes silent without closing, so only asking tells. A
 * hidden tab is not asked (browsers throttle its timers), and the count starts again when it
 * is shown. */
function watchHealth(c: KitClient) {
  health?.abort();
  const me = new AbortController();
  health = me;
  let lastSlot = -1n;
  /** When the cluster last showed it was alive: a new slot, or (at the start, after a hidden
   * spell) when the page began asking. */
  let alive = Date.now();
  let asking = false;
  const banner = (text: string | null) => {
    const b = $('rpc-banner');
    // said once per change: a screen reader announces an alert each time its text changes
    if (text === null) b.hidden = true;
    else if (b.hidden || b.dataset.rpc !== settings.rpc) {
      b.dataset.rpc = settings.rpc;
      b.textContent = text;
      b.hidden = false;
    }
  };
  const tick = () => {
    if (me.signal.aborted) return;
    if (document.hidden) {
      alive = Date.now();
      return;
    }
    if (Date.now() - alive > QUIET_MS && !quiet) {
      quiet = `the cluster at ${settings.rpc} is not answering (no new slot for ${Math.round(QUIET_MS / 1000)} s or more). What is shown may be out of date.`;
      banner(`RPC not answering: ${quiet} Posting is held until it answers again.`);
      updatePost();
    }
    if (asking) return;
    asking = true;
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), 2_500);
    const stop = () => timeout.abort();
    me.signal.addEventListener('abort', stop);
    c.rpc
      .getSlot({ commitment: 'processed' })
      .send({ abortSignal: timeout.signal })
      .then((slot) => {
        if (slot <= lastSlot || me.signal.aborted) return;
        lastSlot = slot;
        alive = Date.now();
        if (quiet) {
          quiet = null;
          banner(null);
          toast('The cluster answers again', 'ok', undefined, 4_000);
          updatePost();
        }
      })
      .catch(() => {})
      .finally(() => {
        clearTimeout(timer);
        me.signal.removeEventListener('abort', stop);
        asking = false;
      });
  };
  const timer = setInterval(tick, 1_000);
  me.signal.addEventListener('abort', () => clearInterval(timer));
  tick();
}

/** A change made in the wallet: another account reconnects, a disconnect stops posting until
 * the person connects again, another network until the wallet comes back. */
function onWalletChange(name: string, change: WalletChange) {
  if (change.kind === 'account') {
    guarded(() => connect(name))();
  } else if (change.kind === 'disconnected') {
    void disconnect().then(() => showError(new Error(`${name} disconnected: connect again to post`)));
  } else if (change.kind === 'chain') {
    offChain = true;
    updatePost();
    showError(new Error(`${name} switched to ${change.chains.join(', ')}; this page is connected to ${settings.rpc}: switch the wallet back, or connect to that cluster`));
  } else if (offChain) {
    offChain = false;
    clearError();
    updatePost();
  }
}

async function disconnect() {
  const old = connection;
  connection = null;
  chosen = undefined;
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
  const solShown = Number(sol) / 1e9;
  $('wallet').append(`${signer.label}: `, addrLink(me), ` · ${solShown.toLocaleString('en', { maximumFractionDigits: 4 })} SOL · `, spanId('tokens', tk(tokens)), ` ${unit()}`);
  $('account-short').textContent = `${me.slice(0, 4)}…${me.slice(-4)}`;
  $<HTMLAnchorElement>('account-link').href = explorer('address', me);
  $('account').hidden = false;
  // test clusters: a faucet (never on mainnet or testnet)
  $('funds').hidden = !(network === 'localnet' || network === 'devnet');
  updatePost();
  if (sol === lamports(0n)) {
    throw new Error(`your wallet has no SOL to pay network fees${$('funds').hidden ? ': send it some' : ': "Get test SOL and tokens" funds it'}`);
  }
}

/** SOL from the cluster's airdrop, and stake tokens from the faucet the settings name
 * (`keeper faucet`, which scripts/app starts; its mint checked to be this market's), for the
 * connected wallet; each asked on its own, each bounded; test clusters only. */
async function faucet() {
  if (!client || !signer) throw new Error('connect a wallet first');
  if (!(network === 'localnet' || network === 'devnet')) throw new Error(`there is no faucet on ${network}`);
  const me = signer.signer.address;
  const rpc = client.rpc;
  $('faucet-said').textContent = `asking for 1 SOL${settings.faucet ? ` and ${unit()}` : ''}…`;
  const sol = (async () => {
    const sig = await within(rpc.requestAirdrop(me, lamports(1_000_000_000n), { commitment: 'confirmed' }).send(), 30_000, 'no answer in 30 s').catch((e) => {
      throw new Error(`the cluster's airdrop refused (${(e as Error).message}): on devnet it is rate-limited, try again later or use faucet.solana.com`);
    });
    toast('1 SOL airdrop sent', 'info', sig);
    for (let i = 0; i < 40; i++) {
      const st = (await rpc.getSignatureStatuses([sig]).send()).value[0];
      if (st?.err) throw new Error('the airdrop failed on chain');
      if (st?.confirmationStatus === 'confirmed' || st?.confirmationStatus === 'finalized') return '1 SOL';
      await new Promise((r) => setTimeout(r, 500));
    }
    throw new Error('the airdrop was not confirmed in 20 s: check your balance in a while');
  })();
  const tokens = (async () => {
    if (!settings.faucet) return null;
    const base = settings.faucet.replace(/\/$/, '');
    const ask = (path: string, init?: RequestInit) =>
      fetch(`${base}${path}`, { credentials: 'omit', signal: AbortSignal.timeout(30_000), ...init }).catch(() => {
        throw new Error(`the token faucet at ${settings.faucet} does not answer: is it running (scripts/app starts it)?`);
      });
    const info = await (await ask('/')).json().catch(() => ({}));
    if (info.mint !== token?.mint) throw new Error(`the token faucet at ${settings.faucet} gives ${typeof info.mint === 'string' ? `the mint ${info.mint}` : 'no known mint'}, not this market's stake token: check the settings' faucet`);
    const r = await ask(`/fund/${me}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(`the token faucet said no: ${typeof body.error === 'string' ? body.error : `HTTP ${r.status}`}`);
    const amount = `${/^[0-9.]+$/.test(String(body.amount)) ? body.amount : '?'} ${unit()}`;
    toast(`${amount} minted to you`, 'ok', typeof body.signature === 'string' && isSignature(body.signature) ? body.signature : undefined);
    return amount;
  })();
  const [a, b] = await Promise.allSettled([sol, tokens]);
  const got = [a, b].flatMap((x) => (x.status === 'fulfilled' && x.value ? [x.value] : []));
  const failed = [a, b].flatMap((x) => (x.status === 'rejected' ? [(x.reason as Error).message] : []));
  $('faucet-said').textContent = got.length ? `funded: ${got.join(' and ')}` : '';
  await showWallet().catch(() => {});
  if (failed.length) throw new Error(failed.join('; '));
}
$('faucet-btn').addEventListener('click', () => {
  const b = $<HTMLButtonElement>('faucet-btn');
  if (b.disabled) return;
  b.disabled = true;
  clearError();
  faucet()
    .catch((e) => {
      $('faucet-said').textContent = '';
      showError(e);
    })
    .finally(() => (b.disabled = false));
});

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
    $('post-status').textContent = '';
    clearError('post-error');
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

async function prepare(): Promise<{ prepared: PreparedJob; model: ModelInfo; what: string; texts?: string[]; rows?: Int8Array[] }> {
  switch (kind()) {
    case 'digit': {
      const row = pad.row();
      const rows = row ? [...batch, row] : [...batch];
      if (rows.length === 0) throw new Error('draw a digit on the pad first');
      const m = model('digits');
      return { prepared: await mlpJob(m, rows), model: m, what: rows.length === 1 ? 'a drawn digit' : `${rows.length} drawn digits`, rows };
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
      if (m.kind === 'mlp') {
        const rows = batchRows(bytes, m.features);
        return { prepared: await mlpJob(m, rows), model: m, what: f.name, rows };
      }
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
  const { prepared, model: m, what, texts, rows } = await prepare();
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
    if (signer !== who || !client) throw new Error('the wallet changed during the post: nothing was sent, post again');
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
  const upload = async () => {
    postStage(`uploading ${what} to ${settings.store}…`);
    for (const part of prepared.parts) await uploadContent(settings.store, part);
    await uploadContent(settings.store, prepared.manifest);
  };
  const fees = { computeUnits: built.computeUnits, priorityFee: built.priorityFee };
  const onSent = (sig: string) => {
    postStage('sent, waiting for the cluster to confirm it…', sig);
    toast('Post sent: waiting for confirmation', 'info', sig);
  };
  postStage(`waiting for ${who.label} to sign…`);
  let signature: string;
  let uploaded = false;
  try {
    // the person's data leaves the browser only once they have signed: the signed transaction
    // names its content address (the job's input hash), then it is uploaded, then sent
    let signed = await signInstructions(client, who.signer, instructions, fees);
    same();
    if (signed) {
      await upload();
      uploaded = true;
      same();
      // a slow upload (or a long look in the wallet) can outlast the blockhash: signed again
      // on a fresh one (the data is up), never sent to fail
      const height = await client!.rpc.getBlockHeight({ commitment: 'confirmed' }).send();
      if (height + 10n >= signed.lastValidBlockHeight) {
        postStage(`the signature expired while uploading: sign once more with ${who.label} (your data is uploaded)…`);
        signed = (await signInstructions(client!, who.signer, instructions, fees))!;
        same();
      }
      signature = await sendSigned(client!, signed, onSent);
    } else {
      // a wallet that only signs and sends in one step: the data must be there before it sends
      await upload();
      uploaded = true;
      same();
      signature = await sendInstructions(client!, who.signer, instructions, { ...fees, onSent });
    }
  } catch (e) {
    if (e instanceof SignRejected) {
      throw new Error(
        uploaded
          ? `You rejected the post in ${e.wallet}: nothing was signed or sent (your data is on ${settings.store}: ${who.label} signs and sends in one step, so it was uploaded before it asked).`
          : `You rejected the post in ${e.wallet}: nothing was signed, sent or uploaded.`,
      );
    }
    throw e;
  }
  toast('Task posted and confirmed', 'ok', signature);
  if (texts) postedTexts.set(task, texts);
  if (rows) postedRows.set(task, rows);
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
    ['Reward', `${amt(terms.reward)}, held in the task's escrow: paid to the provider and verifiers if the result is accepted (less the protocol's ${params.feeBps / 100}% fee), refunded to you otherwise`],
    ['Bonds', `the provider bonds ${amt(bps(terms.reward, params.providerBondBps))} and each verifier ${amt(bps(terms.reward, params.verifierBondBps) || 1n)} of their own stake, slashed if they are wrong; nothing of yours`],
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

/** How long until `deadline` from `slot`, in time (a slot is about 0.4 s). */
function inTime(deadline: bigint, slot: bigint): string {
  if (deadline <= slot) return 'now';
  const s = Math.round(Number(deadline - slot) * SLOT_SECONDS);
  return s < 60 ? `in about ${s} s` : s < 3600 ? `in about ${Math.floor(s / 60)} min ${s % 60} s` : `in about ${(s / 3600).toFixed(1)} h`;
}

function phaseOf(t: Task, slot: bigint): string {
  const s = TaskStatus[t.status];
  const r = t.rounds[t.round];
  switch (t.status) {
    case TaskStatus.Open:
      return `waiting for a provider: it expires ${inTime(t.openDeadline, slot)} if none claims it`;
    case TaskStatus.Claimed:
      return `claimed by a provider, its result due ${inTime(t.submitDeadline, slot)}`;
    case TaskStatus.Verifying:
      return `verifying, round ${t.round + 1}: ${r.seats} of ${r.quorum} verifiers seated, ${r.committed} votes committed (closes ${inTime(t.commitDeadline, slot)}), ${r.revealed} revealed (closes ${inTime(t.revealDeadline, slot)})`;
    default:
      return `${s}: ${r.valid} valid, ${r.invalid} invalid, ${r.revealed - r.valid - r.invalid} unavailable of ${r.revealed} revealed${r.majority >= 3 ? ` (${verdictName(r.majority)})` : ''}`;
  }
}

/** How an availability account ended (PROTOCOL §8.11). */
const AVAILABILITY_OUTCOMES: Record<number, string> = { 1: 'answered: the tiles are on chain', 2: 'failed: nothing was published by its deadline', 3: 'moot' };

/** A revealed vote's name (PROTOCOL §3.4). */
const VOTE_NAMES: Record<number, string> = { 1: 'valid', 2: 'invalid', 3: 'unavailable' };

function describeEvent(name: string, d: Record<string, unknown>): string {
  // an account, marked for renderHistory to show as its explorer link
  const short = (a: unknown) => `\u0000${String(a)}\u0000`;
  switch (name) {
    case 'TaskPosted':
      return `posted, reward ${amt(d.reward)}, quorum ${d.quorum}, samples ${d.samples}`;
    case 'TaskClaimed':
      return `claimed by ${short(d.provider)}, bond ${amt(d.bond)}`;
    case 'ResultSubmitted':
      return `result committed, root ${hex(d.result_root as Uint8Array).slice(0, 12)}…`;
    case 'SeedDrawn':
      return `seed drawn (round ${d.round}) from slot ${d.hashed_slot}`;
    case 'VerifierJoined':
      return `verifier ${short(d.verifier)} took seat ${d.seat} (holds ${amt(d.held)}; ${d.seats} seats taken), bond ${amt(d.bond)}`;
    case 'VerifierDisplaced':
      return `verifier ${short(d.displaced)} displaced from seat ${d.seat} by ${short(d.by)}`;
    case 'VoteCommitted':
      return `vote committed by ${short(d.verifier)}`;
    case 'VoteRevealed':
      return `vote revealed by ${short(d.verifier)}: ${VOTE_NAMES[d.vote as number] ?? `vote ${d.vote}`} (${d.seats} seat${d.seats === 1 ? '' : 's'})`;
    case 'TaskFinalized':
      return `finalized ${d.status}${(d.majority as number) >= 3 ? ` (${(d.majority as number) === 3 ? 'withheld' : verdictName(d.majority as number)})` : ''}: ${d.valid} valid, ${d.invalid} invalid, ${d.unavailable} unavailable; provider paid ${amt(d.provider_paid)}, slashed ${amt(d.provider_slashed)}; fee ${amt(d.fee)}`;
    case 'VoteSettled':
      return `vote of ${short(d.verifier)} settled: paid ${amt(d.paid)}, slashed ${amt(d.slashed)}`;
    case 'TaskConcluded':
      return `concluded ${d.status}${(d.majority as number) >= 3 ? ` (${verdictName(d.majority as number)})` : ''}: provider paid ${amt(d.provider_paid)}, slashed ${amt(d.provider_slashed)}; fee ${amt(d.fee)}`;
    case 'AvailabilityOpened':
      return d.kind === KIND_CHALLENGE
        ? `availability challenged by ${short(d.opener)}: tiles ${(d.tiles as number[]).join(', ')} to be published on chain by slot ${d.answer_deadline}, bond ${amt(d.bond)}`
        : `withheld verdict contested by its provider: tiles ${(d.tiles as number[]).join(', ')} (drawn from the seed) to be published on chain by slot ${d.answer_deadline}`;
    case 'AvailabilityPublished':
      return `chunk ${d.chunk} of tile ${d.tile} published on chain, proven against the root (${d.chunks_left} chunk${d.chunks_left === 1 ? '' : 's'} left)`;
    case 'AvailabilityEnded':
      return `${d.kind === KIND_CHALLENGE ? 'availability challenge' : 'contest'} ${AVAILABILITY_OUTCOMES[d.outcome as number] ?? `ended (${d.outcome})`}${d.bond_forfeit ? `, bond ${amt(d.bond_forfeit)} forfeit to the treasury` : ''}; verdict ${d.status}${(d.majority as number) >= 3 ? ` (${verdictName(d.majority as number)})` : ''}`;
    case 'AvailabilityClosed':
      return `availability account closed by ${short(d.opener)}, its rent returned`;
    case 'TaskCancelled':
      return 'cancelled by its client';
    case 'TaskExpired':
      return 'expired: no provider claimed it in time';
    case 'TaskClosed':
      return `closed ${d.status}, ${amt(d.refunded)} refunded`;
    case 'failed transaction':
      return 'failed: a keeper lost a race (another took the claim, seat or crank first); nothing changed';
    default:
      return name;
  }
}

function renderHistory(h: HistoryEntry[]) {
  const ol = $('timeline');
  ol.innerHTML = '';
  const failed = h.filter((e) => e.failed).length;
  $('timeline-count').textContent = `(${h.length - failed}${failed ? `; ${failed} lost race${failed === 1 ? '' : 's'}, hidden` : ''})`;
  $('failed-said').textContent = failed
    ? `${failed} failed transaction${failed === 1 ? '' : 's'}: keepers raced for the same claim, seat or crank, and the ones that lost the race were refused; nothing changed (only their fees were spent, by the keepers, not you). Hidden unless you ask.`
    : '';
  $('failed-said').hidden = failed === 0;
  $('show-failed').closest('label')!.hidden = failed === 0;
  for (const e of h) {
    for (const ev of e.events.length ? e.events : [{ name: e.failed ? 'failed transaction' : 'transaction', data: {} }]) {
      const li = document.createElement('li');
      li.dataset.event = ev.name;
      if (e.failed) li.dataset.failed = '';
      const when = e.blockTime ? new Date(Number(e.blockTime) * 1000).toLocaleTimeString() : '';
      const slot = document.createElement('span');
      slot.className = 'slot';
      slot.textContent = `slot ${e.slot} ${when} `;
      li.append(slot, ...describeEvent(ev.name, ev.data).split('\u0000').map((part, i) => (i % 2 ? addrLink(part) : part)), ' ', txLink(e.signature));
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
function explain(outcome: string | undefined, majority?: number): string {
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
      return `Expired: no provider claimed it before its open window ended. Nothing was computed; your reward is refunded at its close (anyone may close it; the market’s crank does). Post again, perhaps with a larger reward or another region.`;
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
  $<HTMLAnchorElement>('task-link').href = explorer('address', task);
  setStatus('…');
  for (const id of ['timeline', 'stages', 'result', 'phase', 'explain', 'connection', 'availability-text', 'availability-state', 'timeline-count', 'failed-said']) $(id).innerHTML = '';
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
    $('explain').textContent = explain(final, majorityOf(h, lastTask));
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
  sendInstructions(client, signer.signer, [getCancelTaskInstruction({ task, client: signer.signer })], { onSent: (sig) => toast('Cancel sent: waiting for confirmation', 'info', sig) })
    .then((sig) => {
      toast('Cancelled', 'ok', sig);
      $('explain').textContent = 'Cancelled: the reward is refunded when the task closes.';
    })
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
  btn.textContent = `Challenge availability (bond ${amt(bond)})`;
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
      ['Challenging', `the availability of task ${task}'s result: its provider must publish tiles ${tiles.join(', ')} on chain, each proven against the root, ${inTime(BigInt(t.data.disputeWindow), 0n).replace('in about', 'within about')}`],
      ['Bond', `${amt(bond)} from your stake-token account: returned if the provider does not publish them (it is then slashed and your reward refunded in full); forfeit to the treasury if it does`],
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
          ? `Challenge open: the provider must publish tiles ${f.tiles.slice(0, f.tileCount).join(', ')} on chain, its deadline ${inTime(f.answerDeadline, slot)}; ${f.chunksLeft} chunk${f.chunksLeft === 1 ? '' : 's'} of 1 KiB left to prove.`
          : `The deadline has passed unanswered: once the challenge is timed out (anyone may; the market’s crank does), the provider is slashed and your reward refunded in full.`;
    } else if (f.state === AVAILABILITY_ANSWERED) {
      state.textContent = 'Answered: the provider published the tiles on chain, each chunk proven against the root by the program (your bond went to the treasury). Fetching the result with them…';
      $('challenge-btn').hidden = true;
      challenging?.answered();
      return;
    } else if (f.state === AVAILABILITY_FAILED) {
      state.textContent = `Failed: the provider did not publish the tiles by the deadline. The verdict is now unserved (Rejected): the provider’s whole bond is slashed, part of it paid to you, your reward is refunded in full when the task closes, and your challenge bond is returned.`;
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
  p.className = 'hint';
  p.textContent = verified
    ? `Verified: ${count === 1 ? `its one tile (${source}) hashes` : `all ${count} tiles (${source}) hash`} to the root ${hex(c.root).slice(0, 16)}… committed on chain.`
    : `Not yet verified: the provider committed this result (${source}, hashing to the root ${hex(c.root).slice(0, 16)}… on chain); the verifiers are checking it.`;
  if (!verified) p.id = 'unverified';
  const title = document.createElement('h3');
  title.textContent = verified ? 'Result ✓ verified' : 'Result (not yet verified)';
  box.append(title);
  if (c.job.kind === JobKind.Mlp) {
    const rows = mlpClasses(c.job, tiles);
    // each class beside the digit it was read from, when this browser posted it
    const drawn = postedRows.get(task);
    if (rows.length === 1 && !drawn) {
      const big = document.createElement('div');
      big.id = 'result-class';
      big.textContent = String(rows[0].class);
      box.append('The market read it as ', big);
    } else {
      const ul = document.createElement('ul');
      ul.className = 'digits';
      ul.setAttribute('aria-label', 'Each digit and the class the market read');
      rows.forEach((r, i) => {
        const li = document.createElement('li');
        if (drawn?.length === rows.length) {
          const cv = document.createElement('canvas');
          cv.width = 8;
          cv.height = 8;
          cv.setAttribute('role', 'img');
          cv.setAttribute('aria-label', `digit ${i + 1} as drawn`);
          paintRow(cv, drawn[i]);
          li.append(cv);
        }
        const cls = document.createElement('span');
        cls.className = 'class';
        cls.textContent = String(r.class);
        li.append(cls);
        ul.append(li);
      });
      box.append(ul);
      // the same as a table, for screen readers and scripts
      const t = table(['row', 'class'], rows.map((r, i) => [String(i + 1), String(r.class)]), 'result-classes');
      t.className = 'visually-hidden';
      box.append(t);
    }
  } else if (c.job.kind === JobKind.Encoder) {
    const e = embeddings(c.job, tiles);
    // a heat map that fits its box at any width (fixed layout, two decimals)
    const t = table(
      ['', ...e.map((_, i) => `${i + 1}`)],
      e.map((a, i) => [`${i + 1}`, ...e.map((b) => cosine(a, b).toFixed(2))]),
      'similarity',
    );
    t.classList.add('sim');
    // the corner names what the rows and columns are (an empty header is a puzzle to a screen reader)
    const corner = document.createElement('span');
    corner.className = 'visually-hidden';
    corner.textContent = 'Text';
    t.rows[0].cells[0].replaceChildren(corner);
    // the exact value beside the two decimals shown
    e.forEach((a, i) => e.forEach((b, j) => (t.rows[i + 1].cells[j + 1].dataset.value = String(cosine(a, b)))));
    const cap = t.createCaption();
    cap.className = 'visually-hidden';
    cap.textContent = 'Cosine similarity of each pair of texts (row and column numbers are the texts below)';
    t.querySelectorAll('td').forEach((td) => {
      const v = Number(td.textContent);
      if (Number.isNaN(v) || td.cellIndex === 0) return;
      const [bg, fg] = shade(Math.max(0, v));
      td.style.background = bg;
      td.style.color = fg;
    });
    const head = document.createElement('p');
    head.textContent = 'How alike the texts are (cosine similarity of their verified embeddings, 1 the same meaning):';
    box.append(head, t);
    const texts = postedTexts.get(task);
    if (texts?.length !== e.length) {
      const n = document.createElement('p');
      n.className = 'hint';
      n.textContent = 'The texts were posted from another browser: the numbers follow the order they were posted in.';
      box.append(n);
    }
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
  // how it was checked, after the answer
  box.append(p);
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
  const many = (n: number, one: string) => `${n} ${one}${n === 1 ? '' : 's'}`;
  $('market-summary').textContent = `Market ${settings.market} "${name}": ${many(m.providers, 'provider')} and ${many(m.verifiers, 'verifier')} (${amt(m.verifierStake)} staked by verifiers); by default ${m.quorum} verifiers check ${m.samples} samples of each result.`;
  const nodes = await nodesOf(client.rpc, market);
  const role = (r: number) => [(r & 1) && 'provider', (r & 2) && 'verifier'].filter(Boolean).join('+');
  $('nodes').replaceWith(
    table(
      ['node', 'roles', 'stake', 'bonded', 'GFLOPS', 'memory GB', 'region', 'completed', 'verified', 'slashed'],
      nodes.map(({ address, data: n }) => [
        `${address.slice(0, 8)}…`,
        role(n.roles),
        amt(n.free + n.bonded),
        amt(n.bonded),
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
  const rows: string[][] = live.map(({ address, data: t }) => [`${address.slice(0, 8)}…`, TaskStatus[t.status], amt(t.reward), String(t.tileCount)]);
  for (const addr of recent.filter((a) => !live.some((l) => l.address === a))) {
    const h = await historyOf(addr);
    const mm = measuredOf(h);
    if (mm) measured.push(mm);
    rows.push([`${addr.slice(0, 8)}…`, `${outcomeOf(h) ?? '?'} (closed)`, '', '']);
  }
  $('tasks').replaceWith(table(['task', 'status', 'reward', 'tiles'], rows, 'tasks'));
  // each account its explorer link
  const linked = (id: string, addresses: string[]) =>
    $(id)
      .querySelectorAll('tr')
      .forEach((tr, i) => {
        const cell = (tr as HTMLTableRowElement).cells[0];
        if (i > 0 && addresses[i - 1] && cell?.tagName === 'TD') cell.replaceChildren(addrLink(addresses[i - 1]));
      });
  linked('nodes', nodes.map((n) => n.address));
  linked('tasks', [...live.map((l) => l.address), ...recent.filter((a) => !live.some((l) => l.address === a))]);
  const perf = perfOf(
    nodes.map((n) => n.data),
    measured,
  );
  $('perf').textContent = perf
    ? `P = N·G·E/(1+L/C) with N = ${perf.n}, G = ${perf.g.toExponential(3)} work/s, E = ${perf.e.toFixed(2)}, L = ${perf.l.toFixed(1)} s, C = ${perf.c.toFixed(2)} s ⇒ P = ${perf.p.toExponential(3)} work/s (${perf.basis})`
    : 'P = N·G·E/(1+L/C): no finished task measured yet (post one, then refresh)';
}

// ---------------------------------------------------------------- my tasks

/** The connected wallet's tasks: the live ones the market holds with it as their client (read
 * from chain), and those posted from this browser that have closed since (read from their
 * transactions), newest first, each with its state and reward. */
async function showMine() {
  if (!client || !signer) {
    $('mine-said').textContent = 'Connect a wallet to see its tasks.';
    $('mine').innerHTML = '';
    return;
  }
  const me = signer.signer.address;
  $('mine-said').textContent = 'reading your tasks…';
  const live = (await tasksOf(client.rpc, await marketAddress(settings.market))).filter(({ data: t }) => t.client === me);
  const recent = (JSON.parse(localStorage.getItem('cm.recent') ?? '[]') as string[]).filter((a) => isAddress(a) && !live.some((l) => l.address === a)).slice(0, 10) as Address[];
  const closed: { address: Address; outcome: string }[] = [];
  for (const a of recent) {
    const h = await historyOf(a);
    const posted = h.flatMap((e) => e.events).find((e) => e.name === 'TaskPosted');
    if (posted && String(posted.data.client) === me) closed.push({ address: a, outcome: outcomeOf(h) ?? 'closed' });
  }
  const ul = $('mine');
  ul.innerHTML = '';
  const card = (address: Address, state: string, more: string) => {
    const li = document.createElement('li');
    li.dataset.task = address;
    const st = document.createElement('span');
    st.className = `status ${state}`;
    st.textContent = state;
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'secondary outline small';
    open.textContent = 'Open';
    open.setAttribute('aria-label', `Open task ${address}`);
    open.addEventListener('click', () => {
      tab('watch');
      void watch(address);
    });
    li.append(st, addrLink(address), more, open);
    ul.append(li);
  };
  for (const { address, data: t } of live) card(address, TaskStatus[t.status], `reward ${amt(t.reward)} · ${t.tileCount} tile${t.tileCount === 1 ? '' : 's'}`);
  for (const { address, outcome } of closed) card(address, outcome, 'closed, rent returned');
  $('mine-said').textContent = live.length + closed.length === 0 ? 'No tasks yet: post one.' : `${live.length} live on chain, ${closed.length} closed (posted from this browser).`;
}

// ---------------------------------------------------------------- tabs and start

const TABS = ['post', 'watch', 'mine', 'market'];

/** Shows one tab (WAI-ARIA tabs: the selected one focusable, the others by arrow keys). */
function tab(name: string, focus = false) {
  document.querySelectorAll<HTMLButtonElement>('[role=tablist] [role=tab]').forEach((b) => {
    const on = b.dataset.tab === name;
    b.classList.toggle('active', on);
    b.setAttribute('aria-selected', String(on));
    b.tabIndex = on ? 0 : -1;
    if (on && focus) b.focus();
  });
  for (const t of TABS) $(`tab-${t}`).hidden = t !== name;
  if (name === 'market' && client) guarded(showMarket, 'market-error')();
  if (name === 'mine') guarded(showMine, 'mine-error')();
}
document.querySelectorAll<HTMLButtonElement>('[role=tablist] [role=tab]').forEach((b) => {
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
$('show-failed').addEventListener('change', () => $('timeline').classList.toggle('show-failed', $<HTMLInputElement>('show-failed').checked));
/** Whether a post is under way (a reconnect meanwhile leaves Post off). */
let posting = false;
$('post-btn').addEventListener('click', () => {
  // disabled before anything awaits: a second click while this post is in flight does nothing
  const btn = $<HTMLButtonElement>('post-btn');
  if (btn.disabled || posting) return;
  btn.disabled = true;
  posting = true;
  updatePost();
  clearError('post-error');
  post()
    .catch((e) => {
      $('post-status').textContent = '';
      showError(e, 'post-error');
    })
    .finally(() => {
      posting = false;
      updatePost();
    });
});
$('reward').addEventListener('input', () => ($('reward-said').textContent = `${$<HTMLInputElement>('reward').value.trim()} ${unit()}`));

/** The wallet the tab signs with when it connects again: the one chosen last, else the local
 * keypair the settings carry, else the chooser is opened. */
let chosen: string | undefined;
/** Connects with the wallet chosen before, or opens the chooser. */
function connectChosen() {
  const choice = chosen ?? (settings.localKeypair ? LOCAL : undefined);
  if (choice === undefined) {
    fillChooser();
    $<HTMLDialogElement>('wallet-dialog').showModal();
    return;
  }
  guarded(() => connect(choice))();
}
$('connect').addEventListener('submit', (e) => {
  e.preventDefault();
  $<HTMLDialogElement>('settings-dialog').close();
  connectChosen();
});
$('disconnect-btn').addEventListener('click', guarded(disconnect));

/** Puts `s` in force: the form's fields, the chooser, the models. */
function useSettings(s: Settings, wallet?: string) {
  settings = s;
  chosen = wallet;
  $<HTMLInputElement>('rpc').value = s.rpc;
  $<HTMLInputElement>('store').value = s.store;
  $<HTMLInputElement>('market-id').value = String(s.market);
  $('reward-unit').textContent = unit();
  $('reward-said').textContent = `${$<HTMLInputElement>('reward').value.trim()} ${unit()}`;
  const sel = $<HTMLSelectElement>('file-model');
  sel.innerHTML = '';
  for (const name of Object.keys(s.models ?? {})) sel.add(new Option(`${name} (${s.models![name].kind})`, name));
  fillChooser();
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
    ['Token symbol', s.symbol ?? '(none: "tokens")'],
    ['Token faucet', s.faucet ?? 'none'],
    ['Explorer links', s.explorer ?? 'explorer.solana.com (custom cluster)'],
    ['From', s.from ?? 'the link itself (#config=)'],
  ];
  describe($('link-list'), rows);
  $('link-settings').hidden = false;
  $('link-use').onclick = () => {
    $('link-settings').hidden = true;
    useSettings(s);
    connectChosen();
  };
  $('link-ignore').onclick = () => {
    $('link-settings').hidden = true;
    useSettings(storedSettings());
  };
}

async function start() {
  let link: Settings | null;
  try {
    link = await linkSettings();
  } catch (e) {
    useSettings(storedSettings());
    throw e;
  }
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
