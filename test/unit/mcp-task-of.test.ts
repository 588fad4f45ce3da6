import { describe, expect, it } from 'vitest';
import { TASK_POLL_INTERVAL_MS, taskOf, taskResult } from '../../adapters/mcp/tasks.ts';
import type { GenerationView } from '../../core/generations/views.ts';

/** A job's task (adapters/mcp/tasks.ts): its status, times and ttl, from the job alone. */
const HOUR = 3600;
const job = (over: Partial<GenerationView>): GenerationView => ({
  id: 'gen_abc',
  object: 'generation',
  status: 'queued',
  model: 'mas/image-demo',
  prompt: '',
  settings: {},
  inputs: {},
  created_at: '2026-11-27T10:00:00.000Z',
  started_at: null,
  completed_at: null,
  price_coins: 5,
  cost_coins: null,
  output: null,
  error: null,
  webhook_url: null,
  ...over,
});
const at = (iso: string) => Date.parse(iso);

describe('taskOf', () => {
  it('a queued or running job is working: polled every 5 s, living at least the retention from now', () => {
    const now = at('2026-11-27T10:00:30.000Z');
    expect(taskOf(job({ status: 'queued' }), HOUR, now)).toEqual({
      taskId: 'gen_abc',
      status: 'working',
      statusMessage: expect.stringContaining('queued'),
      createdAt: '2026-11-27T10:00:00.000Z',
      lastUpdatedAt: '2026-11-27T10:00:00.000Z',
      ttl: 30_000 + HOUR * 1000,
      pollInterval: TASK_POLL_INTERVAL_MS,
    });
    const running = taskOf(job({ status: 'running', started_at: '2026-11-27T10:00:02.000Z' }), HOUR, now);
    expect(running).toMatchObject({ status: 'working', lastUpdatedAt: '2026-11-27T10:00:02.000Z', statusMessage: expect.stringContaining('running') });
  });

  it('a succeeded job is completed and lives until its result link expires', () => {
    const done = job({
      status: 'succeeded',
      started_at: '2026-11-27T10:00:02.000Z',
      completed_at: '2026-11-27T10:00:10.000Z',
      cost_coins: 5,
      output: { url: 'http://x/y', expires_at: '2026-11-27T11:00:10.000Z', mime_type: 'image/png', bytes: 10 },
    });
    const task = taskOf(done, 60, at('2026-11-27T12:00:00.000Z'));
    expect(task).toMatchObject({ status: 'completed', lastUpdatedAt: '2026-11-27T10:00:10.000Z', ttl: 10_000 + HOUR * 1000 });
    expect(task.pollInterval).toBeUndefined();
    expect(taskResult(done).isError).toBeUndefined();
  });

  it('a failed or canceled job lives the retention after its end, and its result is an error', () => {
    const failed = job({ status: 'failed', completed_at: '2026-11-27T10:00:05.000Z', cost_coins: 0, error: { message: 'boom', code: 'upstream_error' } });
    expect(taskOf(failed, HOUR)).toMatchObject({ status: 'failed', ttl: 5_000 + HOUR * 1000, statusMessage: expect.stringMatching(/boom.*refunded in full/) });
    expect(taskResult(failed).isError).toBe(true);
    const canceled = job({ status: 'canceled', completed_at: '2026-11-27T10:00:01.000Z', cost_coins: 0 });
    expect(taskOf(canceled, HOUR)).toMatchObject({ status: 'cancelled', ttl: 1_000 + HOUR * 1000 });
    expect(taskResult(canceled).isError).toBe(true);
  });
});
