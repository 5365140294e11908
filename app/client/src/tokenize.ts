// Token ids as the keeper computes them, so that a job posted from TypeScript names them: the
// models' own tokenizers run by Hugging Face's tokenizers.js (`@huggingface/tokenizers`), from
// the tokenizer each model file carries. A keeper re-tokenizes every text and refuses ids that
// differ (PROTOCOL §5), so these must be the keeper's bit for bit: a test holds them equal on
// hundreds of texts of many scripts (test/tokenize.test.ts, against keeper/tests/ts_fixtures.rs).
import { Tokenizer } from '@huggingface/tokenizers';

/** A model file's tensor `name` (safetensors: an 8-byte header length, a JSON header, the data). */
export function tensorBytes(file: Uint8Array, name: string): Uint8Array {
  if (!(file instanceof Uint8Array)) throw new Error("pass the model file's bytes (readFileSync(path), or a fetched object), not a path");
  if (file.length < 8) throw new Error('not a safetensors file: shorter than its header length');
  const n = Number(new DataView(file.buffer, file.byteOffset, 8).getBigUint64(0, true));
  if (n > file.length - 8) throw new Error('not a safetensors file: its header runs past the end');
  const header = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + n))) as Record<string, unknown>;
  if (typeof header !== 'object' || header === null || !Object.hasOwn(header, name)) throw new Error(`the model file has no tensor "${name}"`);
  const t = header[name] as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
  const off = t?.data_offsets;
  const [a, b] = Array.isArray(off) && off.length === 2 ? (off as unknown[]) : [];
  const data = file.length - 8 - n;
  if (!(Number.isSafeInteger(a) && Number.isSafeInteger(b) && 0 <= (a as number) && (a as number) <= (b as number) && (b as number) <= data)) {
    throw new Error(`the model file's tensor "${name}" has data offsets outside its data`);
  }
  const shape = t.shape;
  const count = Array.isArray(shape) && shape.every((d) => Number.isSafeInteger(d) && d >= 0) ? shape.reduce((x: number, y: number) => x * y, 1) : -1;
  const width = { U8: 1, I8: 1, I16: 2, I32: 4, I64: 8 }[t.dtype as string];
  if (width === undefined || count * width !== (b as number) - (a as number)) throw new Error(`the model file's tensor "${name}" is not ${JSON.stringify(t.dtype)} of its shape`);
  return file.subarray(8 + n + (a as number), 8 + n + (b as number));
}

/** A model file's UTF-8 tensor `name` as text. */
export function tensorText(file: Uint8Array, name: string): string {
  return new TextDecoder('utf-8', { fatal: true }).decode(tensorBytes(file, name));
}

/**
 * The encoder's tokenizer (MiniLM, BERT uncased) over the vocabulary its model file carries
 * (tensor `vocab`, one token per line, id = line): the keeper's configuration
 * (`compute::encoder::tokenizer`) — clean text, split CJK characters, lowercase and strip
 * accents, split on whitespace and punctuation, WordPiece with `##` continuations and at most
 * 100 characters a word, `[CLS] … [SEP]` around each text.
 */
export function encoderTokenizer(vocab: string): Tokenizer {
  if (typeof vocab !== 'string') throw new Error("pass the vocabulary's text (new TextDecoder().decode(its bytes))");
  const lines = (vocab.endsWith('\n') ? vocab.slice(0, -1) : vocab).split('\n');
  // no prototype: a token such as "constructor" or "__proto__" is a key like any other
  const ids: Record<string, number> = Object.create(null);
  lines.forEach((t, i) => {
    if (t === '' || Object.hasOwn(ids, t)) throw new Error(`the vocabulary's line ${i + 1} is empty or repeats a token`);
    ids[t] = i;
  });
  for (const t of ['[UNK]', '[CLS]', '[SEP]']) if (!Object.hasOwn(ids, t)) throw new Error(`the vocabulary has no ${t}`);
  return new Tokenizer(
    {
      normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
      pre_tokenizer: { type: 'BertPreTokenizer' },
      model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab: ids },
      post_processor: { type: 'BertProcessing', sep: ['[SEP]', ids['[SEP]']], cls: ['[CLS]', ids['[CLS]']] },
      decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
      added_tokens: [],
    },
    {},
  );
}

/** The decoder's tokenizer (SmolLM2's byte-level BPE): the Hugging Face JSON its model file carries (tensor `tokenizer`). */
export function decoderTokenizer(json: string): Tokenizer {
  return new Tokenizer(JSON.parse(json), {});
}

/** The ids of `text`: an encoder's with `[CLS]` and `[SEP]`, a decoder's without (its chat template carries its own). */
export function tokenIds(tokenizer: Tokenizer, text: string, special: boolean): number[] {
  return tokenizer.encode(text, { add_special_tokens: special }).ids;
}

/** A decoder model file's tokenizer, chat template and end-of-turn token (tensors `tokenizer`,
 * `chat.pre`, `chat.post`, `eos`). */
export interface ChatTokenizer {
  tokenizer: Tokenizer;
  chatPre: string;
  chatPost: string;
  /** The end-of-turn token: a completion that ends with it finished. */
  eos: number;
}

/** The decoder's tokenizer and chat template from its model file's bytes, or from the
 * tokenizer file `keeper model publish` uploads beside it (the same four tensors). */
export function chatTokenizer(modelFile: Uint8Array): ChatTokenizer {
  const eos = tensorBytes(modelFile, 'eos');
  if (eos.length !== 4) throw new Error('the model file\'s eos is not one I32');
  return {
    tokenizer: decoderTokenizer(tensorText(modelFile, 'tokenizer')),
    chatPre: tensorText(modelFile, 'chat.pre'),
    chatPost: tensorText(modelFile, 'chat.post'),
    eos: new DataView(eos.buffer, eos.byteOffset, 4).getInt32(0, true),
  };
}

/** A user prompt's ids in the chat template, as `keeper task post --generate` computes them. */
export function promptIds(chat: ChatTokenizer, prompt: string): number[] {
  return tokenIds(chat.tokenizer, chat.chatPre + prompt + chat.chatPost, false);
}
