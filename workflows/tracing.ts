import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import type { Resource } from '@opentelemetry/resources';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
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

/**
 * Temporal's OpenTelemetry interceptors (CommonJS, with the OpenTelemetry SDK's trace and
 * resource packages under them), required only with tracing on: a worker with tracing off never
 * holds them (bench/RESULTS.md, round 4: about 100 modules of the idle worker).
 */
const interceptors = () => createRequire(import.meta.url)('@temporalio/interceptors-opentelemetry') as typeof import('@temporalio/interceptors-opentelemetry');

export interface WorkerTracing {
  spanProcessor: SpanProcessor;
  resource: Resource;
}

/**
 * The sink the workflow interceptors hand their spans to: the exporter with tracing on; with it
 * off, a sink that drops them (a run started with a trace context, by an API with tracing on,
 * still makes its workflow spans on this worker).
 */
export function workerSinks(tracing: WorkerTracing | undefined): InjectedSinks<Record<string, never>> {
  const exporter = tracing ? interceptors().makeWorkflowExporter(tracing.spanProcessor, tracing.resource) : { export: { fn: () => undefined } };
  return { exporter } as unknown as InjectedSinks<Record<string, never>>;
}

export function activityInterceptors(tracing: WorkerTracing | undefined): WorkerInterceptors['activity'] {
  if (!tracing) return [];
  const { OpenTelemetryActivityInboundInterceptor, OpenTelemetryActivityOutboundInterceptor } = interceptors();
  return [(ctx) => ({ inbound: new OpenTelemetryActivityInboundInterceptor(ctx), outbound: new OpenTelemetryActivityOutboundInterceptor(ctx) })];
}
