// The page: connect to a cluster, post a task on the person's own data (a drawn digit, typed
// sentences, files), watch it live with a link to every transaction, get the result verified
// tile by tile against the root on chain, and see the market. Every refusal is shown as what
// the person can do about it (src/errors.ts).

import {
  createSolanaRpc,
  createSolanaRpcSubscriptions,
  getBase16Decoder,
  isAddress,
  lamports,
  type Address,
} from '@solana/kit';
import {
  committedOf,
  cosine,
  embeddings,
  encoderJob,
  fetchMarket,
  fetchResult,
  JobKind,
  marketAddress,
  mlpClasses,
  mlpJob,
  outcomeOf,
  encodeJobSpec,
  endpointsOf,
  parseUiAmount,
  postTask,
  stakeTokenOf,
  taskHistory,
  toUiAmount,
  TaskStatus,
  tileCount,
  tokenAccountOf,
  tokenBalance,
  uploadContent,
  watchTask,
  type HistoryCache,
  type HistoryEntry,
  type KitClient,
  type ModelInfo,
  type PreparedJob,
  type Task,
} from '@compute-market/client';
import { paintRow, Pad } from './digits';
import { describeError } from './errors';
import { measuredOf, nodesOf, perfOf, tasksOf, type Measured } from './market';
import { checkSettings, isLoopback, loadSettings, saveSettings, type Settings } from './settings';
import { GENESIS, localSigner, standardSigner, type Signer } from './wallet';

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const hex = (b: Uint8Array) => getBase16Decoder().decode(b);
const TERMINAL = ['Accepted', 'Rejected', 'Undecided', 'Cancelled', 'Expired'];

let settings: Settings;
let client: KitClient | null = null;
let signer: Signer | null = null;
/** The stake token (its mint and decimals, read from chain at connect): amounts are shown and
 * typed in tokens. */
let token: { mint: Address; decimals: number } | null = null;
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

function showError(e: unknown) {
  const el = $('error');
  el.textContent = describeError(e, settings);
  el.hidden = false;
  console.error(e);
}
function clearError() {
  $('error').hidden = true;
}
/** Runs `f`, showing what went wrong. */
function guarded(f: () => Promise<void>) {
  return () => {
    clearError();
    f().catch(showError);
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

async function connect() {
  settings = checkSettings({ ...settings, rpc: $<HTMLInputElement>('rpc').value.trim(), store: $<HTMLInputElement>('store').value.trim(), market: Number($<HTMLInputElement>('market-id').value) });
  saveSettings(settings);
  // nothing read from the cluster before (perhaps another one) stands for this one
  watching?.abort();
  histories.clear();
  postedTexts.clear();
  client = null;
  signer = null;
  token = null;
  // nothing can be posted until this connection is made (a post needs its signer and token)
  $<HTMLButtonElement>('post-btn').disabled = true;
  const { ws } = endpointsOf({ rpc: settings.rpc, ws: settings.ws });
  const c: KitClient = { rpc: createSolanaRpc(settings.rpc), rpcSubscriptions: createSolanaRpcSubscriptions(ws) };
  const genesis = await c.rpc.getGenesisHash().send();
  if (settings.localKeypair) {
    // the keypair signs for a local cluster only: a loopback host and no public genesis
    if (!isLoopback(settings.rpc) || Object.values(GENESIS).includes(genesis as any)) {
      throw new Error(`a local keypair signs on localnet only, and ${settings.rpc} is not one: use a wallet`);
    }
  }
  signer = settings.localKeypair ? await localSigner(settings.localKeypair) : await standardSigner(genesis);
  token = await stakeTokenOf(c.rpc);
  client = c;
  await showWallet();
  $<HTMLButtonElement>('post-btn').disabled = false;
}

async function showWallet() {
  if (!client || !signer) return;
  const me = signer.signer.address;
  const sol = (await client.rpc.getBalance(me, { commitment: 'confirmed' }).send()).value;
  const tokens = await tokenBalance(client.rpc, await tokenAccountOf(me, token!.mint));
  $('wallet').innerHTML = '';
  $('wallet').append(`${signer.label}: `, code(me), ` · ${(Number(sol) / 1e9).toFixed(3)} SOL · `, spanId('tokens', tk(tokens)), ' stake tokens');
  if (sol === lamports(0n)) throw new Error(`the wallet ${me} has no SOL to pay fees: on localnet, solana airdrop 1 ${me} -u ${settings.rpc}`);
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

function kind(): string {
  return (document.querySelector('input[name=kind]:checked') as HTMLInputElement).value;
}
document.querySelectorAll<HTMLInputElement>('input[name=kind]').forEach((r) =>
  r.addEventListener('change', () => {
    for (const k of ['digit', 'sentences', 'files']) $(`kind-${k}`).hidden = kind() !== k;
  }),
);

function model(name: string): ModelInfo {
  const m = settings.models?.[name];
  if (!m) {
    throw new Error(`this page has no hosted ${name} model: publish it with "keeper model publish MODEL --store ${settings.store}" and add its line to the page's settings (models.${name})`);
  }
  return m;
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
      if (!row) throw new Error('draw a digit on the pad first');
      const m = model('digits');
      return { prepared: await mlpJob(m, [row]), model: m, what: 'a drawn digit' };
    }
    case 'sentences': {
      const texts = $<HTMLTextAreaElement>('sentences').value.split('\n').map((t) => t.trim()).filter((t) => t !== '');
      if (texts.length === 0) throw new Error('type one sentence a line first');
      const m = model('minilm');
      return { prepared: await encoderJob(m, texts), model: m, what: `${texts.length} sentences`, texts };
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
      return { prepared: await encoderJob(m, texts), model: m, what: f.name, texts };
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

async function post() {
  if (!client || !signer) throw new Error('connect first');
  const terms = readTerms();
  const { prepared, model: m, what, texts } = await prepare();
  await checkTerms(terms, prepared.job);
  const status = $('post-status');
  // the model must be on the store the providers will fetch from
  status.textContent = `checking ${settings.store} holds the model…`;
  const head = await fetch(`${settings.store.replace(/\/$/, '')}/c/${m.sha256}`, { method: 'HEAD' });
  if (!head.ok) throw new Error(`the content store ${settings.store} does not hold the model ${m.sha256.slice(0, 12)}… (HTTP ${head.status}): publish it with keeper model publish`);
  status.textContent = `uploading ${what}…`;
  for (const part of prepared.parts) await uploadContent(settings.store, part);
  await uploadContent(settings.store, prepared.manifest);
  status.textContent = 'posting…';
  const taskId = await postId(prepared.job, terms);
  const { task, signature } = await postTask(client, {
    client: signer.signer,
    market: settings.market,
    taskId,
    job: prepared.job,
    reward: terms.reward,
    quorum: terms.quorum,
    samples: terms.samples,
    region: terms.region,
    inputUri: settings.store,
  });
  if (texts) postedTexts.set(task, texts);
  sessionStorage.removeItem(NONCE); // the next post is a new task
  status.innerHTML = '';
  status.append('posted ', code(task), ' in ', txLink(signature));
  const recent = JSON.parse(localStorage.getItem('cm.recent') ?? '[]') as string[];
  localStorage.setItem('cm.recent', JSON.stringify([task, ...recent.filter((t) => t !== task)].slice(0, 20)));
  tab('watch');
  void watch(task as Address);
  void showWallet().catch(() => {});
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
      return `${s}: ${r.valid} valid, ${r.invalid} invalid, ${r.revealed - r.valid - r.invalid} unavailable of ${r.revealed} revealed${r.majority === 3 ? ' (withheld: a majority could not get the result or found it wrong)' : ''}`;
  }
}

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
      return `finalized ${d.status}${d.majority === 3 ? ' (withheld)' : ''}: ${d.valid} valid, ${d.invalid} invalid, ${d.unavailable} unavailable; provider paid ${tk(d.provider_paid)}, slashed ${tk(d.provider_slashed)}; fee ${tk(d.fee)}`;
    case 'VoteSettled':
      return `vote of ${short(d.verifier)} settled: paid ${tk(d.paid)}, slashed ${tk(d.slashed)}`;
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

async function watch(task: Address) {
  if (!client) return;
  watching?.abort();
  const me = new AbortController();
  watching = me;
  $('task-address').textContent = task;
  setStatus('…');
  $('timeline').innerHTML = '';
  $('result').innerHTML = '';
  let shown = false;
  const refresh = async () => {
    const final = renderHistory(await historyOf(task));
    if (final) setStatus(final);
    if (final === 'Accepted' && !shown) {
      shown = true;
      await showResult(task);
    }
    return final;
  };
  try {
    for await (const u of watchTask(client, task, { abortSignal: me.signal })) {
      if (u.kind === 'state') {
        setStatus(TaskStatus[u.task.status]);
        $('phase').textContent = phaseOf(u.task, u.slot);
      }
      await refresh();
    }
    // closed: the history names the outcome (read again while the node indexes the last ones)
    for (let i = 0; i < 10 && !me.signal.aborted; i++) {
      const final = await refresh();
      if (final && TERMINAL.includes(final) && (final !== 'Accepted' || shown)) break;
      await new Promise((r) => setTimeout(r, 1500));
    }
    $('phase').textContent = 'closed: its rent went back; the history below is read from its transactions';
  } catch (e) {
    if (!me.signal.aborted) showError(e);
  }
}

// ---------------------------------------------------------------- result

async function showResult(task: Address) {
  if (!histories.has(task)) histories.set(task, new Map());
  const c = await committedOf(client!.rpc, task, histories.get(task));
  const box = $('result');
  box.innerHTML = '<p>fetching the result…</p>';
  // a provider's address, read from chain: private hosts only when the cluster is local
  const from = new URL(c.resultUri).host;
  const tiles = await fetchResult(c.resultUri, c.job, c.root, { allowPrivate: isLoopback(settings.rpc) });
  box.innerHTML = '';
  const p = document.createElement('p');
  p.id = 'verified';
  p.textContent = `Verified: all ${tileCount(c.job)} tiles (served by ${from}) hash to the root ${hex(c.root).slice(0, 16)}… committed on chain.`;
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
      if (!Number.isNaN(v)) td.style.background = `rgba(53, 88, 216, ${Math.max(0, v).toFixed(2)})`;
      if (v > 0.6) td.style.color = '#fff';
    });
    box.append('Cosine similarity of the verified embeddings:', t);
    const texts = postedTexts.get(task);
    if (texts?.length === e.length) {
      const ol = document.createElement('ol');
      ol.id = 'texts';
      texts.forEach((x) => (ol.appendChild(document.createElement('li')).textContent = x));
      box.append(ol);
    }
  }
  const all = new Uint8Array(tiles.reduce((n, t) => n + t.length, 0));
  tiles.reduce((at, t) => (all.set(t, at), at + t.length), 0);
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([all]));
  a.download = `${task}.bin`;
  a.id = 'download';
  a.textContent = `Download the verified output (${all.length} bytes)`;
  box.append(document.createElement('br'), a);
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

function tab(name: string) {
  document.querySelectorAll<HTMLButtonElement>('nav button').forEach((b) => b.classList.toggle('active', b.dataset.tab === name));
  for (const t of ['post', 'watch', 'market']) $(`tab-${t}`).hidden = t !== name;
  if (name === 'market' && client) guarded(showMarket)();
}
document.querySelectorAll<HTMLButtonElement>('nav button').forEach((b) => b.addEventListener('click', () => tab(b.dataset.tab!)));
$('market-refresh').addEventListener('click', guarded(showMarket));
$('open-task').addEventListener('submit', (e) => {
  e.preventDefault();
  guarded(async () => {
    if (!client) throw new Error('connect first');
    const a = $<HTMLInputElement>('open-address').value.trim();
    if (!isAddress(a)) throw new Error(`${JSON.stringify(a)} is not a task address (base58, 32 bytes)`);
    void watch(a as Address);
  })();
});
$('post-btn').addEventListener('click', () => {
  // disabled before anything awaits: a second click while this post is in flight does nothing
  const btn = $<HTMLButtonElement>('post-btn');
  if (btn.disabled) return;
  btn.disabled = true;
  clearError();
  post()
    .catch((e) => {
      $('post-status').textContent = 'not posted';
      showError(e);
    })
    .finally(() => {
      btn.disabled = !client;
    });
});
$('connect').addEventListener('submit', (e) => {
  e.preventDefault();
  guarded(connect)();
});

loadSettings()
  .then((s) => {
    settings = s;
    $<HTMLInputElement>('rpc').value = s.rpc;
    $<HTMLInputElement>('store').value = s.store;
    $<HTMLInputElement>('market-id').value = String(s.market);
    const sel = $<HTMLSelectElement>('file-model');
    for (const name of Object.keys(s.models ?? {})) sel.add(new Option(`${name} (${s.models![name].kind})`, name));
    if (s.autoConnect) guarded(connect)();
  })
  .catch(showError);
