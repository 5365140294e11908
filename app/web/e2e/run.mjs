// The page end to end in Chromium (Debian's /usr/bin/chromium driven by playwright-core),
// against a running cluster with keepers: the web test in tests/tests/cluster.rs starts the
// validator, the keepers and the page, then runs this with ORIGIN (the page's), SETTINGS (a
// file of its settings, handed over in the URL fragment as scripts/app does) and SHOTS (the
// folder for screenshots). It confirms the link's settings; draws a digit with the keyboard;
// draws the ten digits 0‥9 with the mouse and posts them as one task (a double click, the
// summary signed), cuts the page's websocket mid-task and follows the task to its verified
// classes; reloads (the tab reconnects and follows it again); types sentences; opens the
// market; runs axe-core on every tab at 1280 and 390 px and measures sideways scrolling;
// provokes errors a person can act on; and, with WALLET_PAGE, picks between two Wallet
// Standard wallets (one adds a compute-budget instruction: accepted; one changes an account:
// refused). The last stdout line is JSON of what the page showed, which the Rust test holds to
// the chain read over RPC.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { openBrowser, pageUrl, shotOf } from './browser.mjs';
import { getAddressDecoder } from '@solana/kit';
import { DIGIT_STROKES } from './digit-strokes.mjs';

const origin = process.env.ORIGIN;
const settingsFile = process.env.SETTINGS;
// WALLET_PAGE: the page's settings without a local keypair (a wallet must sign); KEYPAIR: the
// 64 bytes the test's Wallet Standard wallet signs with; BATCH: a batch file it uploads
const wallet_url = process.env.WALLET_PAGE;
const keypair = process.env.KEYPAIR ? JSON.parse(process.env.KEYPAIR) : null;
const shots = process.env.SHOTS ?? 'test-artefacts/web';
// VALIDATOR_PID: the validator the page talks to, frozen (SIGSTOP) for a few seconds and thawed
const validatorPid = process.env.VALIDATOR_PID ? Number(process.env.VALIDATOR_PID) : null;
const pageSettings = JSON.parse(readFileSync(settingsFile, 'utf8'));
const page_url = pageUrl(origin, settingsFile);
const { ctx, page, shot, text } = await openBrowser(shots);
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

// every websocket the page opens goes through here, so the test can cut them mid-task
const sockets = [];
let refuseSockets = false;
let socketAttempts = 0;
await page.routeWebSocket(/.*/, (ws) => {
  socketAttempts++;
  if (refuseSockets) return ws.close({ code: 1011, reason: 'the test refuses websockets' });
  ws.connectToServer();
  sockets.push(ws);
});
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
/** axe-core's serious and critical violations on `p` as it stands. */
const axeCheck = async (p, where) => {
  if (!(await p.evaluate(() => 'axe' in window))) await p.addScriptTag({ content: axeSource });
  const r = await p.evaluate(async () => {
    const res = await window.axe.run(document, { resultTypes: ['violations'] });
    return res.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 3) }));
  });
  if (r.length) console.error(`axe on ${where}: ${JSON.stringify(r)}`);
  // every level: minor and moderate too
  return r.map((v) => ({ ...v, where }));
};
/** Draws `strokes` (fractions of the pad) as a person with a mouse would. */
const drawStrokes = async (p, strokes) => {
  const pad = await p.locator('#pad').boundingBox();
  const at = ([x, y]) => [pad.x + pad.width * x, pad.y + pad.height * y];
  for (const s of strokes) {
    await p.mouse.move(...at(s[0]));
    await p.mouse.down();
    for (const pt of s.slice(1)) await p.mouse.move(...at(pt), { steps: 3 });
    await p.mouse.up();
  }
};
/** Numbers in base units on the page as it stands: a run of 7 or more digits standing alone
 * (a token amount in base units; addresses and signatures mix letters in). */
const baseUnits = (p) => p.evaluate(() => (document.querySelector('main')?.innerText.match(/(?<![\w.,])\d{7,}(?![\w.,])/g) ?? []));
/** Opens the settings and connects with `fields` changed. */
const settingsConnect = async (p, fields) => {
  await p.click('#settings-btn');
  await p.waitForSelector('#settings-dialog[open]');
  for (const [id, v] of Object.entries(fields)) await p.fill(`#${id}`, v);
  await p.click('#settings-save');
};
/** Confirms the summary before signing; returns its text. */
const signSummary = async (p) => {
  await p.waitForSelector('#summary[open]', { timeout: 60_000 });
  const said = await p.locator('#summary').innerText();
  await p.click('#summary-sign');
  return said;
};
/** Uses a link's settings once they are shown. */
const useLink = async (p) => {
  await p.waitForSelector('#link-settings:not([hidden])', { timeout: 30_000 });
  await p.click('#link-use');
};
const TABS = ['post', 'watch', 'mine', 'market'];
/** How much wider than its window the page is, on each tab. */
const overflow = async (p) => {
  const out = {};
  for (const t of TABS) {
    await p.click(`[role=tablist] [data-tab=${t}]`);
    await p.waitForTimeout(300);
    out[t] = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  }
  return out;
};

try {
  await page.goto(page_url);
  // a link's settings are shown and used only when confirmed
  await page.waitForSelector('#link-settings:not([hidden])', { timeout: 30_000 });
  const linkShown = await text('#link-settings');
  if (await page.locator('#tokens').count()) throw new Error('the page connected before the link was confirmed');
  await shot('00-link-settings-confirm');
  await page.click('#link-use');
  await page.waitForSelector('#tokens', { timeout: 60_000 });
  await noError('connect');
  if (page.url().includes('config=')) throw new Error(`the settings stay in the address bar: ${page.url()}`);
  const cluster = await page.evaluate(() => document.querySelector('#cluster').textContent);
  await shot('01-connected');
  const header = {
    network: await text('#network'),
    account: await text('#account-short'),
    accountLink: await page.getAttribute('#account-link', 'href'),
    connectHidden: await page.locator('#connect-btn').isHidden(),
  };

  // the faucet (localnet): SOL from the airdrop, tokens from the local faucet
  const tokensBefore = Number((await text('#tokens')).replace(/,/g, ''));
  await page.click('#faucet-btn');
  await page.waitForFunction(() => (document.querySelector('#faucet-said')?.textContent ?? '').startsWith('funded') || !document.querySelector('#error').hidden, null, { timeout: 60_000 });
  await noError('the faucet');
  await page.waitForFunction((b) => Number((document.querySelector('#tokens')?.textContent ?? '0').replace(/,/g, '')) > b, tokensBefore, { timeout: 30_000 });
  const faucet = { said: await text('#faucet-said'), tokensBefore, tokensAfter: Number((await text('#tokens')).replace(/,/g, '')) };
  await shot('01b-faucet-funded');

  // a frozen validator (SIGSTOP): the banner within 5 s, Post held with its reason; thawed,
  // the banner goes
  let frozen = null;
  if (validatorPid) {
    const stoppedAt = Date.now();
    process.kill(validatorPid, 'SIGSTOP');
    try {
      await page.waitForSelector('#rpc-banner:not([hidden])', { timeout: 15_000 });
      frozen = { bannerMs: Date.now() - stoppedAt, banner: await text('#rpc-banner'), postDisabled: await page.locator('#post-btn').isDisabled(), held: await text('#post-held') };
      await shot('01c-rpc-not-answering');
      await page.setViewportSize({ width: 390, height: 844 });
      await shot('mobile-390-rpc-not-answering');
      await page.setViewportSize({ width: 1280, height: 900 });
    } finally {
      process.kill(validatorPid, 'SIGCONT');
    }
    await page.waitForSelector('#rpc-banner', { state: 'hidden', timeout: 60_000 });
    frozen.thawedMs = Date.now() - stoppedAt;
    frozen.postEnabledAfter = await page.waitForFunction(() => !document.querySelector('#post-btn').disabled, null, { timeout: 30_000 }).then(() => true);
  }

  // the pad by keyboard: Space lowers the pen, the arrows draw, Space lifts it
  await page.focus('#pad');
  await page.keyboard.press('ArrowUp');
  await page.keyboard.press('ArrowUp');
  await page.keyboard.press('Space');
  for (let i = 0; i < 5; i++) await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Space');
  await page.click('#pad-add');
  const keyboardDrawn = await page.locator('#batch canvas').count();
  await page.click('#batch-clear');

  // the digits 0‥9, drawn with the mouse, one task
  for (const strokes of DIGIT_STROKES) {
    await drawStrokes(page, strokes);
    await page.click('#pad-add');
  }
  const batchCount = await page.locator('#batch canvas').count();
  await shot('02-digits-drawn');
  // a double click posts one task (the button is disabled while the post is in flight)
  await page.dblclick('#post-btn');
  const summary = await signSummary(page);
  const digitTask = await posted('—');
  const recentAfterDouble = await page.evaluate(() => JSON.parse(localStorage.getItem('cm.recent') ?? '[]').length);
  await noError('posting the digits');
  await shot('03-digits-posted');
  // the websocket cut mid-task, and refused for 3 s: the page polls, then subscribes again
  await page.waitForFunction(() => ['Claimed', 'Verifying'].includes(document.querySelector('#status')?.textContent ?? '') && document.querySelector('#connection')?.textContent === '(live)', null, { timeout: 120_000 });
  const cutAt = await text('#status');
  refuseSockets = true;
  const before = sockets.length;
  const attemptsBefore = socketAttempts;
  for (const ws of sockets) await ws.close({ code: 1006, reason: 'cut by the test' }).catch(() => {});
  await page.waitForFunction(() => (document.querySelector('#connection')?.textContent ?? '').includes('connection lost'), null, { timeout: 30_000 });
  await shot('03b-websocket-cut-polling');
  await page.waitForTimeout(3_000);
  const triedWhileRefused = socketAttempts - attemptsBefore;
  refuseSockets = false;
  // live again, unless the task ended first (polling followed it meanwhile)
  await page.waitForFunction(
    () => document.querySelector('#connection')?.textContent === '(live)' || ['Accepted', 'Rejected', 'Undecided', 'Expired'].includes(document.querySelector('#status')?.textContent ?? ''),
    null,
    { timeout: 60_000 },
  );
  const liveAgain = (await text('#connection')) === '(live)';
  await waitAccepted(digitTask, 'the digits');
  await page.waitForSelector('#result-classes', { timeout: 120_000 });
  const wsCut = { cutAt, triedWhileRefused, reopened: sockets.length - before, liveAgain };
  const digitClasses = await page.$$eval('#result-classes tr', (rows) => rows.slice(1).map((r) => Number(r.querySelectorAll('td')[1].textContent)));
  await page.waitForSelector('#timeline li[data-event=TaskFinalized]', { state: 'attached', timeout: 60_000 });
  const verifiedLine = await text('#verified');
  const stages = await page.$$eval('#stages li', (li) => li.map((l) => `${l.dataset.stage}:${l.className}`));
  await shot('04-digits-accepted-verified-classes');

  // a reload: the tab reconnects and follows the same task, without asking again
  await page.reload();
  await page.waitForSelector('#tokens', { timeout: 60_000 });
  await page.waitForFunction((t) => document.querySelector('#task-address')?.textContent === t && document.querySelector('#result-classes'), digitTask, { timeout: 60_000 });
  const reloaded = { linkAskedAgain: await page.locator('#link-settings').isVisible(), task: await text('#task-address') };
  await shot('05-reloaded-reconnected');

  // sentences: the similarity matrix
  const paragraph =
    'The old lighthouse on the northern cape has guided fishing boats home for more than a century, and the families who kept it passed the duty from parent to child. Every evening the keeper climbed the narrow spiral stairs, trimmed the wick, polished the great lens and watched the grey water for sails. In winter storms the waves reached the gallery and salt crusted the windows, yet the light never failed. When the coast guard installed an automatic lamp, the last keeper stayed on as a volunteer, guiding visitors up the stairs and telling them about the wrecks, the rescues and the long nights when the whole village waited on the shore for the fishing boats to come back safely.';
  const sentences = [
    'A cat sleeps on the warm windowsill.',
    'The kitten naps in the sun by the window.',
    'Interest rates rose again this quarter.',
    'The central bank raised borrowing costs.',
    'He scored the winning goal in the final minute.',
    'The striker netted a late winner for his team.',
    'Fresh bread smells wonderful in the morning.',
    'The bakery opens at six with warm loaves.',
    'A storm knocked out power across the city.',
    paragraph,
  ];
  const paragraphWords = paragraph.split(/\s+/).length;
  await page.click('[role=tablist] button[data-tab=post]');
  await page.check('input[name=kind][value=sentences]');
  await page.fill('#sentences', sentences.join('\n'));
  // ten texts, one of 150 tokens: about 20 G work units, above the test provider's floor
  await page.click('.terms summary');
  await page.fill('#reward', '10');
  await shot('06-sentences-typed');
  await page.click('#post-btn');
  await signSummary(page);
  const signedAt = Date.now();
  const sentencesTask = await posted(digitTask);
  await noError('posting the sentences');
  await waitAccepted(sentencesTask, 'the sentences');
  await page.waitForSelector('#similarity', { timeout: 120_000 });
  const postToVerifiedMs = Date.now() - signedAt;
  const matrix = await page.$$eval('#similarity tr', (rows) => rows.slice(1).map((r) => Array.from(r.querySelectorAll('td')).slice(1).map((c) => Number(c.dataset.value))));
  // the result first: above the transactions
  const resultFirst = await page.evaluate(() => document.querySelector('#result').getBoundingClientRect().top < document.querySelector('#timeline-box').getBoundingClientRect().top);
  const failedTx = { hidden: await page.locator('#timeline li[data-failed]').evaluateAll((l) => l.every((x) => getComputedStyle(x).display === 'none')), count: await page.locator('#timeline li[data-failed]').count(), said: await page.evaluate(() => document.querySelector('#failed-said').textContent) };
  await shot('07-sentences-accepted-similarity');

  // a message to SmolLM2: its verified completion shown under it
  const prompt = 'What is the capital of France? Answer in one sentence.';
  await page.click('[role=tablist] button[data-tab=post]');
  await page.check('input[name=kind][value=generate]');
  await page.fill('#prompt', prompt);
  await page.fill('#max-new', '24');
  // a generation is priced by its sequential decode: far more work than a digit
  await page.fill('#reward', '20');
  await shot('07d-message-typed');
  await page.click('#post-btn');
  await signSummary(page);
  const generateTask = await posted(sentencesTask);
  await noError('posting the message');
  // shown once the provider commits it, marked unverified, before the verdict
  await page.waitForSelector('#completion.unverified', { timeout: 120_000 });
  const early = { text: await text('#completion'), status: await text('#status'), line: await text('#unverified') };
  await shot('07d2-message-unverified');
  await waitAccepted(generateTask, 'the message');
  await page.waitForSelector('#completion', { timeout: 120_000 });
  await page.waitForSelector('#completion:not(.unverified)', { timeout: 60_000 });
  const generate = { task: generateTask, prompt, completion: await text('#completion'), asked: await text('#result .asked'), early };
  await shot('07e-message-answered');

  // a task no provider takes (one base unit, under the provider's floor): cancelled from the
  // page, and the ending explained
  await page.click('[role=tablist] button[data-tab=post]');
  await page.check('input[name=kind][value=digit]');
  await drawStrokes(page, DIGIT_STROKES[4]);
  await page.fill('#reward', '0.000001');
  await page.click('#post-btn');
  await signSummary(page);
  const cheapTask = await posted(generateTask);
  await page.waitForSelector('#cancel-btn:not([hidden])', { timeout: 60_000 });
  await shot('07b-open-task-cancel-button');
  await page.click('#cancel-btn');
  // status and explanation read in one instant: the page re-renders both as the task closes
  const ended = await page.waitForFunction(
    () => {
      const status = document.querySelector('#status')?.textContent ?? '';
      const explain = document.querySelector('#explain')?.textContent ?? '';
      return status === 'Cancelled' && explain.startsWith('Cancelled') && explain.includes('refunded') ? { status, explain } : null;
    },
    null,
    { timeout: 60_000 },
  );
  const cancelled = { task: cheapTask, ...(await ended.jsonValue()) };
  await shot('07c-cancelled-explained');

  // the market
  await page.click('[role=tablist] button[data-tab=market]');
  await page.waitForFunction(() => (document.querySelector('#perf')?.textContent ?? '').includes('⇒ P ='), null, { timeout: 60_000 });
  await page.waitForSelector('#nodes tr:nth-child(5)');
  const perf = await text('#perf');
  const nodes = await page.locator('#nodes tr').count();
  await shot('08-market');

  // my tasks: the wallet's, without pasting an address
  await page.click('[role=tablist] button[data-tab=mine]');
  await page.waitForFunction((t) => document.querySelector(`#mine li[data-task="${t}"]`), sentencesTask, { timeout: 60_000 });
  const mine = await page.$$eval('#mine li', (li) => li.map((l) => ({ task: l.dataset.task, text: l.textContent })));
  await shot('08b-my-tasks');
  // the sentences' task opened from there: its 10×10 heat map on screen for the layout checks
  await page.click(`#mine li[data-task="${sentencesTask}"] button`);
  await page.waitForFunction((t) => document.querySelector('#task-address')?.textContent === t && document.querySelector('#similarity'), sentencesTask, { timeout: 60_000 });

  // accessibility: axe-core on every tab, at 1280 px and at 390 px (every level); no sideways
  // scrolling at 390; no amount in base units on any tab
  const axe = [];
  const baseUnitsShown = {};
  await page.setViewportSize({ width: 1280, height: 900 });
  for (const t of TABS) {
    await page.click(`[role=tablist] [data-tab=${t}]`);
    await page.waitForTimeout(t === 'market' || t === 'mine' ? 2_000 : 300);
    axe.push(...(await axeCheck(page, `${t} at 1280 px`)));
    baseUnitsShown[t] = await baseUnits(page);
    await shot(`desktop-1280-${t}`);
  }
  await page.setViewportSize({ width: 390, height: 844 });
  const mobileOverflow = await overflow(page);
  // measured with the sentences' task on the Task tab: its 10×10 heat map on screen
  const heatAt390 = { task: await text('#task-address'), cells: await page.$$eval('#similarity td[data-value]', (c) => c.length) };
  for (const t of TABS) {
    await page.click(`[role=tablist] [data-tab=${t}]`);
    await page.waitForTimeout(300);
    axe.push(...(await axeCheck(page, `${t} at 390 px`)));
    await shot(`mobile-390-${t}`);
  }
  // the dialogs, at 390 px too
  await page.click('#settings-btn');
  await page.waitForSelector('#settings-dialog[open]');
  axe.push(...(await axeCheck(page, 'settings at 390 px')));
  await shot('mobile-390-settings');
  await page.click('#settings-close');
  await page.setViewportSize({ width: 1280, height: 900 });

  // errors a person can act on, beside the button: too few tokens; a quorum the market cannot
  // seat; an unreachable content store
  await page.click('[role=tablist] button[data-tab=post]');
  await drawStrokes(page, DIGIT_STROKES[1]);
  await page.fill('#reward', '1000000000');
  await page.click('#post-btn');
  await page.waitForSelector('#post-error:not([hidden])');
  const tokensError = await text('#post-error');
  await shot('09-error-insufficient-tokens');
  await page.fill('#reward', '1');
  await page.fill('#quorum', '15');
  await page.click('#post-btn');
  await page.waitForFunction(() => (document.querySelector('#post-error')?.textContent ?? '').includes('Quorum V'), null, { timeout: 30_000 });
  const quorumError = await text('#post-error');
  await shot('09b-error-quorum-above-the-verifiers');
  await page.fill('#quorum', '0');
  // a market that does not exist: named on connect
  await settingsConnect(page, { 'market-id': '999' });
  await page.waitForFunction(() => (document.querySelector('#error')?.textContent ?? '').includes('999'), null, { timeout: 30_000 });
  const marketError = { error: await text('#error'), wallet: await text('#wallet') };
  await shot('10a-error-market-does-not-exist');
  // a dead cluster: one cause, and no "Connecting…" left above it
  await settingsConnect(page, { 'market-id': '1', rpc: 'http://127.0.0.1:9' });
  await page.waitForFunction(() => (document.querySelector('#error')?.textContent ?? '').includes('does not answer'), null, { timeout: 30_000 });
  const deadError = { error: await text('#error'), wallet: await text('#wallet') };
  await shot('10b-error-dead-cluster');
  await settingsConnect(page, { rpc: pageSettings.rpc, store: 'http://127.0.0.1:9' });
  await page.waitForFunction(() => !document.querySelector('#post-btn').disabled, null, { timeout: 60_000 });
  await page.click('#post-btn');
  await page.waitForFunction(() => (document.querySelector('#post-error')?.textContent ?? '').startsWith('Unreachable'), null, { timeout: 30_000 });
  const storeError = await text('#post-error');
  await shot('10-error-unreachable-store');

  // broken links: one sentence each, never a parser's words or "undefined"
  const links = {};
  for (const [name, url] of [
    ['cut', `${page_url.slice(0, Math.floor(page_url.length * 0.6))}`],
    ['junk', `${origin}/#config=not-settings-at-all`],
    ['unreachable', `${origin}/?config=http://127.0.0.1:9/settings.json`],
    ['missing', `${origin}/?config=/no-such-settings.json`],
  ]) {
    const b = await ctx.newPage();
    await b.goto(url);
    await b.waitForSelector('#error:not([hidden])', { timeout: 30_000 });
    links[name] = await b.locator('#error').innerText();
    await shotOf(b, shots, `10c-broken-link-${name}`);
    await b.close();
  }

  let walletError = null;
  let walletTask = null;
  let walletClasses = null;
  let tamperError = null;
  let fromHistory = null;
  let chooser = null;
  let budgetAdded = null;
  let walletEvents = null;
  let rejected = null;
  let uploadsBeforeSign = null;
  if (wallet_url && keypair) {
    // no wallet at all: the chooser says so
    const bare = await ctx.newPage();
    await bare.goto(wallet_url);
    await useLink(bare);
    await bare.waitForSelector('#wallet-dialog[open] #wallet-none:not([hidden])', { timeout: 30_000 });
    walletError = await bare.locator('#wallet-none').innerText();
    await shotOf(bare, shots, '11-error-no-wallet');
    await bare.close();
    // two wallets: one adds a compute-budget instruction (accepted), one changes an account
    // (refused); the second registers after the page has loaded
    const w = await ctx.newPage();
    w.on('console', (m) => console.error(`[wallet page ${m.type()}] ${m.text()}`));
    const address = getAddressDecoder().decode(Uint8Array.from(keypair.slice(32)));
    await w.addInitScript(testWallets, { secret: keypair, address });
    // every upload to the content store, with when it was made
    const puts = [];
    w.on('request', (r) => r.method() === 'PUT' && r.url().startsWith(pageSettings.store.replace(/\/$/, '')) && puts.push(Date.now()));
    await w.goto(wallet_url);
    await w.waitForSelector('#link-settings:not([hidden])', { timeout: 30_000 });
    await w.click('#link-use');
    await w.waitForSelector('#wallet-dialog[open]', { timeout: 10_000 });
    await w.waitForFunction(() => document.querySelectorAll('#wallet-list button').length === 2, null, { timeout: 10_000 });
    chooser = await w.$$eval('#wallet-list button', (o) => o.map((x) => x.dataset.wallet));
    const icons = await w.$$eval('#wallet-list button img', (i) => i.length);
    await shotOf(w, shots, '11b-wallet-chooser');
    await w.click('#wallet-list button[data-wallet="Tamper Wallet"]');
    await w.waitForSelector('#tokens', { timeout: 60_000 });
    const tamperLabel = await w.locator('#wallet').innerText();
    if (!tamperLabel.startsWith('Tamper Wallet (Wallet Standard)')) throw new Error(`the page did not connect through the chosen wallet: ${tamperLabel}`);
    await drawStrokes(w, DIGIT_STROKES[7]);
    await w.click('#post-btn');
    await signSummary(w);
    await w.waitForSelector('#post-error:not([hidden])', { timeout: 30_000 });
    tamperError = await w.locator('#post-error').innerText();
    await shotOf(w, shots, '12-error-wallet-changed-an-account');
    // the other wallet, chosen and connected
    await w.click('#disconnect-btn');
    await w.click('#connect-btn');
    await w.waitForSelector('#wallet-dialog[open]');
    await w.click('#wallet-list button[data-wallet="Budget Wallet"]');
    await w.waitForFunction(() => (document.querySelector('#wallet')?.textContent ?? '').startsWith('Budget Wallet') && document.querySelector('#tokens'), null, { timeout: 60_000 });
    await shotOf(w, shots, '13-wallet-chooser-budget-wallet');
    // a file this time: a batch of rows (BATCH) for the digits model
    await w.check('input[name=kind][value=files]');
    await w.selectOption('#file-model', 'digits');
    await w.setInputFiles('#file', process.env.BATCH);
    // first the person says no in the wallet: named, and nothing uploaded
    const putsBefore = puts.length;
    await w.evaluate(() => (window.__rejectNext = true));
    await w.click('#post-btn');
    await signSummary(w);
    await w.waitForSelector('#post-error:not([hidden])', { timeout: 30_000 });
    rejected = { error: await w.locator('#post-error').innerText(), uploads: puts.length - putsBefore, icons };
    await shotOf(w, shots, '12b-wallet-rejected');
    // then yes: the uploads only after the wallet signed
    const putsAfterReject = puts.length;
    await w.click('#post-btn');
    await signSummary(w);
    await w.waitForFunction(() => (document.querySelector('#task-address')?.textContent ?? '—').length > 30, null, { timeout: 60_000 });
    walletTask = await w.locator('#task-address').innerText();
    if (await w.locator('#post-error').isVisible()) throw new Error(`posting through the wallet: ${await w.locator('#post-error').innerText()}`);
    await w.waitForSelector('#result-classes', { timeout: 300_000 });
    walletClasses = await w.$$eval('#result-classes tr', (rows) => rows.slice(1).map((r) => Number(r.querySelectorAll('td')[1].textContent)));
    budgetAdded = await w.evaluate(() => window.__budgetAdded ?? 0);
    const signedAt = await w.evaluate(() => window.__signedAt ?? []);
    const after = puts.slice(putsAfterReject);
    uploadsBeforeSign = { uploads: after.length, before: after.filter((t) => t < signedAt.at(-1)).length, signed: signedAt.length };
    await shotOf(w, shots, '14-file-posted-through-a-wallet-classes');
    // the digits' task, long closed, opened by its address: read back from its transactions
    await w.click('[role=tablist] button[data-tab=watch]');
    await w.click('.open-task summary');
    await w.fill('#open-address', digitTask);
    await w.click('#open-task button');
    await w.waitForFunction((t) => document.querySelector('#task-address')?.textContent === t && document.querySelector('#result-classes'), digitTask, { timeout: 60_000 });
    fromHistory = {
      classes: await w.$$eval('#result-classes tr', (rows) => rows.slice(1).map((r) => Number(r.querySelectorAll('td')[1].textContent))),
      status: await w.locator('#status').innerText(),
    };
    await shotOf(w, shots, '15-closed-task-read-from-its-history');
    // the wallet switches network, then disconnects itself: the page stops posting and says so
    await w.evaluate(() => window.__walletChange('Budget Wallet', { chains: ['solana:devnet'] }));
    await w.waitForFunction(() => (document.querySelector('#error')?.textContent ?? '').includes('switched to solana:devnet'), null, { timeout: 10_000 });
    walletEvents = { chain: await w.locator('#error').innerText(), postDisabled: await w.locator('#post-btn').isDisabled() };
    await w.evaluate(() => window.__walletChange('Budget Wallet', { chains: ['solana:localnet'] }));
    await w.waitForFunction(() => !document.querySelector('#post-btn').disabled && document.querySelector('#error').hidden, null, { timeout: 10_000 });
    walletEvents.backOnChain = true;
    await w.evaluate(() => window.__walletChange('Budget Wallet', { accounts: [] }));
    await w.waitForFunction(() => document.querySelector('#wallet')?.textContent === 'Not connected.' && (document.querySelector('#error')?.textContent ?? '').includes('disconnected'), null, { timeout: 10_000 });
    walletEvents.disconnected = await w.locator('#error').innerText();
    await shotOf(w, shots, '16-wallet-disconnected-itself');
    // connected again through the chooser, then the Disconnect button: a reload stays disconnected
    await w.click('#connect-btn');
    await w.waitForSelector('#wallet-dialog[open]');
    await w.click('#wallet-list button[data-wallet="Budget Wallet"]');
    await w.waitForSelector('#tokens', { timeout: 60_000 });
    await w.click('#disconnect-btn');
    await w.waitForFunction(() => document.querySelector('#wallet')?.textContent === 'Not connected.', null, { timeout: 10_000 });
    walletEvents.disconnects = await w.evaluate(() => window.__walletDisconnects?.['Budget Wallet'] ?? 0);
    await w.reload();
    await w.waitForTimeout(2_000);
    walletEvents.afterReload = await w.locator('#wallet').innerText();
    await w.close();
  }

  console.log(
    JSON.stringify({ heatAt390, header, faucet, frozen, paragraphWords, resultFirst, failedTx, mine, baseUnitsShown, marketError, deadError, links, rejected, uploadsBeforeSign, linkShown, cluster, cancelled, postToVerifiedMs, keyboardDrawn, batchCount, summary, recentAfterDouble, wsCut, stages, reloaded, quorumError, digits: { task: digitTask, classes: digitClasses }, sentences: { task: sentencesTask, texts: sentences, matrix }, generate, perf, nodes: nodes - 1, axe, mobileOverflow, tokensError, storeError, walletError, chooser, walletTask, walletClasses, budgetAdded, walletEvents, tamperError, fromHistory, verifiedLine }),
  );
} catch (e) {
  await shot('failure').catch(() => {});
  console.error(e);
  process.exitCode = 1;
} finally {
  await ctx.close();
}

/** Two Wallet Standard wallets for the test, registered in the page before its scripts run
 * (the second 300 ms later, as a slow extension would), both signing with the given keypair
 * through WebCrypto's Ed25519 (their account is the fee payer, the first signature):
 * "Budget Wallet" adds a compute-budget instruction (a priority fee of its own) before it
 * signs, as Phantom documents; "Tamper Wallet" replaces an account of the message. */
function testWallets({ secret, address }) {
  const seed = Uint8Array.from(secret.slice(0, 32));
  const pkcs8 = new Uint8Array([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20, ...seed]);
  const key = crypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, false, ['sign']);
  // compact-u16, the message's lengths
  const readLen = (b, at) => {
    let v = 0;
    for (let i = 0; ; i++) {
      const x = b[at + i];
      v |= (x & 0x7f) << (7 * i);
      if (!(x & 0x80)) return [v, at + i + 1];
    }
  };
  /** A v0 message with a SetComputeUnitPrice instruction added after the others. */
  const addPriorityFee = (m) => {
    if (m[0] !== 0x80) throw new Error('the test wallet reads v0 messages');
    let [keys, at] = readLen(m, 4);
    at += 32 * keys + 32; // the keys and the blockhash
    const countAt = at;
    let n;
    [n, at] = readLen(m, at);
    if (n > 126) throw new Error('the test wallet reads up to 126 instructions');
    let budgetIndex = -1;
    for (let i = 0; i < n; i++) {
      const program = m[at];
      let accounts, len;
      [accounts, at] = readLen(m, at + 1);
      at += accounts;
      [len, at] = readLen(m, at);
      // the page's SetComputeUnitLimit (2, u32): its program is the Compute Budget program
      if (len === 5 && m[at] === 2) budgetIndex = program;
      at += len;
    }
    if (budgetIndex < 0) throw new Error('no compute-unit limit to find the Compute Budget program by');
    const price = [3, 0xe8, 0x03, 0, 0, 0, 0, 0, 0]; // 1 000 micro-lamports a unit
    const out = new Uint8Array(m.length + 3 + price.length);
    out.set(m.subarray(0, at));
    out[countAt] = n + 1;
    out.set([budgetIndex, 0, price.length, ...price], at);
    out.set(m.subarray(at), at + 3 + price.length);
    return out;
  };
  /** The message with its last account key replaced. */
  const changeAccount = (m) => {
    const [keys, at] = readLen(m, 4);
    const out = Uint8Array.from(m);
    out.fill(7, at + 32 * (keys - 1), at + 32 * keys);
    return out;
  };
  // what the test makes a wallet announce (standard:events 'change'), by wallet name
  const listeners = {};
  window.__walletChange = (name, props) => (listeners[name] ?? []).forEach((l) => l(props));
  const wallet = (name, change) => {
    const account = { address, publicKey: Uint8Array.from(secret.slice(32)), chains: ['solana:localnet'], features: ['solana:signTransaction'] };
    const signTransaction = async (...inputs) => {
      if (window.__rejectNext) {
        window.__rejectNext = false;
        throw Object.assign(new Error('User rejected the request.'), { code: 4001 });
      }
      (window.__signedAt ??= []).push(Date.now());
      return Promise.all(
        inputs.map(async ({ transaction }) => {
          const tx = Uint8Array.from(transaction);
          if (tx[0] < 1 || tx[0] > 127) throw new Error('the test wallet reads one-byte signature counts');
          const head = 1 + 64 * tx[0];
          const message = change(tx.subarray(head));
          const sig = new Uint8Array(await crypto.subtle.sign('Ed25519', await key, message));
          const out = new Uint8Array(head + message.length);
          out.set(tx.subarray(0, head));
          out.set(sig, 1);
          out.set(message, head);
          return { signedTransaction: out };
        }),
      );
    };
    return {
      version: '1.0.0',
      name,
      icon: 'data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciLz4=',
      chains: ['solana:localnet'],
      accounts: [account],
      features: {
        'standard:connect': { version: '1.0.0', connect: async () => ({ accounts: [account] }) },
        'standard:events': {
          version: '1.0.0',
          on: (event, listener) => {
            const all = (listeners[name] ??= []);
            if (event === 'change') all.push(listener);
            return () => all.splice(all.indexOf(listener), 1);
          },
        },
        'standard:disconnect': {
          version: '1.0.0',
          disconnect: async () => {
            const d = (window.__walletDisconnects ??= {});
            d[name] = (d[name] ?? 0) + 1;
          },
        },
        'solana:signTransaction': { version: '1.0.0', supportedTransactionVersions: ['legacy', 0], signTransaction },
      },
    };
  };
  const budget = wallet('Budget Wallet', (m) => {
    window.__budgetAdded = (window.__budgetAdded ?? 0) + 1;
    return addPriorityFee(m);
  });
  const tamper = wallet('Tamper Wallet', changeAccount);
  const register = (w) => {
    const callback = ({ register }) => register(w);
    window.dispatchEvent(new CustomEvent('wallet-standard:register-wallet', { detail: callback }));
    window.addEventListener('wallet-standard:app-ready', ({ detail }) => callback(detail));
  };
  register(budget);
  setTimeout(() => register(tamper), 300);
}
