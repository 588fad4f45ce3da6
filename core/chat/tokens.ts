import type { ResponseFormat, ToolCall, ToolSpec } from '../ports.ts';
import type { ChatMessage } from './schema.ts';
import { o200k } from './tokenizer.ts';

/**
 * Token counts with a real tokenizer (o200k_base, the encoding of current OpenAI models).
 * Special-token text in user content is counted as plain text, never interpreted.
 *
 * Bounded in time. gpt-tokenizer splits the text into pre-tokens (the o200k regex: words,
 * numbers of up to 3 digits, punctuation runs, whitespace runs) and byte-pair-merges each one
 * in time quadratic in its length: one message of 100,000 × `b` (a single pre-token) took 8 s
 * of one event loop, 400,000 × `b` minutes. So a text is counted in pieces of at most
 * MAX_PIECE characters (each at most ~2 ms of work, whatever the text), and the async count
 * yields to the event loop between pieces and stops once it is over the caller's limit.
 *
 * Pieces are cut where the count stays exact: just after a letter followed by a character
 * that can neither continue a word nor start a contraction (not a letter, mark or `'`), after
 * a number followed by a non-number, or inside a run of ASCII digits at a multiple of 3 from
 * its start. Why that is exact: o200k's split regex has no look-behind and only a one-character
 * look-ahead on whitespace, and at such a point the pre-token before it (a word: only the word
 * patterns take letters; a number: only `\p{N}{1,3}` takes digits) ends there whether the text
 * goes on or stops, so the pre-tokens of the pieces are exactly those of the whole text, and
 * the count of a text is the sum over its pre-tokens. Ordinary text (prose in any script with
 * spaces or punctuation, code, JSON, base64, hex, numbers) has such a point every few
 * characters; test/unit/tokens.test.ts checks on a fixed corpus that the pieced count equals
 * the whole-text count, with pieces far smaller than here.
 *
 * Only a run of more than MAX_PIECE characters with no such point (one letter repeated, a
 * "word" of random letters such as a DNA sequence, a long run of whitespace or punctuation,
 * CJK with no punctuation for 512 characters) is cut blindly. Each piece is counted exactly,
 * but BPE on the halves may find a few tokens fewer than on the whole, so each blind cut
 * adds BLIND_CUT_MARGIN: the count of such a run is then a slight over-estimate in every case
 * measured (see the unit test), and the reserved count stays the ceiling of the charge.
 */
const PLAIN = { disallowedSpecial: new Set<string>() };

/**
 * At most this many UTF-16 units per piece. Measured on a 2-core machine (ms per piece,
 * unchunked BPE): 512 × b 0.4, 512 random letters 0.6, 512 CJK 1.9 (3 bytes each, the worst);
 * 1000 CJK 5.7, 2000 CJK 30.
 */
export const MAX_PIECE = 512;

/**
 * The longest o200k_base token is 128 bytes (128 spaces), so a text of n UTF-8 bytes has at
 * least n / 128 tokens; and a string has no more UTF-16 units than UTF-8 bytes. Hence
 * `ceil(text.length / 128)` is a lower bound of its count that costs nothing to compute.
 */
export const MAX_TOKEN_UNITS = 128;

/**
 * Added for each blind cut (see above). Cutting one pre-token in two at a random point and
 * counting the halves apart changed the count by -3 to +6 in 323,000 random trials (runs of
 * spaces, tabs, newlines, punctuation, letters, CJK, emoji, Devanagari; 5 at -3, 42 at -2, 97 %
 * at 0 or more), and by -1 per cut at worst over whole runs of thousands of characters (spaces
 * and tabs; `ebeb…`): with 3 per cut, every run measured was over-counted. It costs 3 tokens
 * per 512 characters of such runs (+2.3 % on `bbbb…`), and nothing on ordinary text, which is
 * never cut blindly.
 */
export const BLIND_CUT_MARGIN = 3;

/** The async count yields to the event loop once it has worked this long without a break. */
const YIELD_AFTER_MS = 4;

export function countTextTokens(text: string): number {
  if (text.length <= MAX_PIECE) return text.length === 0 ? 0 : o200k().countTokens(text, PLAIN);
  let total = 0;
  for (let start = 0; start < text.length; ) {
    const cut = nextCut(text, start, MAX_PIECE);
    total += o200k().countTokens(text.slice(start, cut.end), PLAIN) + (cut.exact ? 0 : BLIND_CUT_MARGIN);
    start = cut.end;
  }
  return total;
}

type Message = Pick<ChatMessage, 'role' | 'content' | 'name' | 'toolCalls' | 'toolCallId'>;

/** What besides the messages a request sends the model, and is billed as input. */
export interface ChatExtras {
  tools?: readonly ToolSpec[] | undefined;
  responseFormat?: ResponseFormat | undefined;
}

/** Per tool definition, and once for the tools section (OpenAI's cookbook: func_init, func_end). */
export const TOOL_TOKENS = 7;
export const TOOLS_END_TOKENS = 12;
/** Per tool call in an assistant message of the history, as per message. */
export const TOOL_CALL_TOKENS = 3;

/**
 * The input of a chat request as (fixed tokens, text to count) pairs, in order, as
 * docs/chat.md writes the rule: OpenAI's chat accounting (3 tokens per message, 1 per name, 3
 * to prime the reply) plus, per tool call in the history, 3 + its name + its arguments, a tool
 * message's tool_call_id, per tool definition 7 + `name:description` + its parameters as JSON,
 * 12 once for the tools, and a json_schema response format's name and schema as JSON.
 */
function* inputParts(messages: readonly Message[], extras: ChatExtras): Generator<[number, string]> {
  yield [3, ''];
  for (const m of messages) {
    yield [3, m.role];
    if (m.name) yield [1, m.name];
    yield [0, m.content];
    for (const call of m.toolCalls ?? []) {
      yield [TOOL_CALL_TOKENS, call.name];
      yield [0, call.arguments];
    }
    if (m.toolCallId !== undefined) yield [0, m.toolCallId];
  }
  const tools = extras.tools ?? [];
  if (tools.length > 0) yield [TOOLS_END_TOKENS, ''];
  for (const tool of tools) {
    yield [TOOL_TOKENS, tool.description === undefined ? tool.name : `${tool.name}:${tool.description}`];
    if (tool.parameters !== undefined) yield [0, JSON.stringify(tool.parameters)];
  }
  const format = extras.responseFormat;
  if (format?.type === 'json_schema') {
    yield [0, format.name];
    if (format.schema !== undefined) yield [0, JSON.stringify(format.schema)];
  }
}

/** The input tokens of a chat request (see inputParts for the rule). */
export function countChatTokens(messages: readonly Message[], extras: ChatExtras = {}): number {
  let total = 0;
  for (const [fixed, text] of inputParts(messages, extras)) total += fixed + countTextTokens(text);
  return total;
}

/**
 * The same count as countChatTokens, without holding the event loop for more than a few ms at
 * a time. With `stopAbove`, it returns as soon as the count exceeds it: the value returned is
 * then a lower bound of the count (still above `stopAbove`), enough to refuse the request.
 */
export async function countChatTokensAsync(messages: readonly Message[], opts: { stopAbove?: number } & ChatExtras = {}): Promise<number> {
  const stopAbove = opts.stopAbove ?? Number.POSITIVE_INFINITY;
  let lastBreak = performance.now();
  let total = 0;
  for (const [fixed, text] of inputParts(messages, opts)) {
    total += fixed;
    for (let start = 0; start < text.length; ) {
      const cut = nextCut(text, start, MAX_PIECE);
      total += o200k().countTokens(start === 0 && cut.end === text.length ? text : text.slice(start, cut.end), PLAIN) + (cut.exact ? 0 : BLIND_CUT_MARGIN);
      start = cut.end;
      if (total > stopAbove) return total;
      if (performance.now() - lastBreak >= YIELD_AFTER_MS) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        lastBreak = performance.now();
      }
    }
    if (total > stopAbove) return total;
  }
  return total;
}

/** The output tokens of an answer, for when the upstream reports none: its text, and per tool call its name and arguments. */
export function countOutputTokens(content: string, toolCalls: readonly Pick<ToolCall, 'name' | 'arguments'>[]): number {
  let total = countTextTokens(content);
  for (const call of toolCalls) total += countTextTokens(call.name) + countTextTokens(call.arguments);
  return total;
}

/**
 * A lower bound of countChatTokens in O(number of messages): every message costs 3, and each
 * non-empty text at least ceil(length / MAX_TOKEN_UNITS) (see MAX_TOKEN_UNITS).
 */
export function minChatTokens(messages: readonly Message[]): number {
  const atLeast = (text: string) => Math.ceil(text.length / MAX_TOKEN_UNITS);
  let total = 3;
  for (const m of messages) total += 3 + atLeast(m.role) + atLeast(m.content) + (m.name ? 1 + atLeast(m.name) : 0);
  return total;
}

// Character classes, as far as o200k's split regex tells them apart.
const OTHER = 0;
const LETTER = 1; // \p{L}
const MARK = 2; // \p{M}: continues a word
const DIGIT = 3; // 0-9
const NUMBER = 4; // any other \p{N}
const APOSTROPHE = 5; // ' starts a contraction suffix ('s, 't, 're…) of the word before it

const ASCII = new Uint8Array(128);
for (let c = 0; c < 128; c++) {
  const ch = String.fromCharCode(c);
  ASCII[c] = /[A-Za-z]/.test(ch) ? LETTER : /[0-9]/.test(ch) ? DIGIT : ch === "'" ? APOSTROPHE : OTHER;
}
const IS_LETTER = /\p{L}/uy;
const IS_MARK = /\p{M}/uy;
const IS_NUMBER = /\p{N}/uy;

/** The class of the code point at `i`; sticky unicode regexes read a surrogate pair whole. */
function classAt(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c < 128) return ASCII[c]!;
  IS_LETTER.lastIndex = i;
  if (IS_LETTER.test(text)) return LETTER;
  IS_MARK.lastIndex = i;
  if (IS_MARK.test(text)) return MARK;
  IS_NUMBER.lastIndex = i;
  if (IS_NUMBER.test(text)) return NUMBER;
  return OTHER;
}

/**
 * Where the piece starting at `start` ends: the end of the text if it is at most `maxPiece`
 * away; else the last point in (start, start + maxPiece] where cutting keeps the count exact
 * (`exact: true`); else start + maxPiece, one less rather than split a surrogate pair
 * (`exact: false`). Exported for the tests, which cut far smaller pieces to check exactness.
 */
export function nextCut(text: string, start: number, maxPiece: number): { end: number; exact: boolean } {
  if (text.length - start <= maxPiece) return { end: text.length, exact: true };
  const limit = start + maxPiece;
  let cut = -1;
  let prev = OTHER;
  // Digits in the current run of ASCII digits (NaN once a non-ASCII number joined it).
  let digits = 0;
  for (let i = start; i <= limit; ) {
    const cls = classAt(text, i);
    if (i > start) {
      if (prev === LETTER) {
        if (cls !== LETTER && cls !== MARK && cls !== APOSTROPHE) cut = i;
      } else if (prev === DIGIT || prev === NUMBER) {
        if (cls !== DIGIT && cls !== NUMBER) cut = i;
        else if (prev === DIGIT && cls === DIGIT && digits % 3 === 0) cut = i;
      }
    }
    if (cls === DIGIT) digits = prev === DIGIT ? digits + 1 : prev === NUMBER ? Number.NaN : 1;
    else if (cls === NUMBER) digits = Number.NaN;
    else digits = 0;
    prev = cls;
    i += text.codePointAt(i)! > 0xffff ? 2 : 1;
  }
  if (cut > start) return { end: cut, exact: true };
  const c = text.charCodeAt(limit - 1);
  return { end: c >= 0xd800 && c < 0xdc00 ? limit - 1 : limit, exact: false };
}
