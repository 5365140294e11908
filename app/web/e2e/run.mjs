// The page end to end in Chromium (Debian's /usr/bin/chromium driven by playwright-core),
// against a running cluster with keepers: the web test in tests/tests/cluster.rs starts the
// validator, the keepers and the page, then runs this with ORIGIN (the page's), SETTINGS (a
// file of its settings, handed over in the URL fragment as scripts/app does) and SHOTS (the
// folder for screenshots). It draws a digit and posts it, waits for Accepted and the verified
// class; types sentences, waits for the similarity matrix; opens the market; provokes two
// errors a person can act on. The last stdout line is JSON of what the page showed, which
// the Rust test holds to the chain read over RPC.
import { mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { getAddressDecoder } from '@solana/kit';

const origin = process.env.ORIGIN;
const settingsFile = process.env.SETTINGS;
// WALLET_PAGE: the page's settings without a local keypair (a wallet must sign); KEYPAIR: the
// 64 bytes the test's Wallet Standard wallet signs with; BATCH: a batch file it uploads
const wallet_url = process.env.WALLET_PAGE;
const keypair = process.env.KEYPAIR ? JSON.parse(process.env.KEYPAIR) : null;
const shots = process.env.SHOTS ?? 'test-artefacts/web';
if (!origin || !settingsFile) throw new Error('ORIGIN (the page) and SETTINGS (its settings file) are required');
const page_url = `${origin}/#config=${Buffer.from(readFileSync(settingsFile)).toString('base64url')}`;
mkdirSync(shots, { recursive: true });
// this network refuses Chromium's background connections: all of them off, a fresh profile
const flags = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];
const ctx = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'cm-chromium-')), {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: flags,
  viewport: { width: 1100, height: 1000 },
});
const page = ctx.pages()[0] ?? (await ctx.newPage());
page.on('console', (m) => console.error(`[page ${m.type()}] ${m.text()}`));
page.on('pageerror', (e) => console.error(`[page error] ${e.message}`));
const shot = async (name) => {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  console.error(`screenshot ${name}.png`);
};
const text = (sel) => page.locator(sel).innerText();
/** One pen stroke on `p`'s pad, between two points given as fractions of its size. */
const stroke = async (p, [x0, y0], [x1, y1], steps) => {
  const pad = await p.locator('#pad').boundingBox();
  await p.mouse.move(pad.x + pad.width * x0, pad.y + pad.height * y0);
  await p.mouse.down();
  await p.mouse.move(pad.x + pad.width * x1, pad.y + pad.height * y1, { steps });
  await p.mouse.up();
};
const noError = async (step) => {
  if (await page.locator('#error').isVisible()) throw new Error(`${step}: the page shows an error: ${await text('#error')}`);
};
const waitAccepted = async (task, step) => {
  await page.waitForFunction(
    (t) => document.querySelector('#task-address')?.textContent === t && ['Accepted', 'Rejected', 'Undecided', 'Expired'].includes(document.querySelector('#status')?.textContent ?? ''),
    task,
    { timeout: 300_000, polling: 500 },
  );
  const s = await text('#status');
  if (s !== 'Accepted') throw new Error(`${step}: the task ended ${s}\n${await text('#timeline')}`);
};
const posted = async (before) => {
  await page.waitForFunction((b) => (document.querySelector('#task-address')?.textContent ?? '—').length > 30 && document.querySelector('#task-address')?.textContent !== b, before, { timeout: 60_000 });
  return text('#task-address');
};

try {
  await page.goto(page_url);
  await page.waitForSelector('#tokens', { timeout: 60_000 });
  await noError('connect');
  if (page.url().includes('config=')) throw new Error(`the settings stay in the address bar: ${page.url()}`);
  await shot('01-connected');

  // a digit: a "1", one stroke down the pad
  await stroke(page, [0.55, 0.12], [0.45, 0.88], 25);
  await shot('02-digit-drawn');
  // a double click posts one task (the button is disabled while the post is in flight)
  await page.dblclick('#post-btn');
  const digitTask = await posted('—');
  const recentAfterDouble = await page.evaluate(() => JSON.parse(localStorage.getItem('cm.recent') ?? '[]').length);
  await noError('posting the digit');
  await shot('03-digit-posted');
  await waitAccepted(digitTask, 'the digit');
  await page.waitForSelector('#result-class', { timeout: 120_000 });
  await page.waitForSelector('#timeline li[data-event=TaskFinalized]', { timeout: 60_000 });
  const digitClass = Number(await text('#result-class'));
  const verifiedLine = await text('#verified');
  await shot('04-digit-accepted-verified-class');

  // sentences: the similarity matrix
  const sentences = ['A cat sleeps on the warm windowsill.', 'The kitten naps in the sun by the window.', 'Interest rates rose again this quarter.', 'The central bank raised borrowing costs.'];
  await page.click('nav button[data-tab=post]');
  await page.check('input[name=kind][value=sentences]');
  await page.fill('#sentences', sentences.join('\n'));
  await shot('05-sentences-typed');
  await page.click('#post-btn');
  const sentencesTask = await posted(digitTask);
  await noError('posting the sentences');
  await waitAccepted(sentencesTask, 'the sentences');
  await page.waitForSelector('#similarity', { timeout: 120_000 });
  const matrix = await page.$$eval('#similarity tr', (rows) => rows.slice(1).map((r) => Array.from(r.querySelectorAll('td')).slice(1).map((c) => Number(c.textContent))));
  await shot('06-sentences-accepted-similarity');

  // the market
  await page.click('nav button[data-tab=market]');
  await page.waitForFunction(() => (document.querySelector('#perf')?.textContent ?? '').includes('⇒ P ='), null, { timeout: 60_000 });
  await page.waitForSelector('#nodes tr:nth-child(5)');
  const perf = await text('#perf');
  const nodes = await page.locator('#nodes tr').count();
  await shot('07-market');

  // errors a person can act on: too few tokens; an unreachable content store
  await page.click('nav button[data-tab=post]');
  await page.check('input[name=kind][value=digit]');
  await page.fill('#reward', '1000000000');
  await page.click('#post-btn');
  await page.waitForSelector('#error:not([hidden])');
  const tokensError = await text('#error');
  await shot('08-error-insufficient-tokens');
  await page.fill('#reward', '1');
  // a quorum above the market's verifiers with stake is refused by name
  await page.fill('#quorum', '15');
  await page.click('#post-btn');
  await page.waitForFunction(() => (document.querySelector('#error')?.textContent ?? '').includes('quorum V'), null, { timeout: 30_000 });
  const quorumError = await text('#error');
  await shot('08b-error-quorum-above-the-verifiers');
  await page.fill('#quorum', '0');
  await page.fill('#store', 'http://127.0.0.1:9');
  await page.click('#connect-btn');
  await page.waitForFunction(() => !document.querySelector('#post-btn').disabled);
  await page.click('#post-btn');
  await page.waitForFunction(() => (document.querySelector('#error')?.textContent ?? '').startsWith('Unreachable'), null, { timeout: 30_000 });
  const storeError = await text('#error');
  await shot('09-error-unreachable-store');

  // no wallet at all: said so
  let walletError = null;
  let walletTask = null;
  let walletClasses = null;
  let tamperError = null;
  let fromHistory = null;
  if (wallet_url && keypair) {
    const bare = await ctx.newPage();
    await bare.goto(wallet_url);
    await bare.waitForSelector('#error:not([hidden])', { timeout: 30_000 });
    walletError = await bare.locator('#error').innerText();
    await bare.screenshot({ path: join(shots, '10-error-no-wallet.png'), fullPage: true });
    await bare.close();
    // a wallet that changes the transaction before signing it: refused, nothing sent
    const t = await ctx.newPage();
    const address0 = getAddressDecoder().decode(Uint8Array.from(keypair.slice(32)));
    await t.addInitScript(testWallet, { secret: keypair, address: address0, tamper: true });
    await t.goto(wallet_url);
    await t.waitForSelector('#tokens', { timeout: 60_000 });
    await stroke(t, [0.5, 0.15], [0.5, 0.85], 10);
    await t.click('#post-btn');
    await t.waitForSelector('#error:not([hidden])', { timeout: 30_000 });
    tamperError = await t.locator('#error').innerText();
    await t.screenshot({ path: join(shots, '11-error-wallet-changed-the-transaction.png'), fullPage: true });
    await t.close();
    // a Wallet Standard wallet (the test's own, signing in the page with WebCrypto): the page
    // connects through it and posts a digit it signs
    const w = await ctx.newPage();
    w.on('console', (m) => console.error(`[wallet page ${m.type()}] ${m.text()}`));
    const address = getAddressDecoder().decode(Uint8Array.from(keypair.slice(32)));
    await w.addInitScript(testWallet, { secret: keypair, address });
    await w.goto(wallet_url);
    await w.waitForSelector('#tokens', { timeout: 60_000 });
    const label = await w.locator('#wallet').innerText();
    if (!label.startsWith('E2E Wallet (Wallet Standard)')) throw new Error(`the page did not connect through the wallet: ${label}`);
    // a file this time: a batch of rows (BATCH) for the digits model
    await w.check('input[name=kind][value=files]');
    await w.selectOption('#file-model', 'digits');
    await w.setInputFiles('#file', process.env.BATCH);
    await w.click('#post-btn');
    await w.waitForFunction(() => (document.querySelector('#task-address')?.textContent ?? '—').length > 30, null, { timeout: 60_000 });
    walletTask = await w.locator('#task-address').innerText();
    if (await w.locator('#error').isVisible()) throw new Error(`posting through the wallet: ${await w.locator('#error').innerText()}`);
    await w.waitForSelector('#result-classes', { timeout: 300_000 });
    walletClasses = await w.$$eval('#result-classes tr', (rows) => rows.slice(1).map((r) => Number(r.querySelectorAll('td')[1].textContent)));
    await w.screenshot({ path: join(shots, '12-file-posted-through-a-wallet-classes.png'), fullPage: true });
    // the digit's task, long closed, opened by its address: read back from its transactions
    await w.fill('#open-address', digitTask);
    await w.click('#open-task button');
    await w.waitForFunction((t) => document.querySelector('#task-address')?.textContent === t && document.querySelector('#result-class'), digitTask, { timeout: 60_000 });
    fromHistory = { class: Number(await w.locator('#result-class').innerText()), status: await w.locator('#status').innerText() };
    await w.screenshot({ path: join(shots, '13-closed-task-read-from-its-history.png'), fullPage: true });
    await w.close();
  }

  console.log(JSON.stringify({ recentAfterDouble, quorumError, digit: { task: digitTask, class: digitClass }, sentences: { task: sentencesTask, texts: sentences, matrix }, perf, nodes: nodes - 1, tokensError, storeError, walletError, walletTask, walletClasses, tamperError, fromHistory, verifiedLine }));
} catch (e) {
  await shot('failure').catch(() => {});
  console.error(e);
  process.exitCode = 1;
} finally {
  await ctx.close();
}

/** A Wallet Standard wallet for the test, registered in the page before its scripts run: it
 * connects one account and signs transactions (its account is the fee payer, the first
 * signature) with the given keypair through WebCrypto's Ed25519; `tamper` changes the message
 * before signing, as a wallet adding its own instructions would. */
function testWallet({ secret, address, tamper = false }) {
  const seed = Uint8Array.from(secret.slice(0, 32));
  const pkcs8 = new Uint8Array([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20, ...seed]);
  const key = crypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, false, ['sign']);
  const account = { address, publicKey: Uint8Array.from(secret.slice(32)), chains: ['solana:localnet'], features: ['solana:signTransaction'] };
  const signTransaction = async (...inputs) =>
    Promise.all(
      inputs.map(async ({ transaction }) => {
        const tx = Uint8Array.from(transaction);
        if (tx[0] < 1 || tx[0] > 127) throw new Error('the test wallet reads one-byte signature counts');
        const message = tx.subarray(1 + 64 * tx[0]);
        // a wallet that "improves" the transaction: the last byte of its last instruction's data
        if (tamper) message[message.length - 1] ^= 1;
        const sig = new Uint8Array(await crypto.subtle.sign('Ed25519', await key, message));
        tx.set(sig, 1);
        return { signedTransaction: tx };
      }),
    );
  const wallet = {
    version: '1.0.0',
    name: 'E2E Wallet',
    icon: 'data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciLz4=',
    chains: ['solana:localnet'],
    accounts: [account],
    features: {
      'standard:connect': { version: '1.0.0', connect: async () => ({ accounts: [account] }) },
      'standard:events': { version: '1.0.0', on: () => () => {} },
      'solana:signTransaction': { version: '1.0.0', supportedTransactionVersions: ['legacy', 0], signTransaction },
    },
  };
  const callback = ({ register }) => register(wallet);
  window.dispatchEvent(new CustomEvent('wallet-standard:register-wallet', { detail: callback }));
  window.addEventListener('wallet-standard:app-ready', ({ detail }) => callback(detail));
}
