// The client's tokenizers (src/tokenize.ts: tokenizers.js over the tokenizer each model file
// carries) against the keeper's, id for id, on 376 texts of many scripts
// (keeper/tests/ts_fixtures.rs writes test/fixtures/token-ids.json): MiniLM's WordPiece with
// [CLS] and [SEP], SmolLM2's byte-level BPE, and SmolLM2's prompts in its chat template. The
// model files are the ones scripts/setup makes in the cache (the keeper's tests read them too).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { chatTokenizer, encoderTokenizer, promptIds, tensorBytes, tensorText, tokenIds } from '../src';
import { cachedModel as model } from './models';

const fixture = JSON.parse(readFileSync(join(__dirname, 'fixtures', 'token-ids.json'), 'utf8')) as {
  texts: string[];
  minilm: number[][];
  smollm2: number[][];
  smollm2Chat: number[][];
};

describe('token ids as the keeper computes them', () => {
  it('holds hundreds of texts of many scripts', () => {
    expect(fixture.texts.length).toBeGreaterThan(300);
    // scripts beyond Latin among them
    for (const re of [/\p{Script=Han}/u, /\p{Script=Cyrillic}/u, /\p{Script=Arabic}/u, /\p{Extended_Pictographic}/u]) {
      expect(fixture.texts.some((t) => re.test(t))).toBe(true);
    }
  });

  it("MiniLM's WordPiece from its model file's vocabulary", () => {
    const tok = encoderTokenizer(tensorText(model('minilm-int8.safetensors'), 'vocab'));
    const got = fixture.texts.map((t) => tokenIds(tok, t, true));
    got.forEach((ids, i) => expect(ids, fixture.texts[i]).toEqual(fixture.minilm[i]));
  });

  it("SmolLM2's byte-level BPE and chat template from its model file", () => {
    const chat = chatTokenizer(model('smollm2-int.safetensors'));
    expect(chat.eos).toBe(2); // <|im_end|>
    expect(chat.tokenizer.decode([chat.eos], { skip_special_tokens: false })).toBe('<|im_end|>');
    fixture.texts.forEach((t, i) => {
      expect(tokenIds(chat.tokenizer, t, false), t).toEqual(fixture.smollm2[i]);
      expect(promptIds(chat, t), t).toEqual(fixture.smollm2Chat[i]);
    });
  });

  it('refuses a file that is not a model by name', () => {
    expect(() => tensorBytes(new Uint8Array(4), 'vocab')).toThrow(/not a safetensors file/);
    expect(() => chatTokenizer('/path/to/model.safetensors' as any)).toThrow(/pass the model file's bytes/);
    const header = new TextEncoder().encode('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}');
    const file = new Uint8Array(8 + header.length + 2);
    new DataView(file.buffer).setBigUint64(0, BigInt(header.length), true);
    file.set(header, 8);
    expect(() => tensorText(file, 'vocab')).toThrow(/no tensor "vocab"/);
    expect(() => encoderTokenizer('[CLS]\n[SEP]\n')).toThrow(/no \[UNK\]/);
    // offsets outside the data, and a dtype or shape its bytes do not fit, refused by name
    const forged = (entry: unknown) => {
      const h = new TextEncoder().encode(JSON.stringify({ vocab: entry }));
      const f = new Uint8Array(8 + h.length + 4);
      new DataView(f.buffer).setBigUint64(0, BigInt(h.length), true);
      f.set(h, 8);
      return f;
    };
    expect(() => tensorBytes(forged({ dtype: 'U8', shape: [2], data_offsets: [-2, 0] }), 'vocab')).toThrow(/data offsets outside its data/);
    expect(() => tensorBytes(forged({ dtype: 'U8', shape: [9], data_offsets: [0, 9] }), 'vocab')).toThrow(/data offsets outside its data/);
    expect(() => tensorBytes(forged({ dtype: 'I32', shape: [2], data_offsets: [0, 4] }), 'vocab')).toThrow(/is not "I32" of its shape/);
    expect(tensorBytes(forged({ dtype: 'U8', shape: [4], data_offsets: [0, 4] }), 'vocab').length).toBe(4);
    expect(() => tensorBytes(forged({ dtype: 'U8', shape: [4], data_offsets: [0, 4] }), 'toString')).toThrow(/no tensor "toString"/);
    // tokens that are names of Object's own properties are tokens like any other
    expect(tokenIds(encoderTokenizer('[PAD]\n[UNK]\n[CLS]\n[SEP]\nconstructor\n__proto__\n'), 'constructor', true)).toEqual([2, 4, 3]);
  });
});
