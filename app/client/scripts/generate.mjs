// Generates src/generated from the checked-in IDL (../../idl/compute_market.json) with Codama
// onto @solana/kit. `--check` renders into a scratch folder and fails when the committed
// client differs (CI runs it, like `scripts/idl --check` for the IDL itself).
import { createFromRoot, updateDefinedTypesVisitor } from 'codama';
import { rootNodeFromAnchor } from '@codama/nodes-from-anchor';
import { renderVisitor } from '@codama/renderers-js';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, '..');
const idl = JSON.parse(readFileSync(join(pkg, '../../idl/compute_market.json'), 'utf8'));
const check = process.argv.includes('--check');

function files(dir) {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

const out = check ? mkdtempSync(join(tmpdir(), 'cm-client-')) : pkg;
const codama = createFromRoot(rootNodeFromAnchor(idl));
// the IDL's `MarketArgs` (create_market's arguments) would clash with the `MarketArgs` Codama
// derives for the `Market` account's fields: it is `CreateMarketSettings` in TypeScript
codama.update(updateDefinedTypesVisitor({ marketArgs: { name: 'createMarketSettings' } }));
await codama.accept(renderVisitor(out, { formatCode: false, syncPackageJson: false }));
if (!check) {
  console.log(`generated ${files(join(pkg, 'src/generated')).length} files in src/generated`);
  process.exit(0);
}
const want = join(out, 'src/generated');
const have = join(pkg, 'src/generated');
const rel = (root) => new Set(files(root).map((f) => relative(root, f)));
const [w, h] = [rel(want), rel(have)];
const stale = [...new Set([...w, ...h])].filter(
  (f) => !w.has(f) || !h.has(f) || readFileSync(join(want, f), 'utf8') !== readFileSync(join(have, f), 'utf8'),
);
rmSync(out, { recursive: true, force: true });
if (stale.length) {
  console.error(`app/client/src/generated is stale against idl/compute_market.json (${stale.join(', ')}): run npm run generate`);
  process.exit(1);
}
console.log(`app/client/src/generated matches the IDL (${w.size} files)`);
