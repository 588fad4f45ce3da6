import type { Next, WorkflowInboundCallsInterceptor, WorkflowInterceptors, WorkflowInternalsInterceptor, WorkflowOutboundCallsInterceptor } from '@temporalio/workflow';
import { SdkFlags } from '@temporalio/workflow/lib/flags.js';
import { getActivator } from '@temporalio/workflow/lib/global-attributes.js';

/**
 * The Temporal OpenTelemetry workflow interceptors (workflows/tracing.ts), for the workflows that
 * are traced only: those started with a trace context in their headers (tracing on where they
 * were started, config/temporal.ts). A workflow started without one runs without them: no span
 * is made in the sandbox for it (each was dropped anyway), and their modules are not even
 * evaluated for it (the workflow sandbox evaluates its modules once per workflow run). On the
 * generations benchmark they were about a third of the workflow thread's CPU time per job.
 *
 * Whether a run is traced is decided from its start's headers, which its history keeps: it
 * replays the same on any worker, tracing on or off there. Runs recorded by an SDK whose
 * interceptors still added yields of their own (before its flag `OpenTelemetryInterceporsAvoidsExtraYields`)
 * keep the interceptors, so that they replay exactly as they ran. The workflows here await one
 * step at a time, so the interceptors' own awaits never changed the order of their commands either.
 */
const TRACE_HEADER = '_tracer-data';

type Real = { inbound?: WorkflowInboundCallsInterceptor[]; outbound?: WorkflowOutboundCallsInterceptor[]; internals?: WorkflowInternalsInterceptor[] };

export const interceptors = (): WorkflowInterceptors => {
  let real: Real | undefined;
  const first = <T>(list: T[] | undefined): T | undefined => list?.[0];
  // Each call: the OpenTelemetry interceptor's own when the run is traced, else straight on.
  const outbound = (name: keyof WorkflowOutboundCallsInterceptor) =>
    ((input: unknown, next: (input: unknown) => unknown) => {
      const method = (first(real?.outbound) as Record<string, ((input: unknown, next: unknown) => unknown) | undefined> | undefined)?.[name];
      return method ? method.call(first(real!.outbound), input, next) : next(input);
    }) as never;
  const inbound = (name: Exclude<keyof WorkflowInboundCallsInterceptor, 'execute'>) =>
    ((input: unknown, next: (input: unknown) => unknown) => {
      const method = (first(real?.inbound) as Record<string, ((input: unknown, next: unknown) => unknown) | undefined> | undefined)?.[name];
      return method ? method.call(first(real!.inbound), input, next) : next(input);
    }) as never;

  const inboundInterceptor: WorkflowInboundCallsInterceptor = {
    async execute(input, next: Next<WorkflowInboundCallsInterceptor, 'execute'>) {
      const traced = TRACE_HEADER in (input.headers ?? {}) || !getActivator().hasFlag(SdkFlags.OpenTelemetryInterceporsAvoidsExtraYields);
      if (!traced) return next(input);
      const otel = (await import(/* webpackMode: "eager" */ '@temporalio/interceptors-opentelemetry/lib/workflow-interceptors.js')) as { interceptors: () => Real };
      real = otel.interceptors();
      const execute = first(real.inbound)?.execute;
      return execute ? execute.call(first(real.inbound), input, next) : next(input);
    },
    handleSignal: inbound('handleSignal'),
    handleUpdate: inbound('handleUpdate'),
    validateUpdate: inbound('validateUpdate'),
    handleQuery: inbound('handleQuery'),
  };
  const outboundInterceptor: WorkflowOutboundCallsInterceptor = {
    scheduleActivity: outbound('scheduleActivity'),
    scheduleLocalActivity: outbound('scheduleLocalActivity'),
    startNexusOperation: outbound('startNexusOperation'),
    startChildWorkflowExecution: outbound('startChildWorkflowExecution'),
    continueAsNew: outbound('continueAsNew'),
    signalWorkflow: outbound('signalWorkflow'),
    getLogAttributes: outbound('getLogAttributes'),
    getMetricTags: outbound('getMetricTags'),
  };
  const internalsInterceptor: WorkflowInternalsInterceptor = {
    dispose(input, next) {
      const dispose = first(real?.internals)?.dispose;
      return dispose ? dispose.call(first(real!.internals), input, next) : next(input);
    },
  };
  return { inbound: [inboundInterceptor], outbound: [outboundInterceptor], internals: [internalsInterceptor] };
};
