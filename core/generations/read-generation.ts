import type { EntityManager } from '@mikro-orm/postgresql';
import { CoreError, notFound } from '../errors.ts';
import type { Clock, ResultStorage, UrlSigner } from '../ports.ts';
import { z } from 'zod';
import { isEnded, loadJob, loadOwnJob } from './job-row.ts';
import { MAX_WAIT_SECONDS } from './schema.ts';
import { generationView, type GenerationView } from './views.ts';

/** The account's job, with a fresh signed link to its result. */
export async function getGeneration(deps: { signer: UrlSigner }, em: EntityManager, accountId: string, id: string) {
  return generationView(await loadOwnJob(em, accountId, id), deps.signer);
}

export const waitInput = z.object({
  id: z.string().min(1).max(100),
  seconds: z.number().int().min(0).max(MAX_WAIT_SECONDS, `wait is at most ${MAX_WAIT_SECONDS} seconds`),
});

/** The account's job once it has ended, or as it is when `seconds` have passed (or `signal` aborted). */
export async function waitForGeneration(deps: { signer: UrlSigner }, em: EntityManager, accountId: string, id: string, seconds: number, signal?: AbortSignal) {
  await loadOwnJob(em, accountId, id);
  return (await waitForEnd(deps, em, id, seconds, signal)) ?? generationView(await loadJob(em, id), deps.signer);
}

/** The job once it has ended, or undefined if it is still going after `seconds`. */
export async function waitForEnd(deps: { signer: UrlSigner }, em: EntityManager, id: string, seconds: number, signal?: AbortSignal): Promise<GenerationView | undefined> {
  const until = Date.now() + seconds * 1000;
  let pause = 50;
  for (;;) {
    const job = await loadJob(em, id);
    if (isEnded(job.status)) return generationView(job, deps.signer);
    if (Date.now() + pause > until || signal?.aborted) return undefined;
    await new Promise((r) => setTimeout(r, pause));
    pause = Math.min(pause * 2, 500);
  }
}

/**
 * What a signed result link opens (the signature is the credential): the stored result, to
 * stream whole or in part, with the type and name it is served under. Nothing is read yet.
 */
export async function readGenerationOutput(
  deps: { signer: UrlSigner; clock: Clock; storage: ResultStorage },
  em: EntityManager,
  id: string,
  expires: unknown,
  signature: unknown,
) {
  const now = deps.clock();
  let expired = false;
  try {
    deps.signer.verify(id, expires, signature, now);
  } catch (err) {
    if (!(err instanceof CoreError && err.reason === 'url_expired')) throw err;
    expired = true;
  }
  const job = await loadJob(em, id).catch(() => undefined);
  const output = job?.status === 'succeeded' ? job.output : null;
  // A genuine link that outlived the result (its retention passed, or it was deleted) says so.
  const retained = output && !output.deleted && job!.output_expires_at !== null && new Date(job!.output_expires_at).getTime() > now.getTime();
  if (expired) {
    if (!retained) throw notFound('result_expired', 'This result was deleted when its retention period ended.');
    throw new CoreError('forbidden', 'This link has expired. Fetch the object again for a fresh link.', { reason: 'url_expired' });
  }
  const object = output && !output.deleted ? await deps.storage.open(output.key) : undefined;
  if (!output || !object) throw notFound(output?.deleted ? 'result_expired' : 'output_not_found', output?.deleted ? 'This result was deleted when its retention period ended.' : 'This result is no longer stored.');
  return { object, mimeType: output.mime_type, filename: output.filename };
}
