import { describe, expect, it } from 'vitest';
import { localProvider } from '../../adapters/providers/local.ts';
import { countTextTokens } from '../../core/chat/tokens.ts';
import type { ProviderEvent } from '../../core/ports.ts';

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
