// The package as others install it: `npm pack` (which builds dist/ first) gives a tarball of
// the built module, its types and the README only; unpacked as a dependency of a scratch
// project, plain Node imports it by name and uses it.

import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const client = join(dirname(fileURLToPath(import.meta.url)), '..');
// inside app/, so that the scratch project finds the package's dependencies in app/node_modules
const scratch = join(client, '../.pack-test');

it('packs to an installable tarball that plain Node imports by name', () => {
  rmSync(scratch, { recursive: true, force: true });
  mkdirSync(scratch, { recursive: true });
  const [packed] = JSON.parse(
    execFileSync('npm', ['pack', '--json', '--pack-destination', scratch], { cwd: client, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }),
  );
  const files: string[] = packed.files.map((f: { path: string }) => f.path).sort();
  expect(files).toContain('dist/index.js');
  expect(files).toContain('dist/index.d.ts');
  expect(files).toContain('dist/client.d.ts');
  expect(files.every((f) => f.startsWith('dist/') || ['package.json', 'README.md'].includes(f)), `only dist/ and the manifest: ${files}`).toBe(true);
  const into = join(scratch, 'node_modules/@compute-market/client');
  mkdirSync(into, { recursive: true });
  execFileSync('tar', ['-xzf', join(scratch, packed.filename), '-C', into, '--strip-components=1']);
  expect(readdirSync(into).sort()).toEqual(readdirSync(into).sort().filter((f) => ['dist', 'package.json', 'README.md'].includes(f)));
  writeFileSync(join(scratch, 'package.json'), JSON.stringify({ name: 'scratch', private: true, type: 'module' }));
  writeFileSync(
    join(scratch, 'use.mjs'),
    `import { createComputeMarket, toUiAmount, parseUiAmount, encodeJobSpec, decodeJobSpec, JobKind, taskAddress } from '@compute-market/client';
const market = createComputeMarket({ network: 'localnet' });
const job = { kind: JobKind.HashBatch, inputMode: 0, dims: [4, 2, 1], rowsPerTile: 0, workPerRow: 0n, input: new Uint8Array(32) };
const back = decodeJobSpec(encodeJobSpec(job));
console.log(JSON.stringify({
  rpc: market.endpoints.rpc,
  program: market.programAddress,
  ui: toUiAmount(parseUiAmount('12.5', 6), 6),
  dims: back.dims,
  task: typeof (await taskAddress('9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM', 7n)),
}));
`,
  );
  const out = JSON.parse(execFileSync(process.execPath, ['use.mjs'], { cwd: scratch, encoding: 'utf8' }));
  expect(out).toMatchObject({ rpc: 'http://127.0.0.1:8899', ui: '12.5', dims: [4, 2, 1], task: 'string' });
  expect(out.program).toMatch(/^[1-9A-HJ-NP-Za-km-z]{32,44}$/);
  rmSync(scratch, { recursive: true, force: true });
}, 120_000);
