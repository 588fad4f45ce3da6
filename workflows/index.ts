// Every workflow, for the worker's bundle. Workflow files import only @temporalio/workflow,
// ./shared.ts and types (ESLint enforces it).
export { holdSweepWorkflow } from './hold-sweep.workflow.ts';
export { analyticsRefreshWorkflow } from './analytics-refresh.workflow.ts';
export { generationWorkflow } from './generation.workflow.ts';
export { webhookDeliveryWorkflow } from './webhook.workflow.ts';
export { resultRetentionWorkflow } from './result-retention.workflow.ts';
export { paymentsReconcileWorkflow } from './payments-reconcile.workflow.ts';
export { autoTopUpWorkflow } from './auto-top-up.workflow.ts';
export { lowBalanceNoticeWorkflow } from './low-balance.workflow.ts';
