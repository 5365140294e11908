// The page's settings: the cluster, the market, the content store clients upload to, the
// models hosted there (as `keeper model publish` prints them) and, on localnet only, a local
// keypair. Read from the URL's fragment (`#config=<base64url JSON>`: never sent to a server),
// or from `?config=<URL>` (a JSON file), else the last ones used; each field checked. A
// link's settings are shown and used only once the person confirms them; what the tab is
// connected with is kept for the session (sessionStorage: this tab only, gone when it closes),
// so a reload reconnects without asking again.

import type { ModelInfo } from '@compute-market/client';

export interface Settings {
  rpc: string;
  /** Websocket URL (default: the RPC's port + 1). */
  ws?: string;
  market: number;
  store: string;
  /** The stake token's symbol, as the market's operators name it (amounts are shown with it). */
  symbol?: string;
  /** The stake token's faucet on a test cluster (`keeper faucet`): the page's "Get test SOL
   * and tokens" asks it (`POST /fund/<address>`). */
  faucet?: string;
  /** Explorer link template: `{sig}` and `{rpc}` are filled in. */
  explorer?: string;
  models?: Record<string, ModelInfo>;
  /** Localnet only: the 64-byte keypair the page signs with. */
  localKeypair?: number[];
  /** Older links' "connect on load": ignored, a link's settings are always confirmed first. */
  autoConnect?: boolean;
  /** Where these came from: a link's settings are used for the visit, never saved. */
  source?: 'link' | 'saved' | 'defaults';
  /** Where a link's settings were fetched from (`?config=`). */
  from?: string;
}

/** What this tab was connected with: a reload reconnects with it. */
export interface Session {
  settings: Settings;
  /** The wallet chosen (`local` for the localnet keypair). */
  wallet: string;
}

const SESSION = 'cm.session';

/** The session this tab is connected with, if any. */
export function loadSession(): Session | null {
  const raw = sessionStorage.getItem(SESSION);
  if (!raw) return null;
  try {
    const s = JSON.parse(raw);
    return { settings: { ...checkSettings(s.settings), source: s.settings.source }, wallet: String(s.wallet) };
  } catch {
    sessionStorage.removeItem(SESSION); // an older page's, or damaged: start afresh
    return null;
  }
}

/** Keeps what the tab connected with (`null`: disconnected, forget it). */
export function saveSession(s: Session | null) {
  if (s) sessionStorage.setItem(SESSION, JSON.stringify(s));
  else sessionStorage.removeItem(SESSION);
}

/** Whether `url` names this machine (a local cluster's keepers serve on it too). */
export function isLoopback(url: string): boolean {
  return ['127.0.0.1', 'localhost', '[::1]'].includes(new URL(url).hostname);
}

const DEFAULTS: Settings = { rpc: 'http://127.0.0.1:8899', market: 1, store: 'http://127.0.0.1:9200' };

/** The settings, each field checked (an error names the first that is wrong). */
export function checkSettings(s: any): Settings {
  if (typeof s !== 'object' || s === null) throw new Error('the page settings are not a JSON object');
  const out = { ...DEFAULTS, ...s } as Settings;
  for (const k of ['rpc', 'store', 'faucet'] as const) {
    if (k === 'faucet' && out.faucet === undefined) continue;
    try {
      const u = new URL(out[k]!);
      if (!['http:', 'https:'].includes(u.protocol)) throw new Error();
    } catch {
      throw new Error(`the page settings' ${k} is not an http(s) URL: ${JSON.stringify(out[k])}`);
    }
  }
  if (!Number.isInteger(out.market) || out.market < 0 || out.market > 65535) throw new Error(`the page settings' market is not an id 0‥65535: ${out.market}`);
  if (out.localKeypair && !isLoopback(out.rpc)) throw new Error(`a local keypair is for localnet only, not ${out.rpc}: use a wallet`);
  if (out.ws !== undefined && !/^wss?:\/\//.test(out.ws)) throw new Error(`the page settings' ws is not a ws(s) URL: ${JSON.stringify(out.ws)}`);
  if (out.symbol !== undefined && (!/^[A-Za-z0-9$]{1,10}$/.test(out.symbol) || out.symbol.toUpperCase() === 'SOL')) {
    throw new Error(`the page settings' symbol must be 1–10 letters or digits, and not SOL (the stake token is not SOL): ${JSON.stringify(out.symbol)}`);
  }
  if (out.explorer !== undefined && !(out.explorer.startsWith('https://') && out.explorer.includes('{sig}'))) {
    throw new Error("the page settings' explorer must be an https:// link template with {sig}");
  }
  const whole = (v: unknown) => Number.isSafeInteger(v) && (v as number) > 0;
  for (const [name, m] of Object.entries(out.models ?? {})) {
    const fields =
      m?.kind === 'mlp'
        ? [m.bytes, m.features, m.classes, Number(m.work_per_row)]
        : m?.kind === 'encoder'
          ? [m.bytes, m.blocks, m.hidden, m.ffn, m.heads, m.positions]
          : m?.kind === 'decoder'
            ? [m.bytes, m.layers, m.width, m.ffn, m.heads, m.kv_heads, m.head_dim, m.vocab, m.positions]
            : [];
    const tok = m && 'tokenizer' in m ? m.tokenizer : undefined;
    if (tok !== undefined && !(/^[0-9a-f]{64}$/.test(tok?.sha256 ?? '') && whole(tok?.bytes))) throw new Error(`the page settings' model ${name} names a tokenizer that is not what keeper model publish prints`);
    if (!/^[0-9a-f]{64}$/.test(m?.sha256 ?? '') || fields.length === 0 || !fields.every(whole)) throw new Error(`the page settings' model ${name} is not what keeper model publish prints`);
  }
  return out;
}

/** The settings a link in the address carries (to be confirmed before use), else `null`. */
export async function linkSettings(): Promise<Settings | null> {
  const frag = new URLSearchParams(location.hash.slice(1)).get('config');
  if (frag !== null) {
    // out of the address bar and the history (it may hold a localnet keypair)
    history.replaceState(null, '', location.pathname + location.search);
    let parsed: unknown;
    try {
      const json = atob(frag.replace(/-/g, '+').replace(/_/g, '/'));
      parsed = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(json, (c) => c.charCodeAt(0))));
    } catch {
      throw new LinkError("This link's settings are damaged (cut short or changed on the way): ask whoever sent it for the link again, or connect with your own settings.");
    }
    return { ...linkChecked(parsed), source: 'link' };
  }
  const url = new URLSearchParams(location.search).get('config');
  if (url !== null) {
    history.replaceState(null, '', location.pathname);
    let where: URL;
    try {
      where = new URL(url, location.href);
    } catch {
      throw new LinkError(`This link names its settings at "${url}", which is not an address: ask for the link again.`);
    }
    const r = await fetch(where, { credentials: 'omit', signal: AbortSignal.timeout(10_000) }).catch((e) => {
      throw new LinkError(`This link's settings at ${where.href} could not be reached (${(e as Error).name === 'TimeoutError' ? 'no answer in 10 s' : 'the request failed'}): check the link, or that the server is up.`);
    });
    if (!r.ok) throw new LinkError(`This link's settings at ${where.href} could not be read (the server answered HTTP ${r.status}): check the link.`);
    const body = await r.json().catch(() => {
      throw new LinkError(`This link's settings at ${where.href} are not a settings file: check the link, or ask for it again.`);
    });
    // read once: a reload resumes the session rather than asking again
    return { ...linkChecked(body), source: 'link' as const, from: where.href };
  }
  return null;
}

/** A link that cannot be used, said in one sentence. */
export class LinkError extends Error {
  override name = 'LinkError';
}

/** A link's settings checked, a wrong field said as the link's. */
function linkChecked(s: unknown): Settings {
  try {
    return checkSettings(s);
  } catch (e) {
    throw new LinkError(`This link's settings cannot be used: ${(e as Error).message}. Ask for the link again.`);
  }
}

/** The settings typed here before (never a link's), else the defaults. */
export function storedSettings(): Settings {
  const saved = localStorage.getItem('cm.settings');
  // saved settings never connect on their own (an older page could have saved a link's)
  const { autoConnect: _, ...kept } = saved ? JSON.parse(saved) : {};
  return { ...checkSettings(kept), source: saved ? 'saved' : 'defaults' };
}

/** Remembers the settings typed into the page (never a link's, never a keypair, never
 * connecting on load). */
export function saveSettings(s: Settings) {
  if (s.source === 'link') return;
  const { localKeypair: _k, autoConnect: _a, source: _s, from: _f, ...rest } = s;
  localStorage.setItem('cm.settings', JSON.stringify(rest));
}
