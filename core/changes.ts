import type { CoreDeps } from './context.ts';

/**
 * A change made anywhere (any instance, the CLI, plain SQL) that this process's caches must
 * drop: PostgreSQL triggers announce each one at its commit (migration …_change_notices), an
 * adapter listens (adapters/db/change-feed.ts) and hands it here. `resync` means notices may
 * have been missed (the listening connection was lost): every cache starts again.
 */
export type Change = { kind: 'catalog' } | { kind: 'key'; id: string } | { kind: 'account'; id: string } | { kind: 'resync' };

export function parseChange(payload: string | undefined): Change | undefined {
  try {
    const c = JSON.parse(payload ?? '') as { kind?: unknown; id?: unknown };
    if (c.kind === 'catalog' || c.kind === 'resync') return { kind: c.kind };
    if ((c.kind === 'key' || c.kind === 'account') && typeof c.id === 'string') return { kind: c.kind, id: c.id };
  } catch {
    /* not ours */
  }
  return undefined;
}

/** Drops what the change makes stale. The caches' own short TTLs are the safety net behind this. */
export function applyChange(deps: Pick<CoreDeps, 'catalog' | 'keys'>, change: Change): void {
  switch (change.kind) {
    case 'catalog':
      deps.catalog.invalidate();
      return;
    case 'key':
      deps.keys.forget((row) => row.key_id === change.id);
      return;
    case 'account':
      // A disabled person's keys in organizations' wallets go too.
      deps.keys.forget((row) => row.account_id === change.id || row.member_id === change.id);
      return;
    case 'resync':
      deps.catalog.invalidate();
      deps.keys.forget(() => true);
      return;
  }
}
