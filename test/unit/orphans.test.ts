import { describe, expect, it } from 'vitest';
import { orphanCause } from '../../core/generations/orphans.ts';

/** Which unfinished jobs the sweep ends, by what the workflow engine says of their workflow. */
describe('orphanCause', () => {
  it('leaves a job alone while its workflow is open, or continued as new', () => {
    expect(orphanCause('running', { state: 'open' })).toBeUndefined();
    expect(orphanCause('queued', { state: 'open' })).toBeUndefined();
    expect(orphanCause('running', { state: 'closed', how: 'continued_as_new' })).toBeUndefined();
  });

  it('names the cause when the workflow closed without ending the job', () => {
    expect(orphanCause('running', { state: 'closed', how: 'terminated' })).toEqual({ code: 'workflow_terminated', message: expect.stringContaining('terminated by an operator') });
    expect(orphanCause('queued', { state: 'closed', how: 'terminated' })?.code).toBe('workflow_terminated');
    expect(orphanCause('running', { state: 'closed', how: 'timed_out' })?.code).toBe('workflow_timed_out');
    for (const how of ['completed', 'failed', 'canceled']) expect(orphanCause('running', { state: 'closed', how })?.code).toBe('workflow_closed');
  });

  it('a running job whose workflow is gone ends; a queued one is left for the restart of jobs never started', () => {
    expect(orphanCause('running', { state: 'missing' })?.code).toBe('workflow_missing');
    expect(orphanCause('queued', { state: 'missing' })).toBeUndefined();
  });
});
