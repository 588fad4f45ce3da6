/**
 * Preloaded into the Portkey gateway by bench/chat.ts (`node --import`), so that its streamed
 * phase can run: Portkey 1.15.2 answers every streamed chat 500 "Something went wrong" on Node,
 * because it appends its x-portkey-* headers to the upstream's fetch Response, whose headers the
 * fetch standard makes immutable (TypeError: immutable; Portkey-AI/gateway#1550 and #1389, fixed
 * by the unmerged #1551, which copies the response the same way). No Portkey release has the
 * fix, and pinning @hono/node-server to 1.14.2 (#1389's workaround) does not help on Node 24.
 *
 * This gives a streamed upstream answer (text/event-stream) fresh, mutable headers: the same
 * status and body stream, not read or buffered here. Non-streamed answers are left as they are,
 * so that Portkey's other phases run its code unchanged.
 */
const { Headers, Response } = globalThis;
const upstreamFetch = globalThis.fetch;
globalThis.fetch = async (...args) => {
  const response = await upstreamFetch(...args);
  if (!response.headers.get('content-type')?.includes('text/event-stream')) return response;
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers: new Headers(response.headers) });
};
