import { describe, expect, it } from 'vitest';
import { createRouteBreakers } from '../../adapters/providers/breakers.ts';

/**
 * The in-process breakers (adapters/providers/breakers.ts): when a route opens, the one probe
 * after the cool-down, a Retry-After, and the figures /metrics and the admin API read. The
 * window runs on an injected clock; cockatiel's cool-down on its own, kept short here.
 */
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a route breaker', () => {
  it('opens after N failures within the window, not for failures that left it', async () => {
    let t = 1_000_000;
    const breakers = createRouteBreakers({ failures: 3, windowMs: 1000, coolDownMs: 60_000, now: () => t });
    const fail = async () => (await breakers.admit('p/m'))!.done({ ok: false, latencyMs: 5, reason: 'http_500' });
    await fail();
    await fail();
    t += 1000; // both leave the window
    await fail();
    await fail();
    // A success while closed forgives nothing: the next failure is the third in the window.
    const ok = await breakers.admit('p/m');
    ok!.done({ ok: true, latencyMs: 5 });
    expect((await breakers.health())[0]).toMatchObject({ state: 'closed', recentFailures: 2 });
    const third = await breakers.admit('p/m');
    third!.done({ ok: false, latencyMs: 5 });
    expect(await breakers.admit('p/m')).toBeUndefined();
    expect((await breakers.health())[0]).toMatchObject({ route: 'p/m', state: 'open', recentFailures: 3 });
  });

  it('after the cool-down lets exactly one probe through; its success closes the breaker with a clean slate', async () => {
    const breakers = createRouteBreakers({ failures: 1, windowMs: 60_000, coolDownMs: 30 });
    (await breakers.admit('p/m'))!.done({ ok: false, latencyMs: 1 });
    expect(await breakers.admit('p/m')).toBeUndefined();
    await sleep(40);
    const probe = await breakers.admit('p/m');
    expect(probe).toBeDefined();
    expect(await breakers.admit('p/m')).toBeUndefined();
    expect((await breakers.health())[0]!.state).toBe('half_open');
    probe!.done({ ok: true, latencyMs: 1 });
    expect((await breakers.health())[0]).toMatchObject({ state: 'closed', recentFailures: 0 });
    expect(await breakers.admit('p/m')).toBeDefined();
  });

  it('a failed probe opens it for another cool-down', async () => {
    const breakers = createRouteBreakers({ failures: 1, windowMs: 60_000, coolDownMs: 30 });
    (await breakers.admit('p/m'))!.done({ ok: false, latencyMs: 1 });
    await sleep(40);
    (await breakers.admit('p/m'))!.done({ ok: false, latencyMs: 1 });
    expect(await breakers.admit('p/m')).toBeUndefined();
    expect((await breakers.health())[0]!.state).toBe('open');
  });

  it("a Retry-After closes the route to callers until it has passed, though the breaker itself is closed", async () => {
    let t = 5_000;
    const breakers = createRouteBreakers({ failures: 10, windowMs: 60_000, coolDownMs: 60_000, now: () => t });
    (await breakers.admit('p/m'))!.done({ ok: false, latencyMs: 1, retryAfterMs: 2000, reason: 'http_429' });
    expect(await breakers.admit('p/m')).toBeUndefined();
    expect((await breakers.health())[0]!.state).toBe('open');
    t += 1999;
    expect(await breakers.admit('p/m')).toBeUndefined();
    t += 1;
    expect(await breakers.admit('p/m')).toBeDefined();
    expect((await breakers.health())[0]!.state).toBe('closed');
  });

  it('a pass counts once however often it is told; routes are independent', async () => {
    const breakers = createRouteBreakers({ failures: 2, windowMs: 60_000, coolDownMs: 60_000 });
    const pass = (await breakers.admit('p/m'))!;
    pass.done({ ok: false, latencyMs: 1 });
    pass.done({ ok: false, latencyMs: 1 });
    expect(await breakers.admit('p/m')).toBeDefined();
    expect(await breakers.admit('q/m')).toBeDefined();
    expect((await breakers.health()).find((h) => h.route === 'p/m')!.recentFailures).toBe(1);
  });

  it('keeps latency percentiles and counts failures by reason, fallbacks and skips, per route', async () => {
    const breakers = createRouteBreakers({ failures: 3, windowMs: 60_000, coolDownMs: 60_000 });
    for (let ms = 1; ms <= 100; ms++) (await breakers.admit('p/m'))!.done({ ok: true, latencyMs: ms });
    (await breakers.admit('q/m'))!.done({ ok: false, latencyMs: 1, reason: 'timeout', fallback: true });
    (await breakers.admit('q/m'))!.done({ ok: false, latencyMs: 1, reason: 'http_503', fallback: true });
    (await breakers.admit('q/m'))!.done({ ok: false, latencyMs: 1, reason: 'timeout', fallback: false });
    expect(await breakers.admit('q/m')).toBeUndefined();
    const health = await breakers.health();
    expect(health.find((h) => h.route === 'p/m')).toMatchObject({ latencyP50Ms: 50, latencyP99Ms: 99 });
    expect(breakers.counts().find((c) => c.route === 'q/m')).toEqual({ route: 'q/m', failures: new Map([['timeout', 2], ['http_503', 1]]), fallbacks: 2, skipped: 1 });
    expect(breakers.counts().find((c) => c.route === 'p/m')).toMatchObject({ fallbacks: 0, skipped: 0 });
  });

  it('has no figures for a route never called', async () => {
    const breakers = createRouteBreakers({ failures: 3, windowMs: 60_000, coolDownMs: 60_000 });
    breakers.route('p/m');
    expect(await breakers.health()).toEqual([{ route: 'p/m', state: 'closed', recentFailures: 0, latencyP50Ms: null, latencyP99Ms: null }]);
  });
});
