import { toCoreError } from '../../core/trpc.ts';

/**
 * The core error a call was refused with, as a plain object that tests compare whole: its
 * code, reason, message, field and retry time. Fails the test if the call was not refused, or
 * not with a core error.
 */
export async function refusal(call: Promise<unknown>) {
  const err = await call.then(
    () => undefined,
    (e: unknown) => toCoreError(e) ?? e,
  );
  if (err === undefined) throw new Error('the call was not refused');
  if (!(err instanceof Error) || !('code' in err)) throw err;
  const { code, reason, message, param, retryAfterSeconds } = err as Error & { code: string; reason?: string; param?: string; retryAfterSeconds?: number };
  return { code, reason, message, param, retryAfterSeconds };
}
