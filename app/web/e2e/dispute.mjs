// A page-posted sentences task overturned by the client's watcher, in Chromium: the Rust test
// (tests/tests/cluster.rs) starts a validator whose market holds verdicts for disputes, a
// provider that corrupts every embedding, seats that vouch without checking, the client's
// keeper watching its own tasks and a cranker; this confirms the link's settings, types four
// sentences, posts them (the summary signed), and follows the task past its Accepted verdict
// to the one the program's game gives. The page's job names the texts' token ids, so the
// program referees it as it does the CLI's. The last stdout line is JSON of what the page
// showed, which the Rust test holds to the chain.
import { openBrowser, pageUrl } from './browser.mjs';

const page_url = pageUrl(process.env.ORIGIN, process.env.SETTINGS);
const { ctx, page, shot, text } = await openBrowser(process.env.SHOTS ?? 'test-artefacts/web-dispute');
try {
  await page.goto(page_url);
  await page.waitForSelector('#link-settings:not([hidden])', { timeout: 30_000 });
  await page.click('#link-use');
  await page.waitForSelector('#tokens', { timeout: 60_000 });
  const sentences = ['A cat sleeps on the warm windowsill.', 'The kitten naps in the sun by the window.', 'Interest rates rose again this quarter.', 'The central bank raised borrowing costs.'];
  await page.click('[role=tablist] button[data-tab=post]');
  await page.check('input[name=kind][value=sentences]');
  await page.fill('#sentences', sentences.join('\n'));
  await page.click('#post-btn');
  await page.waitForSelector('#summary[open]', { timeout: 60_000 });
  await page.click('#summary-sign');
  await page.waitForFunction(() => (document.querySelector('#task-address')?.textContent ?? '—').length > 30, null, { timeout: 60_000 });
  const task = await text('#task-address');
  await shot('01-sentences-posted');
  // Accepted by the seats that vouched, then overturned: the page follows it to Rejected
  await page.waitForFunction(() => document.querySelector('#status')?.textContent === 'Accepted', null, { timeout: 300_000, polling: 500 });
  await shot('02-accepted-held');
  await page.waitForFunction(() => document.querySelector('#status')?.textContent === 'Rejected', null, { timeout: 600_000, polling: 1_000 });
  // the closing events arrive as the cranker concludes and closes the task
  await page.waitForSelector('#timeline li[data-event=TaskConcluded], #timeline li[data-event=TaskClosed]', { state: 'attached', timeout: 300_000 });
  await shot('03-overturned');
  const timeline = await page.$$eval('#timeline li', (li) => li.map((l) => `${l.dataset.event}: ${l.textContent}`));
  console.log(JSON.stringify({ task, status: await text('#status'), explain: await text('#explain'), timeline }));
} catch (e) {
  await shot('99-failed').catch(() => {});
  console.error(`failed: ${e.stack ?? e}`);
  process.exitCode = 1;
} finally {
  await ctx.close();
}
