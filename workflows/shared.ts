/** Names both sides (workflows and their starters) agree on. Imported by workflow code: no I/O here. */
export const TASK_QUEUE = 'mas';
export const HOLD_SWEEP_SCHEDULE_ID = 'mas-hold-sweep';
export const ANALYTICS_REFRESH_SCHEDULE_ID = 'mas-analytics-refresh';
export const GENERATION_WORKFLOW = 'generationWorkflow';
