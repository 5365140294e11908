// The page end to end in Chromium (Debian's /usr/bin/chromium driven by playwright-core),
// against a running cluster with keepers: tests/tests/web.rs starts the validator, the keepers
// and the page, then runs this with PAGE (the page's URL with its settings) and SHOTS (the
// folder for screenshots). It draws a digit and posts it, waits for Accepted and the verified
// class; types sentences, waits for the similarity matrix; opens the market; provokes two
// errors a person can act on. The last stdout line is JSON of what the page showed, which
// the Rust test holds to the chain read over RPC.
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const page_url = process.env.PAGE;
const shots = process.env.SHOTS ?? 'test-artefacts/web';
if (!page_url) throw new Error('PAGE (the page URL) is required');
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
  await shot('01-connected');

  // a digit: a "1", one stroke down the pad
  const pad = await page.locator('#pad').boundingBox();
  await page.mouse.move(pad.x + pad.width * 0.55, pad.y + pad.height * 0.12);
  await page.mouse.down();
  await page.mouse.move(pad.x + pad.width * 0.45, pad.y + pad.height * 0.88, { steps: 25 });
  await page.mouse.up();
  await shot('02-digit-drawn');
  await page.click('#post-btn');
  const digitTask = await posted('—');
  await noError('posting the digit');
  await shot('03-digit-posted');
  await waitAccepted(digitTask, 'the digit');
  await page.waitForSelector('#result-class', { timeout: 120_000 });
  await page.waitForSelector('#timeline li[data-event=TaskFinalized]', { timeout: 60_000 });
  const digitClass = Number(await text('#result-class'));
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
  await page.fill('#reward', '18000000000000000000');
  await page.click('#post-btn');
  await page.waitForSelector('#error:not([hidden])');
  const tokensError = await text('#error');
  await shot('08-error-insufficient-tokens');
  await page.fill('#reward', '1000000');
  await page.fill('#store', 'http://127.0.0.1:9');
  await page.click('#connect-btn');
  await page.waitForFunction(() => !document.querySelector('#post-btn').disabled);
  await page.click('#post-btn');
  await page.waitForFunction(() => (document.querySelector('#error')?.textContent ?? '').startsWith('Unreachable'), null, { timeout: 30_000 });
  const storeError = await text('#error');
  await shot('09-error-unreachable-store');

  console.log(JSON.stringify({ digit: { task: digitTask, class: digitClass }, sentences: { task: sentencesTask, texts: sentences, matrix }, perf, nodes: nodes - 1, tokensError, storeError }));
} catch (e) {
  await shot('failure').catch(() => {});
  console.error(e);
  process.exitCode = 1;
} finally {
  await ctx.close();
}
