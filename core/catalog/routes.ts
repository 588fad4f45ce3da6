import { routeKey, type ModelRoute } from './schema.ts';

/**
 * The order in which a request tries a model's routes (docs/providers.md, "Routes"):
 * - `ordered` (the default): as the catalog lists them; the first is the primary, each next
 *   one the fallback of the one before;
 * - `weighted`: the first is drawn by weight (a route of weight 3 comes first three times as
 *   often as one of weight 1), the rest follow in the same way among those left, so that a
 *   failure still falls back to every other route.
 * `random` is in [0, 1) (Math.random; tests pass their own).
 */
export function routeOrder<R extends ModelRoute>(model: { routes: readonly R[]; route_selection: 'ordered' | 'weighted' }, random: () => number = Math.random): R[] {
  if (model.route_selection !== 'weighted' || model.routes.length < 2) return [...model.routes];
  const left = [...model.routes];
  const order: R[] = [];
  while (left.length > 0) {
    const total = left.reduce((sum, r) => sum + r.weight, 0);
    let pick = random() * total;
    let i = 0;
    while (i < left.length - 1 && pick >= left[i]!.weight) {
      pick -= left[i]!.weight;
      i++;
    }
    order.push(left.splice(i, 1)[0]!);
  }
  return order;
}

export { routeKey };
