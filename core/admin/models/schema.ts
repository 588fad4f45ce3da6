import { z } from 'zod';
import { jsonRecord } from '../../json-record.ts';
import { modelViewSchema } from '../../catalog/views.ts';
import { MODEL_TYPES } from '../../catalog/schema.ts';
import { isoTimeSchema } from '../../views.ts';
import { reasonSchema } from '../audit.ts';

/**
 * Inputs and the view of operators' model changes (docs/admin.md "Models"). Entries and prices
 * are taken as the catalog file writes them and checked by the catalog's own schema
 * (core/catalog/schema.ts) inside the use case, so that what is stored is what was written.
 */
const modelId = z.string().min(1).max(200);
/** Optional for models: a change to the catalog is rarely about one customer. */
const reason = reasonSchema.optional();
const entry = jsonRecord(z.unknown());

export const modelRefInput = z.object({ id: modelId, reason });

export const adminModelFilter = z.object({
  type: z.enum(MODEL_TYPES).optional(),
  enabled: z.boolean().optional(),
});

export const createModelInput = z.object({
  /** A catalog file entry: id, name, type, provider (one of the file's providers), pricing, settings, … */
  model: entry,
  /** false: created disabled, to set prices before opening it. */
  enabled: z.boolean().default(true),
  reason,
});

/** Fields of an entry that `update` may not change: the id names it, the type decides its endpoint, prices change from a date (setPrices). */
export const FIXED_FIELDS = ['id', 'type', 'pricing'] as const;

export const updateModelInput = z.object({
  id: modelId,
  /** Top-level fields of the entry to replace (a field set to null is removed); not id, type or pricing. */
  changes: entry.superRefine((changes, ctx) => {
    if (Object.keys(changes).length === 0) ctx.addIssue({ code: 'custom', message: 'names no field to change' });
    for (const key of FIXED_FIELDS) {
      if (key in changes) {
        ctx.addIssue({ code: 'custom', path: [key], message: key === 'pricing' ? 'prices change from a date: use setPrices' : 'cannot be changed: create another model' });
      }
    }
  }),
  reason,
});

export const setPricesInput = z.object({
  id: modelId,
  /** The entry's `pricing` as the catalog file writes it (in-app prices). */
  prices: entry,
  /** When the prices start: now when absent; never in the past (a minute of clock skew counts as now). */
  effective_from: z.iso.datetime({ offset: true }).optional(),
  reason,
});

export const cancelPricesInput = z.object({
  id: modelId,
  /** The start of a scheduled change that has not started yet. */
  effective_from: z.iso.datetime({ offset: true }),
  reason,
});

export type CreateModelInput = z.output<typeof createModelInput>;
export type UpdateModelInput = z.output<typeof updateModelInput>;
export type SetPricesInput = z.output<typeof setPricesInput>;
export type CancelPricesInput = z.output<typeof cancelPricesInput>;
export type AdminModelFilter = z.output<typeof adminModelFilter>;

const scheduledPriceSchema = z
  .object({
    effective_from: isoTimeSchema,
    pricing: z.record(z.string(), z.unknown()).describe('in-app prices, as written'),
    created_at: isoTimeSchema,
    created_by: z.string().describe('`admin_token:adm_…`, `admin_user:adu_…` or `internal`'),
  })
  .strict();

/** A model as operators see it: the stored entry, whether it is open, its prices over time. */
export const adminModelSchema = z
  .object({
    id: z.string(),
    object: z.literal('admin_model'),
    type: z.enum(MODEL_TYPES),
    enabled: z.boolean(),
    disabled_at: isoTimeSchema.nullable(),
    definition: z.record(z.string(), z.unknown()).describe('the catalog entry as stored, in-app prices; its `pricing` is the base price'),
    prices_in_force: z
      .object({ effective_from: isoTimeSchema.nullable().describe('null: the base price'), pricing: z.record(z.string(), z.unknown()) })
      .strict(),
    /** Every scheduled price, oldest first: the past ones are history. */
    price_schedule: z.array(scheduledPriceSchema),
    /** The model as the API shows it now (API prices in force), or null when the stored entry is invalid. */
    api: modelViewSchema.nullable(),
    created_at: isoTimeSchema,
    updated_at: isoTimeSchema,
  })
  .strict();
export type AdminModelView = z.infer<typeof adminModelSchema>;
