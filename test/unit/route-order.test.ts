import { describe, expect, it } from 'vitest';
import { routeOrder } from '../../core/catalog/routes.ts';

const routes = [
  { provider: 'a', model: 'm', weight: 1 },
  { provider: 'b', model: 'm', weight: 3 },
  { provider: 'c', model: 'm', weight: 1 },
];

describe('routeOrder', () => {
  it('keeps the catalog order for ordered models, whatever the weights', () => {
    expect(routeOrder({ routes, route_selection: 'ordered' }, () => 0.99).map((r) => r.provider)).toEqual(['a', 'b', 'c']);
  });

  it('draws the first route by weight, then the rest among those left', () => {
    // total 5: [0,1) a, [1,4) b, [4,5) c.
    expect(routeOrder({ routes, route_selection: 'weighted' }, () => 0.1).map((r) => r.provider)).toEqual(['a', 'b', 'c']);
    expect(routeOrder({ routes, route_selection: 'weighted' }, () => 0.5).map((r) => r.provider)).toEqual(['b', 'c', 'a']);
    expect(routeOrder({ routes, route_selection: 'weighted' }, () => 0.9).map((r) => r.provider)).toEqual(['c', 'b', 'a']);
  });

  it('sends weight-proportional shares of requests to each route first', () => {
    let seed = 7;
    const random = () => ((seed = (seed * 16807) % 2147483647) - 1) / 2147483646;
    const first = { a: 0, b: 0, c: 0 } as Record<string, number>;
    for (let i = 0; i < 5000; i++) first[routeOrder({ routes, route_selection: 'weighted' }, random)[0]!.provider]!++;
    expect(first.b! / 5000).toBeGreaterThan(0.55);
    expect(first.b! / 5000).toBeLessThan(0.65);
    expect(first.a! / 5000).toBeGreaterThan(0.15);
    expect(first.c! / 5000).toBeLessThan(0.25);
  });

  it('every order holds every route once', () => {
    for (const x of [0, 0.3, 0.6, 0.999]) expect(new Set(routeOrder({ routes, route_selection: 'weighted' }, () => x))).toEqual(new Set(routes));
  });
});
