import { ProviderError, type ChatProvider, type ProviderChatRequest, type ProviderEvent } from '../../core/ports.ts';
import { UPSTREAM_SAYS } from './upstream-words.ts';

/**
 * A chat upstream's time limits on the answer itself (docs/catalog.md, "Providers"), around any
 * chat adapter. The adapters' own `timeout_seconds` bounds the transport (connect, headers, a
 * gap between two bytes), which an upstream that keeps the connection alive with SSE comments
 * (`: keep-alive`) or Anthropic `ping` events never trips; here only the answer's events count:
 * - `firstTokenMs`: from the call to its first event (text, a tool call, its end);
 * - `idleMs`: between two events once it began;
 * - `deadlineMs`: the whole call.
 * When one passes, the upstream request is aborted and the call fails as a `timeout`, which core
 * (core/chat/chat.ts) treats as any time-out: the next route before any output, an error after.
 * A timer runs only while the consumer waits for the upstream (`next()`), never while the
 * consumer holds the answer (a slow client's backpressure).
 */
export interface ChatTimeouts {
  firstTokenMs: number;
  idleMs: number;
  deadlineMs: number;
}

/** The clock and timer the limits run on (tests may pass their own). */
export interface Timers {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realTimers: Timers = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

type Limit = 'first_token' | 'idle' | 'deadline';

const TIMED_OUT = Symbol('timed out');

export function timedChatProvider(
  provider: ChatProvider,
  limits: ChatTimeouts,
  opts: { timers?: Timers | undefined; log?: ((fields: Record<string, unknown>, message: string) => void) | undefined } = {},
): ChatProvider {
  const timers = opts.timers ?? realTimers;
  return {
    async *stream(request: ProviderChatRequest, signal: AbortSignal): AsyncGenerator<ProviderEvent> {
      // The upstream call's own signal: the client's, or this wrapper's when a limit passes.
      const controller = new AbortController();
      const follow = () => controller.abort(signal.reason);
      if (signal.aborted) follow();
      else signal.addEventListener('abort', follow, { once: true });
      const started = timers.now();
      const events = provider.stream(request, controller.signal)[Symbol.asyncIterator]();
      let began = false;
      let ended = false;
      try {
        for (;;) {
          const now = timers.now();
          const untilDeadline = started + limits.deadlineMs - now;
          const untilWait = began ? limits.idleMs : started + limits.firstTokenMs - now;
          const limit: Limit = untilDeadline <= untilWait ? 'deadline' : began ? 'idle' : 'first_token';
          const next = await within(events.next(), Math.min(untilDeadline, untilWait), timers);
          if (next === TIMED_OUT) {
            if (signal.aborted) throw signal.reason;
            const seconds = (limit === 'deadline' ? limits.deadlineMs : limit === 'idle' ? limits.idleMs : limits.firstTokenMs) / 1000;
            opts.log?.({ limit, seconds, began }, 'chat upstream: timed out');
            throw new ProviderError('timeout', UPSTREAM_SAYS.timeout);
          }
          if (next.done) {
            ended = true;
            return;
          }
          began = true;
          yield next.value;
        }
      } finally {
        signal.removeEventListener('abort', follow);
        if (!ended) {
          // A limit passed, the consumer stopped, or the upstream failed: drop the upstream request.
          controller.abort();
          void Promise.resolve(events.return?.()).catch(() => undefined);
        }
      }
    },
  };
}

/** The promise's value, or TIMED_OUT after `ms` (then its later failure is ignored: the call was aborted). */
function within<T>(promise: Promise<T>, ms: number, timers: Timers): Promise<T | typeof TIMED_OUT> {
  if (ms <= 0) {
    promise.catch(() => undefined);
    return Promise.resolve(TIMED_OUT);
  }
  return new Promise((resolve, reject) => {
    const handle = timers.setTimeout(() => {
      promise.catch(() => undefined);
      resolve(TIMED_OUT);
    }, ms);
    promise.then(
      (value) => {
        timers.clearTimeout(handle);
        resolve(value);
      },
      (err: unknown) => {
        timers.clearTimeout(handle);
        // The upstream's own failure (a ProviderError, an abort), passed on as it is.
        reject(err);
      },
    );
  });
}
