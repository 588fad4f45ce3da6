import { fileURLToPath } from 'node:url';
import { Resource } from '@opentelemetry/resources';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { makeWorkflowExporter, OpenTelemetryActivityInboundInterceptor, OpenTelemetryActivityOutboundInterceptor } from '@temporalio/interceptors-opentelemetry';
import type { InjectedSinks, WorkerInterceptors } from '@temporalio/worker';

/**
 * The Temporal OpenTelemetry interceptors (docs/observability.md), so that a media job is one
 * trace: the API's `StartWorkflow` span (the client interceptor, config/temporal.ts) carries the
 * context in the workflow's headers; the workflow interceptors (always in the workflow bundle,
 * `WORKFLOW_INTERCEPTOR_MODULE`) make the `RunWorkflow` span and pass the context on to each
 * activity; the activity interceptors below make the `RunActivity` spans, under which the
 * upstream calls (adapters/providers/telemetry.ts) and the settle or refund (core/money) are.
 *
 * The workflow spans are made inside the workflow sandbox and leave it through a sink: with
 * tracing off here, the sink drops them. The workflow interceptors run only for a workflow started
 * with a trace context (workflows/trace-interceptors.ts, which decides from the start's headers, so
 * that a history replays the same with tracing on or off on the worker).
 */
export const WORKFLOW_INTERCEPTOR_MODULE = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? './trace-interceptors.ts' : './trace-interceptors.js', import.meta.url));

const dropAll: SpanProcessor = {
  onStart: () => undefined,
  onEnd: () => undefined,
  forceFlush: () => Promise.resolve(),
  shutdown: () => Promise.resolve(),
};

export interface WorkerTracing {
  spanProcessor: SpanProcessor;
  resource: Resource;
}

export function workerSinks(tracing: WorkerTracing | undefined): InjectedSinks<Record<string, never>> {
  return { exporter: makeWorkflowExporter(tracing?.spanProcessor ?? dropAll, tracing?.resource ?? Resource.empty()) } as unknown as InjectedSinks<Record<string, never>>;
}

export function activityInterceptors(tracing: WorkerTracing | undefined): WorkerInterceptors['activity'] {
  if (!tracing) return [];
  return [(ctx) => ({ inbound: new OpenTelemetryActivityInboundInterceptor(ctx), outbound: new OpenTelemetryActivityOutboundInterceptor(ctx) })];
}
