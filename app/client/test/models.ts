// The integer models scripts/setup makes in the cache (the keeper's tests read them too).
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

/** A model file of the cache, read whole; its absence named with what makes it. */
export function cachedModel(file: string): Uint8Array {
  const path = join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'compute-market', 'models', file);
  if (!existsSync(path)) throw new Error(`${path} is missing: scripts/setup makes it`);
  return new Uint8Array(readFileSync(path));
}
