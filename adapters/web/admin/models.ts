import type { Request } from 'express';
import { emptyState, html, type Html } from '../html.ts';
import { doneMessages, mountActions, type ActionSpec } from './actions.ts';
import { actionForm, adminPage, doneNotice, idCode, truncate, viewerNote, when, type AdminTools, type Data, type Mount, type Nav } from './shared.ts';

/**
 * The Models pages: the catalog with each model's state, prices and scheduled price changes,
 * and one model with its edit, disable / enable and price forms (docs/admin.md, "Models").
 * Prices are the catalog's in-app prices, as the catalog file writes them; core checks them.
 */

const MODELS = `query Models($after: String) { models(first: 100, after: $after) { edges { node { id name type enabled definition priceSchedule { effectiveFrom } } } pageInfo { hasNextPage endCursor } } }`;
const MODEL = `query Model($id: ID!) { model(id: $id) { id name type enabled disabledAt updatedAt definition pricesInForce { effectiveFrom pricing } priceSchedule { effectiveFrom pricing createdBy createdAt } } }`;
const DEFINITION = `query Definition($id: ID!) { model(id: $id) { id definition } }`;

interface ScheduleRow { effectiveFrom: string; pricing: unknown; createdBy?: string; createdAt?: string }

const modelUrl = (id: string) => `/admin/models/${encodeURIComponent(id)}`;

/** A price as one short line: its numbers at the top level (and how many rules more). */
export function priceLine(pricing: unknown): string {
  if (!pricing || typeof pricing !== 'object') return '—';
  const p = pricing as Record<string, unknown>;
  if ('input_per_million' in p) return `in ${String(p.input_per_million)} / out ${String(p.output_per_million)} per M tokens`;
  const rules = ['per_unit', 'factors'].map((k) => Object.keys((p[k] as object | undefined) ?? {}).length).reduce((a, b) => a + b, 0) + ((p.multiply_by as unknown[] | undefined)?.length ?? 0);
  return `base ${String(p.base)}${rules > 0 ? ` + ${rules} rule${rules === 1 ? '' : 's'}` : ''}`;
}

const future = (schedule: ScheduleRow[], now = Date.now()) => schedule.filter((s) => Date.parse(s.effectiveFrom) > now);

/** The limits an operator edits on the page, by model type (the entry's other fields stay as they are). */
const LIMITS = {
  text: [
    ['context_window', 'Context window (tokens)'],
    ['max_output_tokens', 'Max output tokens'],
    ['default_max_tokens', 'Default max tokens'],
  ],
  media: [
    ['deadline_seconds', 'Job deadline (seconds)'],
    // Optional: MCP generate's progress total (docs/catalog.md); empty leaves it as it is.
    ['expected_seconds', 'Expected job time (seconds)'],
  ],
} as const;
const limitsOf = (type: string) => (type === 'text' ? LIMITS.text : LIMITS.media);

const readDefinition = async (req: Request, tools: AdminTools) => {
  const data = await tools.read(req, DEFINITION, { id: String(req.params.id) });
  return (data.model?.definition ?? null) as Record<string, unknown> | null;
};

function editFields(def: Record<string, unknown>, type: string, values: Record<string, string>): Html {
  const v = (k: string) => values[k] ?? (def[k] === undefined ? '' : String(def[k]));
  return html`
  <label>Name <input type="text" name="name" required maxlength="200" value="${v('name')}"></label>
  <label>Description <textarea name="description" rows="3" maxlength="4000">${v('description')}</textarea></label>
  <label>Paid accounts only <select name="paid_only"><option value="false"${v('paid_only') !== 'true' ? html` selected` : ''}>no</option><option value="true"${v('paid_only') === 'true' ? html` selected` : ''}>yes</option></select></label>
  ${limitsOf(type).map(([k, label]) => html`<label>${label} <input type="number" name="${k}" min="1" step="1" value="${v(k)}"></label>`)}`;
}

const pricesFields = (def: Record<string, unknown>, values: Record<string, string>) => html`
  <label>Prices (in-app coins, JSON as the catalog file writes them) <textarea name="prices" rows="6" required maxlength="10000" class="mono">${values.prices ?? JSON.stringify(def.pricing ?? {}, null, 2)}</textarea></label>
  <label>Starts at (UTC; empty: now) <input type="datetime-local" name="effective_from" value="${values.effective_from ?? ''}"></label>`;

const MINUTE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$/;

const ACTIONS: ActionSpec[] = [
  {
    key: 'updated',
    path: '/models/:id/edit',
    title: () => 'Edit the model',
    button: () => 'Save model',
    understand: 'I understand new requests see the change at once.',
    fields: async (req, values, tools) => {
      const def = await readDefinition(req, tools);
      return def ? editFields(def, String(def.type), values) : html``;
    },
    mutation: `mutation Update($input: UpdateModelInput!) { updateModel(input: $input) { id } }`,
    variables: async (req, reason, value, tools) => {
      const def = await readDefinition(req, tools);
      if (!def) return 'No such model.';
      const changes: Record<string, unknown> = {};
      if (value('name') && value('name') !== def.name) changes.name = value('name');
      if (value('description') !== String(def.description ?? '')) changes.description = value('description');
      if (value('paid_only') && (value('paid_only') === 'true') !== (def.paid_only === true)) changes.paid_only = value('paid_only') === 'true';
      for (const [k, label] of limitsOf(String(def.type))) {
        const raw = value(k);
        if (raw === '') continue;
        if (!/^\d+$/.test(raw)) return `${label}: a whole number.`;
        if (Number(raw) !== def[k]) changes[k] = Number(raw);
      }
      if (Object.keys(changes).length === 0) return 'Nothing was changed.';
      return { input: { id: String(req.params.id), changes, reason } };
    },
    back: (req) => modelUrl(String(req.params.id)),
    done: 'The model was saved.',
  },
  {
    key: 'disabled',
    path: '/models/:id/disable',
    title: () => 'Disable the model',
    button: () => 'Disable model',
    understand: 'I understand new chats and jobs are refused for it at once; running jobs finish.',
    danger: true,
    mutation: `mutation Disable($input: ModelRefInput!) { disableModel(input: $input) { id } }`,
    variables: (req, reason) => ({ input: { id: String(req.params.id), reason } }),
    back: (req) => modelUrl(String(req.params.id)),
    done: 'The model was disabled.',
  },
  {
    key: 'enabled',
    path: '/models/:id/enable',
    title: () => 'Enable the model',
    button: () => 'Enable model',
    understand: 'I understand it is offered and billed again at once.',
    mutation: `mutation Enable($input: ModelRefInput!) { enableModel(input: $input) { id } }`,
    variables: (req, reason) => ({ input: { id: String(req.params.id), reason } }),
    back: (req) => modelUrl(String(req.params.id)),
    done: 'The model was enabled.',
  },
  {
    key: 'prices_set',
    path: '/models/:id/prices',
    title: () => 'Change the prices',
    button: () => 'Schedule prices',
    understand: 'I understand requests from that time are charged these prices.',
    fields: async (req, values, tools) => pricesFields((await readDefinition(req, tools)) ?? {}, values),
    mutation: `mutation Prices($input: SetModelPricesInput!) { setModelPrices(input: $input) { id } }`,
    variables: (req, reason, value) => {
      let prices: unknown;
      try {
        prices = JSON.parse(value('prices'));
      } catch (err) {
        return { field: 'prices', message: `Prices: not valid JSON (${(err as Error).message}).` };
      }
      const from = value('effective_from');
      if (from && !MINUTE.test(from)) return { field: 'effective_from', message: 'Starts at: a time such as 2026-12-01T09:00 (UTC).' };
      return { input: { id: String(req.params.id), prices, reason, ...(from ? { effectiveFrom: `${from.length === 16 ? `${from}:00` : from}Z` } : {}) } };
    },
    back: (req) => modelUrl(String(req.params.id)),
    done: 'The prices were scheduled.',
  },
  {
    key: 'prices_canceled',
    path: '/models/:id/prices/cancel',
    title: () => 'Cancel a scheduled price change',
    button: () => 'Cancel price change',
    understand: 'I understand the prices in force stay as they are.',
    danger: true,
    fields: (req, values) => {
      const from = values.effective_from ?? (typeof req.query.from === 'string' ? req.query.from.slice(0, 40) : '');
      return html`<input type="hidden" name="effective_from" value="${from}"><p>The change scheduled from ${when(from)}.</p>`;
    },
    mutation: `mutation CancelPrices($input: CancelModelPricesInput!) { cancelModelPrices(input: $input) { id } }`,
    variables: (req, reason, value) => (value('effective_from') ? { input: { id: String(req.params.id), effectiveFrom: value('effective_from'), reason } } : 'Effective from: which scheduled change to cancel.'),
    back: (req) => modelUrl(String(req.params.id)),
    done: 'The scheduled price change was canceled.',
  },
];
const DONE = doneMessages(ACTIONS);

function modelPage(m: Data, nav: Nav): Html {
  const def = m.definition as Record<string, unknown>;
  const url = modelUrl(m.id);
  const coming = future(m.priceSchedule as ScheduleRow[]);
  const operator = nav.role === 'operator';
  return html`
<dl class="facts">
  <dt>Id</dt><dd>${idCode(m.id)}</dd>
  <dt>Type</dt><dd>${m.type}</dd>
  <dt>State</dt><dd id="model-state">${m.enabled ? 'enabled' : html`disabled since ${when(m.disabledAt)}`}</dd>
  <dt>Description</dt><dd>${truncate(String(def.description ?? ''), 300) || '—'}</dd>
  <dt>Prices in force</dt><dd id="model-prices">${priceLine(m.pricesInForce.pricing)}${m.pricesInForce.effectiveFrom ? html` (since ${when(m.pricesInForce.effectiveFrom)})` : ''}</dd>
  ${limitsOf(m.type).map(([k, label]) => html`<dt>${label}</dt><dd>${def[k] === undefined ? '—' : String(def[k])}</dd>`)}
  <dt>Updated</dt><dd>${when(m.updatedAt)}</dd>
</dl>
<section><h2>Scheduled price changes</h2>
${coming.length === 0 ? html`<p>None.</p>` : html`<table id="price-schedule"><thead><tr><th>From</th><th>Prices</th><th>By</th>${operator ? html`<th>Cancel</th>` : ''}</tr></thead><tbody>
${coming.map((s) => html`<tr><td>${when(s.effectiveFrom)}</td><td>${priceLine(s.pricing)}</td><td>${truncate(s.createdBy ?? '', 30)}</td>${operator ? html`<td><a href="${url}/prices/cancel?${new URLSearchParams({ from: s.effectiveFrom }).toString()}">Cancel the change from ${s.effectiveFrom.slice(0, 16).replace('T', ' ')}</a></td>` : ''}</tr>`)}
</tbody></table>`}</section>
${operator
  ? html`<section><h2>Edit</h2>${actionForm({ action: `${url}/edit`, csrf: nav.csrf, fields: editFields(def, m.type, {}), understand: ACTIONS[0]!.understand, button: 'Save model', id: 'edit-model' })}</section>
<section><h2>${m.enabled ? 'Disable' : 'Enable'}</h2>${m.enabled
      ? actionForm({ action: `${url}/disable`, csrf: nav.csrf, understand: ACTIONS[1]!.understand, button: 'Disable model', danger: true, id: 'disable-model' })
      : actionForm({ action: `${url}/enable`, csrf: nav.csrf, understand: ACTIONS[2]!.understand, button: 'Enable model', id: 'enable-model' })}</section>
<section><h2>Change prices</h2>${actionForm({ action: `${url}/prices`, csrf: nav.csrf, fields: pricesFields(def, {}), understand: ACTIONS[3]!.understand, button: 'Schedule prices', id: 'set-prices' })}</section>`
  : ''}`;
}

export const mountModels: Mount = (router, tools) => {
  router.get('/models', tools.signedIn('/admin/models', async (req, res, nav) => {
    const after = typeof req.query.after === 'string' ? req.query.after.slice(0, 200) : '';
    const data = await tools.read(req, MODELS, { after: after || null });
    const models = (data.models.edges as { node: Data }[]).map((e) => e.node);
    const next = data.models.pageInfo.hasNextPage ? (data.models.pageInfo.endCursor as string) : null;
    tools.send(res, adminPage('Models', nav, html`${viewerNote(nav)}
${models.length === 0 ? emptyState('No models yet.', html`Models come from the catalog file (CATALOG_FILE): add them there and run <code>mas catalog sync</code>.`) : html`<table id="models"><thead><tr><th>Model</th><th>Type</th><th>State</th><th>Prices (in-app)</th><th>Scheduled</th></tr></thead><tbody>
${models.map((m) => {
  const coming = future(m.priceSchedule as ScheduleRow[]);
  return html`<tr><td><a href="${modelUrl(m.id)}">${truncate(m.name, 40)}</a><br>${idCode(m.id)}</td><td>${m.type}</td><td>${m.enabled ? 'enabled' : 'disabled'}</td><td>${priceLine((m.definition as Record<string, unknown>).pricing)}</td><td>${coming.length === 0 ? '—' : html`${coming.length} from ${when(coming[0]!.effectiveFrom)}`}</td></tr>`;
})}
</tbody></table>`}
${next ? html`<p><a href="/admin/models?${new URLSearchParams({ after: next }).toString()}" rel="next">Next page</a></p>` : ''}`));
  }));
  router.get('/models/:id', tools.signedIn('/admin/models', async (req, res, nav) => {
    const data = await tools.read(req, MODEL, { id: String(req.params.id) });
    const m = data.model as Data | null;
    if (!m) return tools.send(res, adminPage('Not found', nav, html`<p class="error" role="alert">No such model.</p>`), 404);
    tools.send(res, adminPage(`Model ${m.name}`, nav, html`${doneNotice(req, DONE)}${viewerNote(nav)}${modelPage(m, nav)}`));
  }));
  mountActions(router, tools, ACTIONS);
};
