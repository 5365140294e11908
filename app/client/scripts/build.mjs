// Builds the package to dist/: one ESM module bundled by esbuild from src/ (the @solana
// packages left as dependencies), which Node and bundlers load alike, and the type
// declarations by tsc.
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
// Node's ESM resolution (TypeScript's `nodenext`) takes no extensionless relative specifiers:
// each one in the declarations is given the file it names (`./x.js`, `./x/index.js`), so a
// consumer under `nodenext` sees the types as a bundler's does
function fullySpecified(dir) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) fullySpecified(path);
    else if (e.name.endsWith('.d.ts')) {
      const text = readFileSync(path, 'utf8').replace(/((?:from|import)\s*\(?\s*)(['"])(\.{1,2}(?:\/[^'"]*)?)\2/g, (m, lead, q, spec) => {
        if (spec.endsWith('.js')) return m;
        if (existsSync(join(dir, `${spec}.d.ts`))) return `${lead}${q}${spec}.js${q}`;
        if (existsSync(join(dir, spec, 'index.d.ts'))) return `${lead}${q}${spec}/index.js${q}`;
        throw new Error(`${path}: the declaration's specifier ${spec} names no file`);
      });
      writeFileSync(path, text);
    }
  }
}
fullySpecified(join(root, 'dist'));
console.error('built dist/index.js and dist/index.d.ts');
