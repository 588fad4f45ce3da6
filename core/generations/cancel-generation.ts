import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { CoreError } from '../errors.ts';
import type { GenerationStarter, MediaProviderRegistry, UrlSigner } from '../ports.ts';
import { cancelJob } from './end-job.ts';
import { loadJob, loadOwnJob } from './job-row.ts';
import { cancelJobUpstream } from './upstream.ts';
import { generationView } from './views.ts';

/**
 * Cancels the account's job: one not yet finished ends canceled and refunded in full; a
 * finished one is a conflict and keeps its state. Stopping the work upstream is best effort:
 * its answer waits for the provider's cancel call (within the provider's time-out).
 */
export async function cancelGeneration(
  deps: { signer: UrlSigner; generations: GenerationStarter; logger: Logger; media: MediaProviderRegistry },
  em: EntityManager,
  accountId: string,
  id: string,
) {
  await loadOwnJob(em, accountId, id);
  const { ending, canceledNow } = await cancelJob(em, id);
  if (!canceledNow) {
    throw new CoreError('conflict', `The generation ${id} has already ended (${ending.status}); it cannot be canceled.`, { reason: 'generation_finished' });
  }
  await deps.generations.cancel(id).catch((err: unknown) => deps.logger.warn({ err, job: id }, 'could not cancel the job workflow'));
  // The provider is asked here too, from the handle on the job's row: the workflow may not know
  // the handle yet, or have no worker right now. Once per handle, whoever asks first.
  await cancelJobUpstream(deps, em, id).catch((err: unknown) => deps.logger.warn({ err, job: id }, 'could not ask the upstream to stop the job'));
  return generationView(await loadJob(em, id), deps.signer);
}
