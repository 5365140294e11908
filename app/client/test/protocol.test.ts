// The client's encoders against the Rust ones, both ways (keeper/tests/ts_fixtures.rs): every
// job spec, refused spec and manifest Rust wrote is read here byte for byte; what this test
// writes (ts-written.json) Rust decodes. UPDATE_FIXTURES=1 rewrites ts-written.json.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  decodeJobSpec,
  decodeManifest,
  encodeJobSpec,
  encodeManifest,
  encoderWorkPerToken,
  decoderWorkPerToken,
  InputMode,
  JobError,
  JobKind,
  type JobSpec,
  manifestHash,
  partOf,
  Role,
  tileCount,
  tileLen,
  work,
  checkForJob,
  ManifestError,
} from '../src';

const dir = join(__dirname, 'fixtures');
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const unhex = (s: string) => new Uint8Array(Buffer.from(s, 'hex'));
const rust = JSON.parse(readFileSync(join(dir, 'rust-written.json'), 'utf8'));

function jobJson(j: JobSpec) {
  return {
    hex: hex(encodeJobSpec(j)),
    kind: j.kind,
    inputMode: j.inputMode,
    dims: j.dims,
    input: hex(j.input),
    rowsPerTile: j.rowsPerTile,
    workPerRow: j.workPerRow.toString(),
    tileCount: tileCount(j),
    tileLen: tileLen(j),
    work: work(j).toString(),
  };
}

describe('job specs', () => {
  it('decode and re-encode every spec Rust wrote, with its tiles and work', () => {
    expect(rust.jobs.length).toBeGreaterThanOrEqual(6);
    for (const j of rust.jobs) {
      const spec = decodeJobSpec(unhex(j.hex));
      expect(jobJson(spec)).toEqual(j);
      expect(typeof spec.workPerRow).toBe('bigint');
    }
  });

  it('refuse every spec Rust refused, by the same rule', () => {
    for (const r of rust.rejected) {
      let caught: unknown;
      try {
        decodeJobSpec(unhex(r.hex));
      } catch (e) {
        caught = e;
      }
      expect(caught).toBeInstanceOf(JobError);
      expect((caught as JobError).kind).toBe(r.error);
    }
  });

  it("price an encoder's tokens as Rust does", () => {
    for (const w of rust.encoderWork) {
      const v = encoderWorkPerToken(BigInt(w.blocks), BigInt(w.h), BigInt(w.f), BigInt(w.heads), BigInt(w.limit));
      expect(v.toString()).toBe(w.value);
    }
  });
});

describe('input manifests', () => {
  it('encode, hash (WebCrypto) and decode the manifests Rust wrote', async () => {
    for (const m of rust.manifests) {
      const parts = await Promise.all(m.parts.map((p: any) => partOf(p.role as Role, unhex(p.content))));
      const bytes = encodeManifest(parts);
      expect(hex(bytes)).toBe(m.hex);
      expect(hex(await manifestHash(parts))).toBe(m.hash);
      const back = decodeManifest(bytes);
      expect(back.map((p) => p.role)).toEqual([...parts].sort((a, b) => a.role - b.role).map((p) => p.role));
    }
  });

  it('refuse malformed bytes and parts that do not fit the job, by name', async () => {
    const texts = await partOf(Role.Texts, new TextEncoder().encode('one\n'));
    const model = await partOf(Role.Model, new Uint8Array([1, 2, 3]));
    const good = encodeManifest([texts, model]);
    const bad = good.slice();
    bad[8 + 44 + 1] = 1; // texts marked safetensors
    expect(() => decodeManifest(bad)).toThrow('part 1 is Safetensors, it must be Text');
    const magic = good.slice();
    magic[0] = 0;
    expect(() => decodeManifest(magic)).toThrow('no CMIN magic');
    const mlp = decodeJobSpec(unhex(rust.jobs.find((j: any) => j.kind === JobKind.Mlp).hex));
    expect(() => checkForJob(decodeManifest(good), mlp)).toThrow(ManifestError);
    expect(() => checkForJob(decodeManifest(good), mlp)).toThrow('parts [Model, Texts], the job takes [Model, Batch]');
  });
});

describe('what the client writes, Rust reads', () => {
  it('matches the checked-in ts-written.json', async () => {
    const input = await manifestHash([await partOf(Role.Model, new Uint8Array([9])), await partOf(Role.Texts, new TextEncoder().encode('hello\n'))]);
    const jobs: JobSpec[] = [
      { kind: JobKind.MatMulModP, inputMode: InputMode.Generated, dims: [1000, 513, 1025], input: new Uint8Array(32).fill(3), rowsPerTile: 0, workPerRow: 0n },
      { kind: JobKind.HashBatch, inputMode: InputMode.Generated, dims: [65_536, 4_096, 1_024], input: new Uint8Array(32).fill(0xee), rowsPerTile: 0, workPerRow: 0n },
      { kind: JobKind.Mlp, inputMode: InputMode.ContentHash, dims: [4_096, 64, 10], input, rowsPerTile: 8, workPerRow: 9_472n },
      {
        kind: JobKind.Encoder,
        inputMode: InputMode.ContentHash,
        dims: [1_024, 128, 384],
        input,
        rowsPerTile: 2,
        workPerRow: encoderWorkPerToken(6n, 384n, 1536n, 12n, 128n),
      },
      {
        kind: JobKind.Generate,
        inputMode: InputMode.ContentHash,
        dims: [5, 1_900, 148],
        input,
        rowsPerTile: 1,
        workPerRow: decoderWorkPerToken(30n, 576n, 1536n, 9n, 3n, 64n, 49_152n, 2_048n),
      },
    ];
    const manifests = [
      [{ role: Role.A, content: 'aa' }, { role: Role.B, content: 'bbbb' }],
      [{ role: Role.Texts, content: hex(new TextEncoder().encode('héllo\nwörld\n')) }, { role: Role.Model, content: '00'.repeat(100) }],
    ];
    const written = {
      jobs: jobs.map((j) => jobJson(decodeJobSpec(encodeJobSpec(j)))),
      manifests: await Promise.all(
        manifests.map(async (parts) => {
          const ps = await Promise.all(parts.map((p) => partOf(p.role, unhex(p.content))));
          return { parts, hex: hex(encodeManifest(ps)), hash: hex(await manifestHash(ps)) };
        }),
      ),
    };
    const path = join(dir, 'ts-written.json');
    if (process.env.UPDATE_FIXTURES) writeFileSync(path, JSON.stringify(written, null, 2) + '\n');
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual(JSON.parse(JSON.stringify(written)));
  });
});
