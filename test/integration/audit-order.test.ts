import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditFilterInput, listAudit, recordAudit } from '../../core/admin/audit.ts';
import { randomBase62 } from '../../core/ids.ts';
import { openTestOrm } from '../support/db.ts';

/**
 * The audit log reads newest first by its bigint id, across a power of ten: listAudit once
 * sorted by the id's text (`order by id` named the output column `id::text`), so entry 10
 * came after entry 9, which a test run only met when its ids happened to cross a boundary.
 */
let orm: MikroORM;
beforeAll(async () => {
  orm = await openTestOrm();
});
afterAll(() => orm.close());

describe('the audit log', () => {
  it('is newest first, and pages go on from the last entry, where the ids gain a digit', async () => {
    const em = orm.em.fork();
    const [{ last }] = (await em.execute<{ last: string }[]>('select last_value::text as last from admin_audit_log_id_seq')) as [{ last: string }];
    // The next id is the last below a power of ten: the three entries are 10^k - 1, 10^k and 10^k + 1.
    const boundary = 10n ** BigInt(String(BigInt(last) + 3n).length);
    await em.execute('select setval(?, ?::bigint)', ['admin_audit_log_id_seq', (boundary - 2n).toString()]);
    const target = `acct_audit_order_${randomBase62(10)}`;
    for (const action of ['first.action', 'second.action', 'third.action']) {
      await recordAudit(orm.em.fork(), { kind: 'internal' }, { action, targetType: 'account', targetId: target });
    }
    const all = await listAudit(orm.em.fork(), auditFilterInput.parse({ target_id: target }));
    // Other files may write entries meanwhile, so the ids are compared, not predicted: the first
    // entry's id has fewer digits than the third's whenever nothing took the boundary first.
    expect(all.data.map((e) => e.action)).toEqual(['third.action', 'second.action', 'first.action']);
    const ids = all.data.map((e) => BigInt(e.id.slice(4)));
    expect(ids[0]! > ids[1]! && ids[1]! > ids[2]!).toBe(true);
    const page = await listAudit(orm.em.fork(), auditFilterInput.parse({ target_id: target, first: 1, after: all.data[1]!.id }));
    expect(page.data.map((e) => e.action)).toEqual(['first.action']);
  });
});
