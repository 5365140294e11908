// The browser the page's end-to-end scripts drive: Debian's Chromium through playwright-core,
// headless, every background connection off (this network refuses them), a fresh profile; the
// page's console and errors on stderr; screenshots into `shots`, each at 1280 and 390 px.
import { mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

/** The page's address with its settings file handed over in the fragment (as scripts/app does). */
export function pageUrl(origin, settingsFile) {
  if (!origin || !settingsFile) throw new Error('ORIGIN (the page) and SETTINGS (its settings file) are required');
  return `${origin}/#config=${Buffer.from(readFileSync(settingsFile)).toString('base64url')}`;
}

/** `page` as it stands, at the desktop's width and at a phone's (390 px, then back):
 * `name.png` and `name-390.png` in `shots`. */
export async function shotOf(page, shots, name) {
  const size = page.viewportSize();
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  if (size && size.width !== 390) {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: join(shots, `${name}-390.png`), fullPage: true });
    await page.setViewportSize(size);
  }
  console.error(`screenshot ${name}.png`);
}

/** A browser context and its first page, with `shot(name)` and `text(selector)`. */
export async function openBrowser(shots) {
  mkdirSync(shots, { recursive: true });
  const flags = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];
  const ctx = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'cm-chromium-')), {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: flags,
    viewport: { width: 1280, height: 900 },
  });
  const page = ctx.pages()[0] ?? (await ctx.newPage());
  page.on('console', (m) => console.error(`[page ${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => console.error(`[page error] ${e.message}`));
  const shot = (name) => shotOf(page, shots, name);
  const text = (sel) => page.locator(sel).innerText();
  return { ctx, page, shot, text };
}
