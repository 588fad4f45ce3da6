import type { SearchAttributePair } from '@temporalio/common';

/** Names both sides (workflows and their starters) agree on. Imported by workflow code: no I/O here. */
export const TASK_QUEUE = 'mas';
export const HOLD_SWEEP_SCHEDULE_ID = 'mas-hold-sweep';
export const ANALYTICS_REFRESH_SCHEDULE_ID = 'mas-analytics-refresh';
export const RESULT_RETENTION_SCHEDULE_ID = 'mas-result-retention';
export const PAYMENTS_RECONCILE_SCHEDULE_ID = 'mas-payments-reconcile';
export const LOW_BALANCE_SCHEDULE_ID = 'mas-low-balance';
export const GENERATION_WORKFLOW = 'generationWorkflow';
export const WEBHOOK_WORKFLOW = 'webhookDeliveryWorkflow';
export const AUTO_TOP_UP_WORKFLOW = 'autoTopUpWorkflow';
/** One auto top-up workflow per account at a time: its id is this and the account id. */
export const autoTopUpWorkflowId = (accountId: string): string => `auto-topup-${accountId}`;

type KeywordKey = Extract<SearchAttributePair, { key: { type: 'KEYWORD' } }>['key'];
const keyword = (name: string): KeywordKey => ({ name, type: 'KEYWORD' });

/**
 * The custom search attributes of a job's workflow, what operators filter on in the Temporal
 * UI (`MasAccountId = "acct_…" AND MasJobStatus = "failed"`). Registered on the namespace: the
 * embedded dev server at its start, a cluster by its operator (docs/operations.md).
 */
export const SEARCH_ATTRIBUTES = {
  accountId: keyword('MasAccountId'),
  keyId: keyword('MasKeyId'),
  model: keyword('MasModel'),
  modelType: keyword('MasModelType'),
  /** The job's status as the API shows it: queued, running, succeeded, failed or canceled. */
  jobStatus: keyword('MasJobStatus'),
} as const;

/**
 * What a provider step's failure says beside its code (workflows/activities.ts, providerStep):
 * `onMerits` when the upstream refused the request itself (content policy, invalid input), which
 * every route would refuse too, so the job fails at once instead of trying the model's next route.
 */
export interface RouteFailure {
  onMerits: boolean;
  /** The upstream itself said the job failed: nothing runs there any more, nothing to stop. */
  upstreamEnded?: boolean;
  /**
   * The job ended (canceled through the API) or its reservation was released before the step
   * could call the upstream (core/generations/upstream.ts, assertJobMayCallUpstream): no route
   * may take it any more.
   */
  jobOver?: boolean;
}
