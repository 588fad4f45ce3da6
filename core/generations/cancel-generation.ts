import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { CoreError } from '../errors.ts';
import { release } from '../money/holds.ts';
import type { GenerationStarter, UrlSigner } from '../ports.ts';
import { endJob, markEnded } from './end-job.ts';
import { loadJob, loadOwnJob } from './job-row.ts';
import { generationView } from './views.ts';

/**
 * Cancels the account's job: one not yet finished ends canceled and refunded in full; a
 * finished one is a conflict and keeps its state. Stopping the work upstream is best effort.
 */
export async function cancelGeneration(
  deps: { signer: UrlSigner; generations: GenerationStarter; logger: Logger },
  em: EntityManager,
  accountId: string,
  id: string,
) {
  await loadOwnJob(em, accountId, id);
  const result = await endJob(em, id, async (tx, job) => {
    await release(tx, job.hold_id);
    await markEnded(tx, id, 'canceled', null);
  });
  if ('ended' in result) {
    throw new CoreError('conflict', `The generation ${id} has already ended (${result.ended.status}); it cannot be canceled.`, { reason: 'generation_finished' });
  }
  await deps.generations.cancel(id).catch((err: unknown) => deps.logger.warn({ err, job: id }, 'could not cancel the job workflow'));
  return generationView(await loadJob(em, id), deps.signer);
}
