// Token ids as the keeper computes them, so that a job posted from TypeScript names them: the
// models' own tokenizers run by Hugging Face's tokenizers.js (`@huggingface/tokenizers`), from
// the tokenizer each model file carries. A keeper re-tokenizes every text and refuses ids that
// differ (PROTOCOL §5), so these must be the keeper's bit for bit: a test holds them equal on
// hundreds of texts of many scripts (test/tokenize.test.ts, against keeper/tests/ts_fixtures.rs).
import { Tokenizer } from '@huggingface/tokenizers';

/** A model file's tensor `name` (safetensors: an 8-byte header length, a JSON header, the data). */
export function tensorBytes(file: Uint8Array, name: string): Uint8Array {
  if (file.length < 8) throw new Error('not a safetensors file: shorter than its header length');
  const n = Number(new DataView(file.buffer, file.byteOffset, 8).getBigUint64(0, true));
  if (n > file.length - 8) throw new Error('not a safetensors file: its header runs past the end');
  const header = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + n))) as Record<
    string,
    { data_offsets?: [number, number] }
  >;
  const t = header[name];
  if (!t?.data_offsets) throw new Error(`the model file has no tensor "${name}"`);
  const [a, b] = t.data_offsets;
  if (!(a <= b && 8 + n + b <= file.length)) throw new Error(`the model file's tensor "${name}" runs past the end`);
  return file.subarray(8 + n + a, 8 + n + b);
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
  const lines = (vocab.endsWith('\n') ? vocab.slice(0, -1) : vocab).split('\n');
  const ids: Record<string, number> = {};
  lines.forEach((t, i) => {
    if (t === '' || t in ids) throw new Error(`the vocabulary's line ${i + 1} is empty or repeats a token`);
    ids[t] = i;
  });
  for (const t of ['[UNK]', '[CLS]', '[SEP]']) if (!(t in ids)) throw new Error(`the vocabulary has no ${t}`);
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

/** A decoder model file's tokenizer and chat template (tensors `tokenizer`, `chat.pre`, `chat.post`). */
export interface ChatTokenizer {
  tokenizer: Tokenizer;
  chatPre: string;
  chatPost: string;
}

/** The decoder's tokenizer and chat template from its model file's bytes. */
export function chatTokenizer(modelFile: Uint8Array): ChatTokenizer {
  return {
    tokenizer: decoderTokenizer(tensorText(modelFile, 'tokenizer')),
    chatPre: tensorText(modelFile, 'chat.pre'),
    chatPost: tensorText(modelFile, 'chat.post'),
  };
}

/** A user prompt's ids in the chat template, as `keeper task post --generate` computes them. */
export function promptIds(chat: ChatTokenizer, prompt: string): number[] {
  return tokenIds(chat.tokenizer, chat.chatPre + prompt + chat.chatPost, false);
}
