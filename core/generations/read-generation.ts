import type { EntityManager } from '@mikro-orm/postgresql';
import { notFound } from '../errors.ts';
import type { Clock, ResultStorage, UrlSigner } from '../ports.ts';
import { loadJob, loadOwnJob } from './job-row.ts';
import { generationView } from './views.ts';

/** The account's job, with a fresh signed link to its result. */
export async function getGeneration(deps: { signer: UrlSigner }, em: EntityManager, accountId: string, id: string) {
  return generationView(await loadOwnJob(em, accountId, id), deps.signer);
}

/** The result bytes behind a signed link: the signature is the credential. */
export async function readGenerationOutput(
  deps: { signer: UrlSigner; clock: Clock; storage: ResultStorage },
  em: EntityManager,
  id: string,
  expires: unknown,
  signature: unknown,
) {
  deps.signer.verify(id, expires, signature, deps.clock());
  const job = await loadJob(em, id).catch(() => undefined);
  const output = job?.status === 'succeeded' ? job.output : null;
  const bytes = output && !output.deleted ? await deps.storage.get(output.key) : undefined;
  if (!output || !bytes) throw notFound('output_not_found', 'This result is no longer stored.');
  return { bytes, mimeType: output.mime_type, filename: output.filename };
}
