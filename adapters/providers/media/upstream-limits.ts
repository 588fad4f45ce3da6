import { MediaProviderError } from '../../../core/ports.ts';

/**
 * What the media adapters that call an upstream share: the size limit on what they read, and
 * the upstream's `Retry-After`.
 */

export function resultTooLarge(maxBytes: number): MediaProviderError {
  return new MediaProviderError('refused', 'result_too_large', `The provider's result is larger than this server accepts (${Math.floor(maxBytes / 1_048_576)} MB).`);
}

/**
 * A `fetch` whose answers are refused over `maxBytes`: at once when `Content-Length` says so,
 * and while reading otherwise (a chunked body that never ends is cut at the limit, not held).
 */
export function sizeLimitedFetch(maxBytes: number, base: typeof fetch = fetch): typeof fetch {
  return async (input, init) => {
    const res = await base(input, init);
    const declared = Number(res.headers.get('content-length'));
    if (Number.isFinite(declared) && declared > maxBytes) {
      await res.body?.cancel().catch(() => undefined);
      throw resultTooLarge(maxBytes);
    }
    if (!res.body) return res;
    let seen = 0;
    const limited = res.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          seen += chunk.byteLength;
          if (seen > maxBytes) controller.error(resultTooLarge(maxBytes));
          else controller.enqueue(chunk);
        },
      }),
    );
    return new Response(limited, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

/** The size-limit refusal behind an error, however the caller wrapped it. */
export function oversizeIn(err: unknown): MediaProviderError | undefined {
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof MediaProviderError && e.code === 'result_too_large') return e;
  }
  return undefined;
}

/** `Retry-After` (seconds or an HTTP date) or `retry-after-ms`, in milliseconds; capped at 10 minutes. */
export function retryAfterMs(headers: Headers | undefined, now = Date.now()): number | undefined {
  if (!headers) return undefined;
  const ms = Number(headers.get('retry-after-ms'));
  if (headers.get('retry-after-ms') !== null && Number.isFinite(ms) && ms >= 0) return Math.min(ms, 600_000);
  const raw = headers.get('retry-after');
  if (raw === null) return undefined;
  const seconds = Number(raw);
  const delay = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(raw) - now;
  return Number.isFinite(delay) && delay >= 0 ? Math.min(delay, 600_000) : undefined;
}

/** An upstream's error body for the log: as text, cut to 2,000 characters, with our key (should the upstream echo it) blanked. */
export function forLog(body: unknown, apiKey: string | undefined): string {
  const text = typeof body === 'string' ? body : JSON.stringify(body ?? null);
  return (apiKey ? text.replaceAll(apiKey, '[redacted]') : text).slice(0, 2000);
}
