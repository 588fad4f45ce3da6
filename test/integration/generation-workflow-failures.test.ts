import { randomBytes } from 'node:crypto';
import { Client, Connection, WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { GENERATION_WORKFLOW } from '../../workflows/shared.ts';
import { workerSinks } from '../../workflows/tracing.ts';
import { installTemporalRuntime } from '../../workflows/worker.ts';
import { silentLogger } from '../support/db.ts';

/**
 * The job workflow's own decisions on a step's failure, on the real Temporal dev server with the
 * workflow code as built (the bundle the global setup built: test/support/global-setup.ts). The steps are stand-ins that fail the way Temporal hands a step's last failure to
 * the workflow: these tests are about what the workflow makes of it (the job's error, whether the
 * next route is tried), which the real steps cannot show quickly (an internal error is retried for
 * 8 attempts, about a minute and a half, before the workflow sees it).
 *
 * Not on Temporal's time-skipping test server (@temporalio/testing): nothing here waits, and
 * what the job workflow waits on is mostly not skippable there. Its steps are local activities,
 * whose retries of up to a minute run on the worker's real clock, and whose schedule-to-close
 * (the job's deadline) is measured on the real clock too, while the skipped workflow clock jumps
 * ahead: a deadline test there would prove nothing. (The server itself can run here: the SDK's
 * download is blocked, but io.temporal:temporal-test-server from Maven Central, with its
 * dependencies, runs under `java` as an `existing-path` executable; the Mas* search attributes
 * must be added through its operator service first.)
 */
let connection: Connection;
let native: NativeConnection;
let client: Client;

beforeAll(async () => {
  // The SDK's lines (each step's failure, on purpose here) go to the service's silent test logger.
  installTemporalRuntime(silentLogger);
  connection = await Connection.connect({ address: inject('temporalAddress') });
  native = await NativeConnection.connect({ address: inject('temporalAddress') });
  client = new Client({ connection });
});
afterAll(async () => {
  await connection.close();
  await native.close();
});

interface Recorded {
  submits: { route: string | undefined }[];
  failedWith: { message: string; code: string }[];
}

/** Runs one job's workflow on a worker whose steps are `steps` over a job on `routes`; answers what the steps were asked. */
async function runJob(routes: string[], submit: (route: string | undefined) => Promise<{ provider: string; handle: string }>): Promise<{ recorded: Recorded; outcome: unknown }> {
  const recorded: Recorded = { submits: [], failedWith: [] };
  const taskQueue = `wf-${randomBytes(5).toString('hex')}`;
  const jobId = `gen_wf${randomBytes(6).toString('hex')}`;
  const worker = await Worker.create({
    connection: native,
    taskQueue,
    workflowBundle: { codePath: inject('workflowBundle') },
    sinks: workerSinks(undefined),
    activities: {
      markJobRunning: async () => ({ ended: false, missingModel: false, deadlineSeconds: 120, webhook: false, routes }),
      submitJobToProvider: async (_id: string, route?: { route: string }) => {
        recorded.submits.push({ route: route?.route });
        return submit(route?.route);
      },
      cancelJobAtProviderOnce: async () => false,
      refundAndFailJob: async (_id: string, error: { message: string; code: string }) => {
        recorded.failedWith.push(error);
        return { status: 'failed', error };
      },
    },
  });
  const outcome = await worker.runUntil(
    client.workflow.execute(GENERATION_WORKFLOW, { taskQueue, workflowId: jobId, args: [jobId], workflowExecutionTimeout: '1 minute' }).catch((err: unknown) => err),
  );
  return { recorded, outcome };
}

const UPSTREAM_TEXT = 'upstream answered 500: {"detail":"worker pool exhausted (secret-internal-detail)"}';

describe('the job workflow on a step that failed for good', () => {
  it("an internal error (a TRPCError carrying the upstream's text) fails the job as job_failed in our words, never with the error's class or text", async () => {
    // What a step that threw a non-provider error looks like to the workflow once its retries are
    // spent: the error's class name as the failure's type, its message as is.
    const { recorded, outcome } = await runJob(['only/route'], async () => {
      throw ApplicationFailure.create({ type: 'TRPCError', message: UPSTREAM_TEXT, nonRetryable: true });
    });
    expect(recorded.failedWith).toEqual([{ code: 'job_failed', message: 'The job failed: a step kept failing after every retry. It was refunded in full.' }]);
    // The workflow closes with the job's error: the Temporal UI shows the same words.
    expect(outcome).toBeInstanceOf(WorkflowFailedError);
    const cause = (outcome as WorkflowFailedError).cause as ApplicationFailure;
    expect({ type: cause.type, message: cause.message }).toEqual({ type: 'job_failed', message: recorded.failedWith[0]!.message });
    expect(JSON.stringify(recorded.failedWith)).not.toContain('secret-internal-detail');
  });

  it('a failure with a snake_case type that no step of ours made (no route details) is not taken for our words either', async () => {
    const { recorded } = await runJob(['only/route'], async () => {
      throw ApplicationFailure.create({ type: 'upstream_error', message: UPSTREAM_TEXT, nonRetryable: true });
    });
    expect(recorded.failedWith.map((e) => e.code)).toEqual(['job_failed']);
  });

  it("a provider step's failure in our words is the job's error, as it was", async () => {
    const { recorded } = await runJob(['only/route'], async () => {
      throw ApplicationFailure.create({ type: 'provider_unavailable', message: 'The provider is unavailable.', nonRetryable: true, details: [{ onMerits: false }] });
    });
    expect(recorded.failedWith).toEqual([{ code: 'provider_unavailable', message: 'The provider is unavailable.' }]);
  });

  it('a submit refused because the job is already over (canceled between retries) tries no other route', async () => {
    const { recorded } = await runJob(['first/route', 'second/route'], async (route) => {
      if (route === 'first/route') throw ApplicationFailure.create({ type: 'provider_unavailable', message: 'The provider is unavailable.', nonRetryable: true, details: [{ onMerits: false }] });
      throw ApplicationFailure.create({ type: 'job_ended', message: 'The job ended before this step; nothing was sent to the provider.', nonRetryable: true, details: [{ onMerits: false, jobOver: true }] });
    });
    // The second route's step found the job over: no third try, and the job's ending is left as it is.
    expect(recorded.submits.map((s) => s.route)).toEqual(['first/route', 'second/route']);
    const { recorded: once } = await runJob(['first/route', 'second/route'], async () => {
      throw ApplicationFailure.create({ type: 'job_ended', message: 'The job ended before this step; nothing was sent to the provider.', nonRetryable: true, details: [{ onMerits: false, jobOver: true }] });
    });
    expect(once.submits.map((s) => s.route)).toEqual(['first/route']);
  });
});
