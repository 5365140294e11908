// The package as others install it: `npm pack` (which builds dist/ first) gives a tarball of
// the built module, its types and the README only; unpacked as a dependency of a scratch
// project, plain Node imports it by name and uses it, and TypeScript under Node's own ESM
// resolution (`nodenext`) sees its types.

import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
  // a TypeScript consumer under Node's own ESM resolution sees the types
  writeFileSync(
    join(scratch, 'use.ts'),
    `import { generateJob, chatTokenizer, encoderJob, JobKind, type ModelInfo, type Sampling } from '@compute-market/client';
const s: Sampling = { temperature: 180, topK: 40, topP: 58_982, seed: 7n };
const k: JobKind = JobKind.Generate;
export const uses = [generateJob, chatTokenizer, encoderJob, s, k] as const;
export type M = ModelInfo;
`,
  );
  writeFileSync(
    join(scratch, 'tsconfig.json'),
    // skipLibCheck as projects set it: a dependency's own declarations are not this test's
    JSON.stringify({ compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', strict: true, noEmit: true, skipLibCheck: true, types: [] }, files: ['use.ts'] }),
  );
  execFileSync(process.execPath, [join(client, '../node_modules/typescript/bin/tsc'), '-p', scratch], { cwd: scratch, encoding: 'utf8' });
  // and every relative specifier of the package's declarations names its file
  const bare: string[] = [];
  const scan = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) scan(p);
      else if (e.name.endsWith('.d.ts')) {
        for (const m of readFileSync(p, 'utf8').matchAll(/(?:from|import)\s*\(?\s*['"](\.{1,2}(?:\/[^'"]*)?)['"]/g)) if (!m[1].endsWith('.js')) bare.push(`${p}: ${m[1]}`);
      }
    }
  };
  scan(join(into, 'dist'));
  expect(bare).toEqual([]);
  expect(out).toMatchObject({ rpc: 'http://127.0.0.1:8899', ui: '12.5', dims: [4, 2, 1], task: 'string' });
  expect(out.program).toMatch(/^[1-9A-HJ-NP-Za-km-z]{32,44}$/);
  rmSync(scratch, { recursive: true, force: true });
}, 120_000);
