import { monitorEventLoopDelay } from 'node:perf_hooks';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { describe, expect, it, vi } from 'vitest';
import { chatRequestSchema, MAX_MESSAGES, type ChatMessage } from '../../core/chat/schema.ts';
import { o200k } from '../../core/chat/tokenizer.ts';
import { BLIND_CUT_MARGIN, countChatTokens, countChatTokensAsync, countOutputTokens, countTextTokens, MAX_PIECE, minChatTokens, nextCut } from '../../core/chat/tokens.ts';

/** The tokenizer on the whole text at once, as counting was before it went piece by piece. */
const whole = (text: string) => countTokens(text, { disallowedSpecial: new Set() });

/** A seeded generator, so every run tests the same strings. */
function random(seed: number) {
  let x = seed;
  return (n: number) => {
    x = (Math.imul(x, 1103515245) + 12345) & 0x7fffffff;
    return x % n;
  };
}
function randomText(length: number, alphabet: string, seed = 7): string {
  const chars = [...alphabet];
  const r = random(seed);
  let s = '';
  while (s.length < length) s += chars[r(chars.length)];
  return s;
}

/** Counted in pieces of at most maxPiece characters, with no margin; `exact` says every cut was exact. */
function piecewise(text: string, maxPiece: number): { count: number; exact: boolean; pieces: number; blindCuts: number } {
  let count = 0;
  let pieces = 0;
  let blindCuts = 0;
  for (let start = 0; start < text.length; pieces++) {
    const cut = nextCut(text, start, maxPiece);
    count += whole(text.slice(start, cut.end));
    if (!cut.exact) blindCuts++;
    start = cut.end;
  }
  return { count, exact: blindCuts === 0, pieces, blindCuts };
}

/** A fixed corpus of ordinary input: prose, code, data, many scripts, numbers, whitespace. */
const PROSE = `The model access service answers every request with care. It's paid in coins, and we'll never charge
more than what was reserved: the input count is the ceiling of the charge. Don't worry -- THEY'RE safe, I'd say,
and you've seen it, haven't you? "Quotes", 'single quotes', (parentheses), [brackets] and {braces}; semi-colons;
e-mail: someone@example.com, https://example.com/path?query=1&other=two#anchor. Prices: $12.50, €9,99, 1,234,567.89.
Dates: 2024-11-23T06:40:31.193Z, 23/11/2024, 11:59 PM. Phone: +1 (555) 010-9999. Version v20.19.0, semver ^5.0.0-rc.1.`;

const MARKDOWN = `# Chat completions

| Field | Rule |
|---|---|
| \`model\` | required; a text model id |
| \`messages\` | required, at least one |

- item one
- item **two** with _emphasis_ and \`code\`
  1. nested
  2. list

> A quote, with trailing spaces   
> and a second line.

\`\`\`sh
curl $BASE/chat/completions -H "Authorization: Bearer $KEY" -d '{"model":"mas/echo"}'
\`\`\`
`;

const CODE = `import { countTokens as countO200k } from 'gpt-tokenizer/encoding/o200k_base';

export async function prepareChat(deps: CoreDeps, em: EntityManager, request: ChatRequest): Promise<PreparedChat> {
\tconst model = await deps.catalog.get(em, request.model);
\tif (model.paid_only && !principal.paid) {
\t\tthrow new CoreError('paid_account_required', \`The model '\${model.id}' needs a paid account.\`);
\t}
    for (let i = 0; i < 10; i++) { total += i * 2 ** 8 >>> 1; } // comment
    const re = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/u;\r
    return { id, created: Math.floor(deps.clock().getTime() / 1000), holdId, x_y_z: a?.b ?? c };\r
}
def python_function(self, arg_one, *args, **kwargs):
    """Docstring."""
    return [x ** 2 for x in range(100) if x % 3 == 0]
SELECT id, email FROM accounts WHERE created_at > now() - interval '1 day' ORDER BY id LIMIT 20;
`;

const JSON_TEXT = JSON.stringify(
  {
    object: 'list',
    data: [
      { id: 'le_7f3a9c2e1b4d', object: 'wallet_entry', amount: -0.000123, balance_after: 999.876543, created_at: 1732344031 },
      { id: 'chatcmpl-AbCdEfGhIjKlMnOpQrStUvWx', model: 'mas/echo', usage: { prompt_tokens: 11, completion_tokens: 5 }, nested: [[1, 2, 3], { a: null, b: true }] },
    ],
    has_more: false,
  },
  null,
  2,
);

const SCRIPTS = [
  "Le service répond à chaque requête avec soin. C'est l'été, où l'on mange des crêpes à Noël ; « guillemets » et œuvre.",
  'Größenordnung, Übermäßig, straße: Donaudampfschifffahrtsgesellschaftskapitänsmütze ist ein langes Wort.',
  '¿Dónde está la biblioteca? ¡Mañana será otro día! Pingüino, acción, corazón.',
  'Модель отвечает на каждый запрос. Съешь же ещё этих мягких французских булок, да выпей чаю.',
  'Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο. Ἀρχιμήδης, ὕδωρ.',
  'الخدمة تجيب على كل طلب بعناية. مرحبا بالعالم، كيف حالك؟ ١٢٣٤٥٦٧٨٩٠',
  'השירות עונה לכל בקשה בזהירות. שָׁלוֹם עוֹלָם!',
  'सेवा हर अनुरोध का सावधानी से उत्तर देती है। क्षत्रिय, द्वितीय, हिन्दी में लिखा गया पाठ। १२३४५',
  '服务认真地回答每一个请求。这是一个没有空格的中文句子，包括标点符号、数字123和English单词。人工智能模型访问服务按令牌收费',
  'サービスはすべてのリクエストに丁寧に答えます。カタカナとひらがなと漢字を混ぜた文章です。東京都千代田区１－２－３',
  '서비스는 모든 요청에 신중하게 응답합니다. 한국어 문장입니다, 띄어쓰기 포함.',
  'บริการตอบทุกคำขออย่างระมัดระวัง ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ แต่มีระหว่างประโยค',
  'Dịch vụ trả lời mọi yêu cầu một cách cẩn thận. Tiếng Việt có dấu: ắ ằ ẳ ẵ ặ, ư ơ đ.',
  'Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🎉🎉🎉 😀😃😄 — and symbols ©®™ ½ ¼ Ⅻ ∑∫√∞ ≠ ≤ ≥ → ⇒ •·… 𝐀𝐁𝐂 𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
  'Combining marks: e\u0301 a\u0308 n\u0303 o\u0302\u0323, zalgo z\u0336\u0317a\u0315\u035cl\u0334g\u0335o\u0338.',
];

const DATA = [
  // base64 of random bytes, hex digests, UUIDs, a long number, numbers in a table.
  randomText(1500, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/', 11),
  Array.from({ length: 12 }, (_, i) => randomText(64, '0123456789abcdef', 100 + i)).join('\n'),
  Array.from({ length: 12 }, (_, i) => randomText(32, '0123456789abcdef', 200 + i).replace(/^(.{8})(.{4})(.{4})(.{4})/, '$1-$2-$3-$4-')).join(', '),
  randomText(1000, '0123456789', 13),
  Array.from({ length: 40 }, (_, i) => `${i}\t${(i * 37.5).toFixed(2)}\t${i ** 5}\t${-i * 1e6}`).join('\r\n'),
];

const WHITESPACE = 'line one\n\n\n\tindented with a tab\n        eight spaces\r\n\r\ntrailing   \n   \n \t \n' + ' '.repeat(40) + 'x\n' + '\n'.repeat(20) + 'end';

const CORPUS: Record<string, string> = {
  prose: PROSE,
  markdown: MARKDOWN,
  code: CODE,
  json: JSON_TEXT,
  scripts: SCRIPTS.join('\n'),
  data: DATA.join('\n\n'),
  whitespace: WHITESPACE,
  // Everything, twice over in two orders: long enough for many pieces of MAX_PIECE.
  mixed: [PROSE, ...SCRIPTS, CODE, JSON_TEXT, MARKDOWN, ...DATA, WHITESPACE, ...[...SCRIPTS].reverse(), PROSE].join('\n'),
};

describe('counting in pieces', () => {
  it('gives exactly the whole-text count on ordinary text, with every cut an exact one', () => {
    for (const [name, text] of Object.entries(CORPUS)) {
      const expected = whole(text);
      expect(countTextTokens(text), name).toBe(expected);
      for (const maxPiece of [MAX_PIECE, 128, 64]) {
        const result = piecewise(text, maxPiece);
        expect({ name, maxPiece, ...result }).toEqual({ name, maxPiece, count: expected, exact: true, pieces: result.pieces, blindCuts: 0 });
      }
    }
    // The corpus really is cut: the long text into pieces of at most MAX_PIECE.
    expect(piecewise(CORPUS.mixed!, MAX_PIECE).pieces).toBeGreaterThan(CORPUS.mixed!.length / MAX_PIECE);
  });

  it('keeps the count at every cut it calls exact, on random text of every character class', () => {
    // Letters (cased, uncased, astral), marks, ASCII and other digits, the apostrophe of
    // contractions, whitespace of every kind, punctuation, emoji, a lone surrogate; in runs.
    const alphabet = [..."aaaeeiouAEbcdXYZ  \u00a0\t\n\r\n''\"’.,;:!?-=/\\()[]{}<>_#@$%&*+|~`0123456789٣½ⅫéÉßİıǅʰ\u0301\u0308\u093f\u0915\u094d中文字日本語한국어กข😀🎉👍🏽𝐀𝐁𐐷\ud800"];
    const r = random(42);
    let checked = 0;
    for (let k = 0; k < 300; k++) {
      let s = '';
      const length = 50 + r(250);
      while (s.length < length) s += alphabet[r(alphabet.length)]!.repeat(r(5) === 0 ? 1 + r(8) : 1);
      for (let start = 0; start < s.length; ) {
        const cut = nextCut(s, start, 1 + r(20));
        if (cut.exact && cut.end < s.length) {
          // The rest of the text is tokenized from the piece's start either way.
          const [before, after] = [s.slice(start, cut.end), s.slice(cut.end)];
          expect(whole(before) + whole(after), JSON.stringify([before, after])).toBe(whole(before + after));
          checked++;
        }
        start = cut.end;
      }
    }
    expect(checked).toBeGreaterThan(3000);
  });

  it('over-counts a long run it has to cut blindly, slightly', () => {
    const cjk = Array.from({ length: 2000 }, (_, i) => String.fromCodePoint(0x4e00 + ((i * 37) % 2000))).join('');
    const runs = {
      'b': 'b'.repeat(12_000),
      'ab': 'ab'.repeat(6000),
      'eb': 'eb'.repeat(6000),
      'random lowercase': randomText(12_000, 'abcdefghijklmnopqrstuvwxyz'),
      'random mixed case': randomText(12_000, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'),
      'DNA': randomText(12_000, 'ACGT'),
      'CJK': randomText(6000, cjk),
      'spaces': ' '.repeat(12_000),
      'spaces and tabs': randomText(12_000, ' \t'),
      'newlines': '\n'.repeat(12_000),
      'punctuation': randomText(12_000, '!!!(((==--'),
      '=': '='.repeat(12_000),
      'emoji': randomText(3000, '😀🎉👍🏽❤️'),
    };
    for (const [name, text] of Object.entries(runs)) {
      const expected = whole(text);
      const counted = countTextTokens(text);
      const { blindCuts } = piecewise(text, MAX_PIECE);
      expect(blindCuts, name).toBeGreaterThan(0);
      expect(counted, name).toBeGreaterThanOrEqual(expected);
      expect(counted - expected, name).toBeLessThanOrEqual(BLIND_CUT_MARGIN * blindCuts + expected * 0.01);
    }
  });

  it('loses at most BLIND_CUT_MARGIN tokens at any one blind cut, on random runs', () => {
    const pool = [..." \t\n!((=-*#.,;:?/_[]{}<>\"'abcdeABCDE中文😀éक्"];
    const r = random(2024);
    let worst = 0;
    for (let k = 0; k < 2000; k++) {
      const alphabet = Array.from({ length: 1 + r(4) }, () => pool[r(pool.length)]!);
      let s = '';
      const length = 64 + r(700);
      while (s.length < length) s += alphabet[r(alphabet.length)]!.repeat(r(3) === 0 ? 1 + r(30) : 1);
      const at = 1 + r(s.length - 1);
      if ((s.charCodeAt(at - 1) & 0xfc00) === 0xd800) continue;
      worst = Math.min(worst, whole(s.slice(0, at)) + whole(s.slice(at)) - whole(s));
    }
    expect(worst + BLIND_CUT_MARGIN).toBeGreaterThanOrEqual(0);
  });
});

/**
 * Runs `work` while a 1 ms interval watches the event loop, and counts the work it does: the
 * length of each text it hands the tokenizer the service counts with (o200k(), whose merge
 * cache is emptied first, so no earlier test's merges help).
 *
 * A gap between two ticks is the loop held by work only as far as this thread used the CPU
 * during it: on a busy machine the process may also be descheduled for a while, which no code
 * of ours can prevent. So a block is counted as the smaller of the gap's wall time and the CPU
 * time this thread (process.threadCpuUsage: not the GC's or libuv's threads) used in it.
 * (monitorEventLoopDelay's maximum, which cannot tell the two apart, is returned for the record.)
 */
async function watchLoop<T>(
  work: () => Promise<T>,
): Promise<{ result: T; texts: string[]; pieces: number[]; loop: { ticks: number; longestBlockMs: number; longestGapMs: number; histogramMaxMs: number } }> {
  o200k().clearMergeCache();
  const tokenizer = vi.spyOn(o200k(), 'countTokens');
  const histogram = monitorEventLoopDelay({ resolution: 1 });
  histogram.enable();
  let last = performance.now();
  let lastCpu = process.threadCpuUsage();
  let longestBlockMs = 0;
  let longestGapMs = 0;
  let ticks = 0;
  const interval = setInterval(() => {
    const now = performance.now();
    const cpu = process.threadCpuUsage(lastCpu);
    const gap = now - last;
    ticks++;
    longestGapMs = Math.max(longestGapMs, gap);
    longestBlockMs = Math.max(longestBlockMs, Math.min(gap, (cpu.user + cpu.system) / 1000));
    last = now;
    lastCpu = process.threadCpuUsage();
  }, 1);
  try {
    const result = await work();
    // countTokens also takes chat messages; the count only ever hands it text.
    const texts = tokenizer.mock.calls.map(([text]) => text as string);
    return { result, texts, pieces: texts.map((t) => t.length), loop: { ticks, longestBlockMs, longestGapMs, histogramMaxMs: histogram.max / 1e6 } };
  } finally {
    clearInterval(interval);
    histogram.disable();
    tokenizer.mockRestore();
  }
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

describe('the async chat count', () => {
  const user = (content: string) => ({ role: 'user' as const, content });

  it('equals the synchronous count and the whole-text accounting on ordinary messages', async () => {
    const messages: { role: 'system' | 'user' | 'assistant'; content: string; name?: string }[] = [
      { role: 'system', content: PROSE },
      ...Object.values(CORPUS).map(user),
      { role: 'assistant', content: CODE, name: 'helper_1' },
    ];
    const expected = 3 + messages.reduce((sum, m) => sum + 3 + whole(m.role) + whole(m.content) + (m.name ? 1 + whole(m.name) : 0), 0);
    expect(countChatTokens(messages)).toBe(expected);
    expect(await countChatTokensAsync(messages)).toBe(expected);
    expect(minChatTokens(messages)).toBeLessThanOrEqual(expected);
  });

  // "Fast" is counted as work, not timed: every character goes to the tokenizer once, in pieces
  // of at most MAX_PIECE characters, so the byte-pair merging (quadratic in a piece's length) is
  // linear in the text's; before pieces, 400,000 × b was one call that ran for minutes.
  it('counts 400,000 × b exactly, each character tokenized once in pieces of at most MAX_PIECE, without blocking the event loop for 50 ms', async () => {
    const { result, pieces, loop } = await watchLoop(() => countChatTokensAsync([user('b'.repeat(400_000))]));
    // 'bbbb' is one token: 100,000, plus 3 + 1 (role) for the message and 3 for the reply, plus
    // the margin of the 781 blind cuts (every 512 characters).
    expect(result).toBe(100_007 + BLIND_CUT_MARGIN * 781);
    // The role ('user'), then the 782 pieces of the content.
    expect(pieces).toHaveLength(1 + 782);
    expect(sum(pieces)).toBe('user'.length + 400_000);
    expect(Math.max(...pieces)).toBe(MAX_PIECE);
    expect(loop.longestBlockMs, JSON.stringify(loop)).toBeLessThan(50);
  });

  it('counts 400,000 random letters (no cache helps), each tokenized once in pieces of at most MAX_PIECE, without blocking the event loop for 50 ms', async () => {
    const text = randomText(400_000, 'abcdefghijklmnopqrstuvwxyz', 99);
    const { result, pieces, loop } = await watchLoop(() => countChatTokensAsync([user(text)]));
    expect(result).toBeGreaterThan(150_000);
    expect(sum(pieces)).toBe('user'.length + 400_000);
    expect(Math.max(...pieces)).toBeLessThanOrEqual(MAX_PIECE);
    // It let the event loop run meanwhile (this count takes hundreds of milliseconds of CPU).
    expect(loop.ticks, JSON.stringify(loop)).toBeGreaterThan(0);
    expect(loop.longestBlockMs, JSON.stringify(loop)).toBeLessThan(50);
  });

  it('stops as soon as the count is over the limit', async () => {
    const { result, texts, pieces } = await watchLoop(() => countChatTokensAsync([user('hello'), user('b'.repeat(400_000)), user('never reached')], { stopAbove: 4000 }));
    expect(result).toBeGreaterThan(4000);
    expect(result).toBeLessThanOrEqual(4000 + MAX_PIECE + BLIND_CUT_MARGIN);
    // The work done, counted: the first message and the second's role, then pieces of b's until
    // the count passes 4000 ('bbbb' is one token: within 16,000 b's, one piece more at most),
    // and nothing of the third message.
    expect(texts.slice(0, 3)).toEqual(['user', 'hello', 'user']);
    expect(texts.slice(3).every((t) => t === 'b'.repeat(MAX_PIECE))).toBe(true);
    expect(sum(pieces.slice(3))).toBeLessThanOrEqual(4 * 4000 + MAX_PIECE);
  });

  it('has a lower bound that never exceeds the count, even for runs of the longest token', () => {
    for (const content of ['', 'a', ' '.repeat(12_000), '='.repeat(5000), 'b'.repeat(1000), PROSE]) {
      expect(minChatTokens([user(content)])).toBeLessThanOrEqual(countChatTokens([user(content)]));
    }
    expect(minChatTokens([user(' '.repeat(128 * 1000))])).toBe(3 + 3 + 1 + 1000);
  });
});

describe('the size of a chat request', () => {
  const request = (n: number) => ({ model: 'mas/echo', messages: Array.from({ length: n }, () => ({ role: 'user', content: 'hi' })) });

  it(`accepts ${MAX_MESSAGES} messages and refuses one more, naming messages`, () => {
    expect(chatRequestSchema.safeParse(request(MAX_MESSAGES)).success).toBe(true);
    const refused = chatRequestSchema.safeParse(request(MAX_MESSAGES + 1));
    expect(refused.success).toBe(false);
    expect(refused.error!.issues.map((i) => i.path.join('.'))).toEqual(['messages']);
  });
});

describe('tools, tool calls and response formats count as input (docs/chat.md)', () => {
  const t = (text: string) => (text.length === 0 ? 0 : whole(text));
  const params = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
  const user: ChatMessage = { role: 'user', content: 'Weather in Paris?' };

  it('each tool: 7 + name:description + its parameters as JSON; 12 once for the tools', () => {
    const base = countChatTokens([user]);
    const tools = [{ name: 'get_weather', description: 'The forecast.', parameters: params }, { name: 'now' }];
    expect(countChatTokens([user], { tools })).toBe(base + 12 + 7 + t('get_weather:The forecast.') + t(JSON.stringify(params)) + 7 + t('now'));
    expect(countChatTokens([user], { tools: [] })).toBe(base);
  });

  it('a tool call in the history: 3 + its name + its arguments; a tool message: its tool_call_id too', () => {
    const assistant: ChatMessage = { role: 'assistant', content: '', toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }, { id: 'call_2', name: 'now', arguments: '{}' }] };
    const result: ChatMessage = { role: 'tool', content: 'sunny', toolCallId: 'call_1' };
    const plainAssistant = countChatTokens([user, { role: 'assistant', content: '' }]);
    expect(countChatTokens([user, assistant])).toBe(plainAssistant + 3 + t('get_weather') + t('{"city":"Paris"}') + 3 + t('now') + t('{}'));
    expect(countChatTokens([result])).toBe(3 + 3 + t('tool') + t('sunny') + t('call_1'));
  });

  it('a json_schema response format: its name and its schema as JSON; json_object: nothing', () => {
    const base = countChatTokens([user]);
    expect(countChatTokens([user], { responseFormat: { type: 'json_schema', name: 'weather', schema: params } })).toBe(base + t('weather') + t(JSON.stringify(params)));
    expect(countChatTokens([user], { responseFormat: { type: 'json_schema', name: 'weather' } })).toBe(base + t('weather'));
    expect(countChatTokens([user], { responseFormat: { type: 'json_object' } })).toBe(base);
  });

  it('the async count equals the sync count, and stops above the limit', async () => {
    const tools = Array.from({ length: 20 }, (_, i) => ({ name: `tool_${i}`, description: 'x '.repeat(300), parameters: params }));
    const messages: ChatMessage[] = [user, { role: 'assistant', content: '', toolCalls: [{ id: 'c', name: 'tool_1', arguments: '{"city":"Rome"}' }] }, { role: 'tool', content: 'ok', toolCallId: 'c' }];
    const extras = { tools, responseFormat: { type: 'json_schema' as const, name: 'n', schema: params } };
    const whole = countChatTokens(messages, extras);
    expect(await countChatTokensAsync(messages, extras)).toBe(whole);
    const stopped = await countChatTokensAsync(messages, { ...extras, stopAbove: 100 });
    expect(stopped).toBeGreaterThan(100);
    expect(stopped).toBeLessThan(whole);
    expect(minChatTokens(messages)).toBeLessThanOrEqual(whole);
  });

  it('output: the text, and per tool call its name and arguments', () => {
    expect(countOutputTokens('Hello there', [])).toBe(t('Hello there'));
    expect(countOutputTokens('', [{ name: 'get_weather', arguments: '{"city":"Paris"}' }, { name: 'now', arguments: '' }])).toBe(t('get_weather') + t('{"city":"Paris"}') + t('now'));
  });
});
