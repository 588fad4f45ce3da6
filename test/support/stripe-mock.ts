import { ensureStripeMock, startStripeMock, type RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { createLogger } from '../../config/logger.ts';

/**
 * stripe-mock as the Stripe API of one test file: found on PATH or built once per machine
 * (adapters/embedded/stripe-mock.ts), started on ports of its own, stopped by its PID in
 * afterAll. It keeps no state, so every file may run its own.
 */
export async function startTestStripeMock(): Promise<RunningStripeMock> {
  // warn: a first build (about a minute) says so, as the Temporal CLI's does.
  return startStripeMock(await ensureStripeMock(createLogger('warn', process.stderr)));
}
