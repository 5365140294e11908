// The browser the page's end-to-end scripts drive: Debian's Chromium through playwright-core,
// headless, every background connection off (this network refuses them), a fresh profile; the
// page's console and errors on stderr; screenshots into `shots`.
import { mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

/** The page's address with its settings file handed over in the fragment (as scripts/app does). */
export function pageUrl(origin, settingsFile) {
  if (!origin || !settingsFile) throw new Error('ORIGIN (the page) and SETTINGS (its settings file) are required');
  return `${origin}/#config=${Buffer.from(readFileSync(settingsFile)).toString('base64url')}`;
}

/** A browser context and its first page, with `shot(name)` and `text(selector)`. */
export async function openBrowser(shots) {
  mkdirSync(shots, { recursive: true });
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
  return { ctx, page, shot, text };
}
