import { afterEach, describe, expect, it, vi } from 'vitest';
import { jobProgress } from '../../adapters/mcp/tools/generations.ts';
import type { GenerationView } from '../../core/generations/views.ts';

/** The progress notifications of MCP `generate` (adapters/mcp/tools/generations.ts), on a set clock. */
const CREATED = Date.parse('2026-11-27T14:00:00Z');
const job = (status: GenerationView['status']) => ({ id: 'gen_x', status, created_at: new Date(CREATED).toISOString() }) as GenerationView;
const at = (seconds: number) => vi.setSystemTime(CREATED + seconds * 1000);

afterEach(() => {
  vi.useRealTimers();
});

function recorder() {
  const sent: { message: string; progress: number; total?: number }[] = [];
  return { sent, send: async (message: string, progress: number, total?: number) => void sent.push({ message, progress, ...(total === undefined ? {} : { total }) }) };
}

describe('generate progress', () => {
  it('without an expected duration: elapsed seconds as progress, no total, the status in every message', async () => {
    vi.useFakeTimers();
    const { sent, send } = recorder();
    const report = jobProgress('gen_x', null, send);
    at(0);
    await report.accepted(job('queued'));
    at(10.4);
    await report.update(job('running'));
    at(20.9);
    await report.update(job('running'));
    expect(sent).toEqual([
      {
        message: 'Job gen_x accepted (queued, 0 s elapsed). If this call times out, call get_generation with id "gen_x" or list_generations: the job keeps running and is billed once.',
        progress: 0,
      },
      { message: 'Job gen_x is running, 10 s elapsed.', progress: 10 },
      { message: 'Job gen_x is running, 20 s elapsed.', progress: 20 },
    ]);
  });

  it('with an expected duration: a total while the job is within it, none once it overruns', async () => {
    vi.useFakeTimers();
    const { sent, send } = recorder();
    const report = jobProgress('gen_x', 15, send);
    at(0);
    await report.accepted(job('queued'));
    at(14);
    await report.update(job('running'));
    at(15);
    await report.update(job('running'));
    expect(sent).toEqual([
      expect.objectContaining({ progress: 0, total: 15, message: expect.stringMatching(/^Job gen_x accepted \(queued, 0 s elapsed; jobs on this model usually take about 15 s\)\. If this call times out/) }),
      { message: 'Job gen_x is running, 14 s elapsed of about 15 s expected.', progress: 14, total: 15 },
      { message: 'Job gen_x is running, 15 s elapsed.', progress: 15 },
    ]);
  });

  it('sends nothing when the elapsed seconds did not grow (progress must increase), and counts from the job, not the call', async () => {
    vi.useFakeTimers();
    const { sent, send } = recorder();
    const report = jobProgress('gen_x', null, send);
    // A replayed job (same idempotency key) accepted 42 s ago.
    at(42.2);
    await report.accepted(job('running'));
    at(42.9);
    await report.update(job('running'));
    at(43);
    await report.update(job('running'));
    expect(sent.map((n) => n.progress)).toEqual([42, 43]);
    expect(sent[0]!.message).toContain('(running, 42 s elapsed)');
  });

  it('never reports a negative age when the job clock is ahead of this one', async () => {
    vi.useFakeTimers();
    const { sent, send } = recorder();
    at(-3);
    await jobProgress('gen_x', 10, send).accepted(job('queued'));
    expect(sent).toEqual([expect.objectContaining({ progress: 0, total: 10, message: expect.stringContaining('(queued, 0 s elapsed') })]);
  });
});
