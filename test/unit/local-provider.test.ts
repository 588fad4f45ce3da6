import { describe, expect, it } from 'vitest';
import { localProvider } from '../../adapters/providers/local.ts';
import { countTextTokens } from '../../core/chat/tokens.ts';
import type { ProviderChatRequest, ProviderEvent } from '../../core/ports.ts';

async function run(maxTokens: number, content = 'Tell me about coins') {
  const messages = [{ role: 'user' as const, content }];
  const events: ProviderEvent[] = [];
  for await (const e of localProvider().stream({ model: 'echo', messages, maxTokens, options: {} }, new AbortController().signal)) events.push(e);
  const text = events.flatMap((e) => (e.type === 'delta' ? [e.content] : [])).join('');
  return { events, text, messages };
}

describe('local provider', () => {
  it('is deterministic and reports honest usage', async () => {
    const a = await run(500);
    const b = await run(500);
    expect(a.text).toBe(b.text);
    expect(a.text).toContain('Tell me about coins');
    const usage = a.events.find((e) => e.type === 'usage');
    // The prompt is core's count (bounded in time), not counted again by the provider.
    expect(usage).toEqual({ type: 'usage', completionTokens: countTextTokens(a.text) });
    expect(a.events.find((e) => e.type === 'finish')).toEqual({ type: 'finish', reason: 'stop' });
  });

  it('stops at the output limit', async () => {
    const { events, text } = await run(5);
    expect(countTextTokens(text)).toBeLessThanOrEqual(5);
    expect(events.find((e) => e.type === 'finish')).toEqual({ type: 'finish', reason: 'length' });
  });

  it('counts special-token text as plain text', () => {
    expect(countTextTokens('<|endoftext|>')).toBeGreaterThan(1);
  });
});

describe('local provider: tools, structured outputs, stop', () => {
  const tool = { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string', minLength: 3 } }, required: ['q'] } };
  async function events(request: Partial<ProviderChatRequest>) {
    const out: ProviderEvent[] = [];
    const full = { model: 'echo', messages: [{ role: 'user' as const, content: 'please lookup things' }], maxTokens: 300, options: {}, ...request };
    for await (const e of localProvider().stream(full, new AbortController().signal)) out.push(e);
    return out;
  }

  it('a tool call: a start with id and name, argument pieces, finish tool_calls, usage = name + arguments tokens', async () => {
    const out = await events({ tools: [tool] });
    const start = out[0] as Extract<ProviderEvent, { type: 'tool_call' }>;
    expect(start).toMatchObject({ type: 'tool_call', index: 0, name: 'lookup', arguments: '', id: expect.stringMatching(/^call_/) });
    const args = out.flatMap((e) => (e.type === 'tool_call' ? [e.arguments] : [])).join('');
    expect(JSON.parse(args).q.length).toBeGreaterThanOrEqual(3);
    expect(out.at(-2)).toEqual({ type: 'finish', reason: 'tool_calls' });
    expect(out.at(-1)).toEqual({ type: 'usage', completionTokens: countTextTokens('lookup') + countTextTokens(args) });
  });

  it('a call cut by the output limit ends with finish_reason length and usage at the limit', async () => {
    const out = await events({ tools: [tool], maxTokens: 3 });
    expect(out.at(-2)).toEqual({ type: 'finish', reason: 'length' });
    expect(out.at(-1)).toEqual({ type: 'usage', completionTokens: 3 });
  });

  it('a schema whose instances would be huge is an upstream failure, not a stall', async () => {
    const nested = { type: 'array', minItems: 1000, items: { type: 'array', minItems: 1000, items: { type: 'string' } } };
    await expect(events({ tools: [{ name: 'lookup', parameters: { type: 'object', properties: { a: nested }, required: ['a'] } }] })).rejects.toThrow(/more than 10,000 array items/);
  });

  it('a pattern that repeats thousands of times is refused before sampling', async () => {
    await expect(events({ tools: [{ name: 'lookup', parameters: { type: 'object', properties: { a: { type: 'string', pattern: '^(ab){1000000}$' } }, required: ['a'] } }] })).rejects.toThrow(/pattern repeats/);
  });

  it('stop cuts the text before the first stop sequence; an empty stop sequence is ignored', async () => {
    const out = await events({ options: { stop: ['', 'lookup'] } });
    expect(out.flatMap((e) => (e.type === 'delta' ? [e.content] : [])).join('')).toBe('You said: "please ');
    expect(out.at(-2)).toEqual({ type: 'finish', reason: 'stop' });
  });
});
