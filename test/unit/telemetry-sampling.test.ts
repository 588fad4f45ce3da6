import { context, trace } from '@opentelemetry/api';
import { AlwaysOffSampler, AlwaysOnSampler, InMemorySpanExporter, ParentBasedSampler, SimpleSpanProcessor, TraceIdRatioBasedSampler, type Sampler } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { annotate, dbSpan, inSpan, recordingHere, setTracing } from '../../core/telemetry.ts';

/**
 * What core's span helpers (core/telemetry.ts) cost: counted, not timed. Off, and under a trace
 * the sampler dropped, they build no attributes and make no span; with 1 % of traces kept, the
 * spans and attribute sets made are exactly those of the kept traces.
 */
// A fresh exporter per test: a provider's shutdown stops its exporter.
let exporter = new InMemorySpanExporter();
let provider: NodeTracerProvider | undefined;

function traceWith(sampler: Sampler) {
  exporter = new InMemorySpanExporter();
  provider = new NodeTracerProvider({ sampler: new ParentBasedSampler({ root: sampler }), spanProcessors: [new SimpleSpanProcessor(exporter)] });
  provider.register();
  setTracing({ on: true });
}

afterEach(async () => {
  setTracing({ on: false });
  await provider?.shutdown();
  provider = undefined;
  trace.disable();
  context.disable();
});

/** A request as the service traces it: a root (the HTTP span), a core procedure, a database call, an annotation. */
async function request(attributes: () => Record<string, string>) {
  const root = trace.getTracer('test').startSpan('POST /api/v1/chat/completions');
  await context.with(trace.setSpan(context.active(), root), () =>
    inSpan('core chat.complete', attributes, async (span) => {
      annotate(attributes);
      await dbSpan('mas_reserve', attributes, async () => undefined);
      return span;
    }),
  );
  root.end();
}

describe('core spans, counted', () => {
  it('tracing off: no span, no attributes built, the function called with no span', async () => {
    setTracing({ on: false });
    const attributes = vi.fn(() => ({ 'mas.procedure': 'chat.complete' }));
    expect(recordingHere()).toBe(false);
    expect(await inSpan('core chat.complete', attributes, async (span) => span)).toBeUndefined();
    annotate(attributes);
    expect(await dbSpan('mas_reserve', attributes, async () => 'done')).toBe('done');
    expect(attributes).not.toHaveBeenCalled();
    expect(exporter.getFinishedSpans()).toHaveLength(0);
  });

  it('a trace the sampler dropped: no child span and no attributes, as when tracing is off', async () => {
    traceWith(new AlwaysOffSampler());
    const attributes = vi.fn(() => ({ 'mas.procedure': 'chat.complete' }));
    await request(attributes);
    expect(attributes).not.toHaveBeenCalled();
    expect(exporter.getFinishedSpans()).toHaveLength(0);
  });

  it('a sampled trace: every span and its attributes', async () => {
    traceWith(new AlwaysOnSampler());
    const attributes = vi.fn(() => ({ 'mas.procedure': 'chat.complete' }));
    await request(attributes);
    // The procedure's span, its annotation, the database span: three attribute sets.
    expect(attributes).toHaveBeenCalledTimes(3);
    expect(exporter.getFinishedSpans().map((s) => s.name).sort()).toEqual(['POST /api/v1/chat/completions', 'core chat.complete', 'mas_reserve']);
  });

  it('1 % sampling: the work is that of the kept traces only', async () => {
    traceWith(new TraceIdRatioBasedSampler(0.01));
    const attributes = vi.fn(() => ({ 'mas.procedure': 'chat.complete' }));
    for (let i = 0; i < 2000; i++) await request(attributes);
    const kept = exporter.getFinishedSpans().filter((s) => s.name.startsWith('POST')).length;
    // About 20 of 2,000 (the ratio draws on random trace ids); what matters is that the rest cost nothing.
    expect(kept).toBeGreaterThan(0);
    expect(kept).toBeLessThan(100);
    expect(attributes).toHaveBeenCalledTimes(3 * kept);
    expect(exporter.getFinishedSpans()).toHaveLength(3 * kept);
  });
});
