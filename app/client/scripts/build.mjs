// Builds the package to dist/: one ESM module bundled by esbuild from src/ (the @solana
// packages left as dependencies), which Node and bundlers load alike, and the type
// declarations by tsc.
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
rmSync(join(root, 'dist'), { recursive: true, force: true });
await build({
  entryPoints: [join(root, 'src/index.ts')],
  outfile: join(root, 'dist/index.js'),
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  target: 'es2022',
  external: ['@solana/*', '@solana-program/*'],
  sourcemap: true,
  logLevel: 'warning',
});
execFileSync(process.execPath, [join(root, '../node_modules/typescript/bin/tsc'), '-p', join(root, 'tsconfig.build.json')], { stdio: ['ignore', 2, 2] });
console.error('built dist/index.js and dist/index.d.ts');
