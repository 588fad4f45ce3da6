import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { CatalogError, ModelCatalog, seedModels, syncModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { loadCatalogFile } from '../../config/catalog.ts';
import { migratedFreshDatabase, silentLogger } from '../support/db.ts';
import { openOrm } from '../../core/orm.ts';
import { TEST_CATALOG } from '../support/catalog.ts';

let orm: MikroORM;
let db: Awaited<ReturnType<typeof migratedFreshDatabase>>;
beforeAll(async () => {
  db = await migratedFreshDatabase();
  orm = await openOrm({ url: db.url });
});
afterAll(async () => {
  await orm.close();
  await db.drop();
});

const models = () => new ModelCatalog(silentLogger, 0).list(orm.em.fork());

describe('catalog', () => {
  it('the shipped config/models.yaml is valid and has demo models on the local provider', async () => {
    const catalog = await loadCatalogFile('config/models.yaml', 50n);
    expect(catalog.parsed.models.length).toBeGreaterThan(0);
    for (const m of catalog.parsed.models) expect(catalog.parsed.providers[m.provider.name]).toEqual({ kind: 'local' });
    expect(catalog.parsed.models.some((m) => m.paid_only)).toBe(true);
  });

  it('start-up adds missing models and keeps edited ones; sync makes the database match the file', async () => {
    const file = validateCatalog(TEST_CATALOG, 50n);
    expect((await seedModels(orm.em.fork(), file)).length).toBe(TEST_CATALOG.models.length);
    const em = orm.em.fork();
    await em.execute(`update models set definition = jsonb_set(definition, '{name}', '"Edited"') where id = 'test/ok'`);
    await em.execute(`insert into models (id, type, definition) select 'test/extra', type, jsonb_set(definition, '{id}', '"test/extra"') from models where id = 'test/ok'`);

    expect(await seedModels(orm.em.fork(), file)).toEqual([]);
    expect((await models()).find((m) => m.id === 'test/ok')!.name).toBe('Edited');

    const result = await syncModels(orm.em.fork(), file);
    expect(result).toMatchObject({ added: [], updated: ['test/ok'], removed: ['test/extra'] });
    const after = await models();
    expect(after.find((m) => m.id === 'test/ok')!.name).toBe('test/ok');
    expect(after.map((m) => m.id).sort()).toEqual(TEST_CATALOG.models.map((m) => m.id).sort());
  });

  it('refuses a bad catalog with one line naming the entry', () => {
    const bad = (models: unknown[]) => () => validateCatalog({ providers: TEST_CATALOG.providers, models }, 50n);
    const base = TEST_CATALOG.models[0]!;
    expect(bad([{ ...base, provider: { name: 'nowhere', model: 'x' } }])).toThrow(/unknown provider "nowhere"/);
    expect(bad([base, base])).toThrow(/duplicate model id/);
    expect(bad([{ ...base, pricing: { input_per_million: '0.000001', output_per_million: 1 } }])).toThrow(CatalogError);
    expect(bad([{ ...base, default_max_tokens: 5000 }])).toThrow(/default_max_tokens/);
    expect(bad([{ ...base, type: 'music' }])).toThrow(/models\.0/);
  });
});
