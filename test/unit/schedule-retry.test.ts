import { describe, expect, it } from 'vitest';
import { transientGrpc } from '../../config/temporal.ts';

describe('schedules at start', () => {
  it('take DEADLINE_EXCEEDED and UNAVAILABLE (on the error or its causes) for a server still starting, anything else for a failure', () => {
    expect(transientGrpc(Object.assign(new Error('Failed to describe schedule'), { cause: Object.assign(new Error('4 DEADLINE_EXCEEDED'), { code: 4 }) }))).toBe(true);
    expect(transientGrpc(Object.assign(new Error('14 UNAVAILABLE'), { code: 14 }))).toBe(true);
    expect(transientGrpc(Object.assign(new Error('3 INVALID_ARGUMENT'), { code: 3 }))).toBe(false);
    expect(transientGrpc(new Error('no code'))).toBe(false);
  });
});
