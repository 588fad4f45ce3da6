import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { GenerationStarter, JobWorkflowState, MediaProviderRegistry } from '../ports.ts';
import { failJob } from './end-job.ts';
import type { JobError } from './job-row.ts';
import { cancelJobUpstream } from './upstream.ts';

/** What the job's error says when its workflow closed without ending it, by how it closed. */
const CAUSES: Record<string, JobError> = {
  terminated: { code: 'workflow_terminated', message: 'The job was terminated by an operator. It was refunded in full.' },
  timed_out: { code: 'workflow_timed_out', message: "The job's workflow timed out. It was refunded in full." },
};
const CLOSED_OTHERWISE: JobError = { code: 'workflow_closed', message: "The job's workflow ended without finishing the job. It was refunded in full." };
const GONE: JobError = { code: 'workflow_missing', message: "The job's workflow no longer exists. It was refunded in full." };

/** Why an unfinished job must end now, or undefined while its workflow can still end it. */
export function orphanCause(status: string, workflow: JobWorkflowState): JobError | undefined {
  if (workflow.state === 'open') return undefined;
  if (workflow.state === 'closed') return workflow.how === 'continued_as_new' ? undefined : (CAUSES[workflow.how] ?? CLOSED_OTHERWISE);
  // A queued job with no workflow yet is restarted by the sweep (restartStaleJobs); a running
  // one had a workflow, which is gone (past the engine's retention, or its namespace reset).
  return status === 'running' ? GONE : undefined;
}

/**
 * Ends the jobs whose workflow closed without ending them: an operator pressed Terminate in the
 * Temporal UI, the workflow timed out or was reset away, or its history is gone. Each is failed
 * and refunded in full through the normal failure path (failJob: the hold released, the ledger
 * written, in one transaction), exactly once however often the sweep runs. A workflow always
 * ends its job before it closes, so a closed workflow with an unfinished job is an orphan; a
 * job that ends meanwhile by itself keeps its own ending (failJob is a no-op then). A job with a
 * webhook gets it delivered, as its workflow would have (once: the delivery has the job's id).
 * The provider is asked to stop the job's upstream work where it can (upstream.ts).
 * Run by the hold-sweep Temporal Schedule; asks the engine about each unfinished job, a few at
 * a time, in batches ordered by age. A job that cannot be ended is logged and left for the next
 * sweep; the others are ended all the same.
 */
export async function endOrphanedJobs(deps: { generations: GenerationStarter; media: MediaProviderRegistry; logger: Logger }, em: EntityManager, batch = 200, parallel = 8): Promise<{ ended: number }> {
  let ended = 0;
  let after: { created_at: string; id: string } | undefined;
  for (;;) {
    const rows = await em.execute<{ id: string; status: string; created_at: string; webhook: boolean }[]>(
      `select id, status, created_at::text, webhook_url is not null as webhook from generations
       where status in ('queued', 'running') ${after ? 'and (created_at, id) > (?::timestamptz, ?)' : ''}
       order by created_at, id limit ?`,
      after ? [after.created_at, after.id, batch] : [batch],
    );
    for (let i = 0; i < rows.length; i += parallel) {
      await Promise.all(
        rows.slice(i, i + parallel).map(async (row) => {
          try {
            const cause = orphanCause(row.status, await deps.generations.state(row.id));
            if (!cause) return;
            const ending = await failJob(em.fork(), row.id, cause);
            if (ending.error?.code !== cause.code) return;
            ended++;
            // Nothing of the closed workflow will stop the upstream work: ask the provider here
            // (from the handle on the row, once, best effort: it never holds up the refund above).
            await cancelJobUpstream(deps, em.fork(), row.id);
            // The workflow that would have sent the job's webhook is gone: its owner still hears of the end.
            if (row.webhook) await deps.generations.deliverWebhook(row.id);
          } catch (err) {
            // One job that cannot be ended (its workflow unreadable, its refund refused) must not
            // keep every other orphan waiting: it is logged, left as it is, and met again next sweep.
            deps.logger.error({ err, job: row.id }, 'could not end an orphaned job; the next sweep tries again');
          }
        }),
      );
    }
    if (rows.length < batch) return { ended };
    after = rows[rows.length - 1]!;
  }
}
