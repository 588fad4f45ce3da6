import type { z } from 'zod';
import type { modelViewSchema } from '../../../core/catalog/views.ts';
import { html, page, usdText, type Html } from '../html.ts';
import { apiBase, modelSnippets } from './snippets.ts';

/**
 * The public pages, for anyone, signed in or not: the landing page, the model catalog with its
 * API prices, and each model's page with ready requests. What they show comes from core's
 * catalog read (`models.catalog`, `models.page`): enabled models at the prices in force.
 */
export type ModelView = z.infer<typeof modelViewSchema>;
export interface Visitor {
  signedIn: boolean;
}

const KINDS: { type: ModelView['type']; heading: string; unit: string }[] = [
  { type: 'text', heading: 'Chat models', unit: '' },
  { type: 'image', heading: 'Image models', unit: 'image' },
  { type: 'video', heading: 'Video models', unit: 'video' },
  { type: 'audio', heading: 'Audio models', unit: 'audio clip' },
  { type: '3d', heading: '3D models', unit: '3D model' },
];

/** A price in coins, grouped by thousands, with what it is in US dollars (`1,234 coins ($1.23)`; issue 48: money a person can read). */
const coins = (n: unknown) => `${typeof n === 'number' ? n.toLocaleString('en-US', { maximumFractionDigits: 6 }) : String(n)} ${n === 1 ? 'coin' : 'coins'}${typeof n === 'number' ? ` (${usdText(n)})` : ''}`;
const record = (v: unknown) => (v && typeof v === 'object' ? (v as Record<string, unknown>) : {});

/** The price in the model's own shape: per million input and output tokens, or per job with what changes it. */
export function priceLines(m: ModelView): string[] {
  const p = record(m.pricing);
  if (m.type === 'text') return [`${coins(p.input)} per million input tokens`, `${coins(p.output)} per million output tokens`];
  const unit = KINDS.find((k) => k.type === m.type)?.unit ?? 'job';
  const lines = [`from ${coins(p.from)} per ${unit}`];
  const base = Number(p.base ?? 0);
  const perUnit = Object.entries(record(p.per_unit));
  const factors = Object.entries(record(p.factors));
  const multiply = Array.isArray(p.multiply_by) ? (p.multiply_by as string[]) : [];
  if (perUnit.length > 0 || factors.length > 0 || multiply.length > 0) {
    lines.push(`${coins(base)} base`);
    for (const [setting, price] of perUnit) lines.push(`+ ${coins(price)} per unit of ${setting}${unitHint(m, setting)}`);
    for (const [setting, table] of factors) lines.push(`× by ${setting}: ${Object.entries(record(table)).map(([o, f]) => `${o} ×${String(f)}`).join(', ')}`);
    for (const setting of multiply) lines.push(`× ${setting}`);
  }
  return lines;
}
const unitHint = (m: ModelView, setting: string) => {
  const d = record(m.settings[setting]).description;
  return typeof d === 'string' && d.length <= 20 ? ` (${d.toLowerCase()})` : '';
};

const priceSummary = (m: ModelView) => priceLines(m).slice(0, m.type === 'text' ? 2 : 1).join(' · ');
export const modelHref = (id: string) => `/models/${id.split('/').map(encodeURIComponent).join('/')}`;

/**
 * The models a page's examples use: a chat model and a media model a new account can run (not
 * paid-only, and for media no required input file), else the first of their kind.
 */
export function exampleModels(models: ModelView[]): { chat?: ModelView | undefined; media?: ModelView | undefined } {
  const chats = models.filter((m) => m.type === 'text');
  const medias = models.filter((m) => m.type !== 'text');
  const noInputNeeded = (m: ModelView) => !Object.values(m.inputs).some((i) => record(i).required === true);
  return {
    chat: chats.find((m) => !m.paid_only) ?? chats[0],
    media: medias.find((m) => m.type === 'image' && !m.paid_only && noInputNeeded(m)) ?? medias.find((m) => !m.paid_only && noInputNeeded(m)) ?? medias[0],
  };
}

const kindName = (m: ModelView) => KINDS.find((k) => k.type === m.type)?.heading.replace(/ models$/, '') ?? m.type;

/** The models in the catalog pages' order: chat, image, video, audio, 3D, each kind in the catalog's order. */
export const byKind = (models: ModelView[]) => KINDS.flatMap((k) => models.filter((m) => m.type === k.type));

/** The models on sale with their API prices, as a table, kind by kind: the landing page's and the pricing doc's. */
export function priceTable(unordered: ModelView[]): Html {
  const models = byKind(unordered);
  if (models.length === 0) return html`<p>No models are offered right now.</p>`;
  return html`<div class="table-wrap" role="region" tabindex="0" aria-label="Models and prices"><table class="prices">
  <thead><tr><th scope="col">Model</th><th scope="col">Kind</th><th scope="col">Price (coins)</th></tr></thead>
  <tbody>${models.map(
    (m) => html`<tr><td><a href="${modelHref(m.id)}">${m.name}</a><br><code>${m.id}</code>${m.paid_only ? html` <span class="tag">paid accounts only</span>` : ''}</td><td>${kindName(m)}</td><td>${priceLines(m)
      .slice(0, m.type === 'text' ? 2 : 1)
      .map((l, i) => html`${i > 0 ? html`<br>` : ''}${l}`)}</td></tr>`,
  )}</tbody>
</table></div>`;
}

/** How many models the landing page lists before "See all": the rest are on /models. */
const LANDING_MODELS = 8;

export function landingPage(visitor: Visitor, publicBaseUrl: string, models: ModelView[]) {
  const base = apiBase(publicBaseUrl);
  const { chat } = exampleModels(models);
  const snippets = chat ? modelSnippets(chat, publicBaseUrl).filter((s) => s.id !== 'mcp') : [];
  const shown = byKind(models).slice(0, LANDING_MODELS);
  return page(
    { title: 'Model Access Service', publicNav: { current: '/', signedIn: visitor.signedIn } },
    html`<p class="lead">One API key for chat and media models, paid for with coins: 1,000 coins = 1 US dollar, and you pay only for what you use.</p>
<p class="actions">${visitor.signedIn
  ? html`<a class="button" href="/account">Your account</a> <a href="/account/keys">Create an API key</a> <a href="/docs/quickstart">Quickstart</a>`
  : html`<a class="button" href="/signup">Sign up</a> <a href="/login">Sign in</a> <a href="/docs/quickstart">Quickstart</a> <a href="/docs">Docs</a>`}</p>
<h2 id="models">Models and prices</h2>
<p>API prices in coins. Chat models are priced per million tokens; a media job has one price, known before it starts, and is refunded if it fails.</p>
${priceTable(shown)}
${models.length > shown.length ? html`<p><a href="/models">See all ${models.length} models and their prices</a></p>` : html`<p><a href="/models">Every model, its settings and a ready request</a></p>`}
<h2 id="first-request">Your first request</h2>
<p>Sign up, create a key on <a href="/account/keys">API keys</a>, put it in <code>MAS_API_KEY</code>, and run one of these against <code>${base}</code>. The official <code>openai</code> libraries work unchanged.</p>
${snippets.length === 0
  ? html`<div class="snippet"><pre tabindex="0" aria-label="curl request"><code id="snippet-curl">curl ${base}/models -H "Authorization: Bearer $MAS_API_KEY"</code></pre></div>`
  : snippets.map(
      (s) => html`<h3 id="request-${s.id}">${s.label.replace(/^Node\b/, 'JavaScript')}</h3>
<div class="snippet"><pre tabindex="0" aria-label="${s.label} request"><code id="snippet-${s.id}">${s.code}</code></pre><button type="button" data-copy="snippet-${s.id}" aria-label="Copy the ${s.label} request" hidden>Copy</button></div>`,
    )}
<p>More in <a href="/docs/quickstart">the quickstart</a>: media jobs, streaming and the MCP connector.</p>
<h2 id="what">What you get</h2>
<ul class="features">
  <li><strong>OpenAI-compatible chat.</strong> Point the openai SDK (or any client of the chat completions API) at <code>${base}</code> and use any chat model of <a href="/models">the catalog</a>, streaming and tools included.</li>
  <li><strong>Media jobs.</strong> Images, video, audio and 3D: submit a job, wait for it or get a webhook, download the result. A job that fails is refunded.</li>
  <li><strong>Files.</strong> Upload reference images and samples once, use them in any job.</li>
  <li><strong>Coins.</strong> One balance for everything, topped up by card or by a subscription; every charge and refund is in your history.</li>
  <li><strong>An MCP connector for agents.</strong> Claude, Cursor or ChatGPT connect to <code>${base}/mcp</code> and chat or make media with your coins, within a cap you set.</li>
</ul>
<h2 id="start">Start here</h2>
<ul>
  <li><a href="/docs/quickstart">Quickstart</a>: an account, a key and a first request in five minutes.</li>
  <li><a href="/models">Models and prices</a>: every model, its settings and a ready request.</li>
  <li><a href="/docs">Docs</a>: chat, media jobs, files, the MCP connector, errors, limits and pricing.</li>
  <li><a href="/api/v1/docs">API reference</a>: every endpoint, from the OpenAPI document.</li>
</ul>`,
  );
}

export function catalogPage(visitor: Visitor, models: ModelView[]) {
  const groups = KINDS.map((k) => ({ ...k, models: models.filter((m) => m.type === k.type) })).filter((g) => g.models.length > 0);
  return page(
    { title: 'Models', publicNav: { current: '/models', signedIn: visitor.signedIn } },
    html`<p>Prices are API prices in coins (1,000 coins = 1 USD). ${groups.length > 1 ? html`Jump to: ${groups.map((g, i) => html`${i > 0 ? ', ' : ''}<a href="#${g.type}">${g.heading}</a>`)}.` : ''}</p>
${groups.length === 0 ? html`<p>No models are offered right now.</p>` : ''}
${groups.map(
  (g) => html`<section aria-labelledby="${g.type}">
<h2 id="${g.type}">${g.heading}</h2>
<ul class="models">${g.models.map(
    (m) => html`<li>
  <h3><a href="${modelHref(m.id)}">${m.name}</a></h3>
  <p class="model-id"><code>${m.id}</code>${m.paid_only ? html` <span class="tag">paid accounts only</span>` : ''}</p>
  <p>${truncate(m.description, 200)}</p>
  <p class="price">${priceSummary(m)}</p>
</li>`,
  )}</ul>
</section>`,
)}`,
  );
}

const truncate = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 1).trimEnd()}…` : text);

function settingRows(m: ModelView): Html[] {
  return Object.entries(m.settings).map(([name, raw]) => {
    const s = record(raw);
    const allowed =
      s.type === 'enum' && Array.isArray(s.options)
        ? (s.options as unknown[]).map(String).join(', ')
        : s.type === 'integer' || s.type === 'number'
          ? `${String(s.min)} to ${String(s.max)}`
          : s.type === 'boolean'
            ? 'true, false'
            : s.type === 'string'
              ? `text, up to ${String(s.max_length ?? 1000)} characters`
              : '';
    return html`<tr><td><code>${name}</code></td><td>${String(s.type ?? '')}</td><td>${allowed}</td><td>${s.default === undefined ? '—' : JSON.stringify(s.default)}</td><td>${typeof s.description === 'string' ? s.description : ''}</td></tr>`;
  });
}

function inputRows(m: ModelView): Html[] {
  return Object.entries(m.inputs).map(([name, raw]) => {
    const i = record(raw);
    const accepts = Array.isArray(i.accepts) ? (i.accepts as unknown[]).map(String).join(', ') : '';
    return html`<tr><td><code>${name}</code></td><td>${accepts}${i.multiple ? ' (several)' : ''}</td><td>${i.required ? 'yes' : 'no'}</td><td>${typeof i.description === 'string' ? i.description : ''}</td></tr>`;
  });
}

export function modelPage(visitor: Visitor, m: ModelView, publicBaseUrl: string) {
  const chat = m.type === 'text';
  const kind = KINDS.find((k) => k.type === m.type)?.heading.replace(/ models$/, '') ?? m.type;
  const snippets = modelSnippets(m, publicBaseUrl);
  return page(
    { title: m.name, publicNav: { current: '/models', signedIn: visitor.signedIn } },
    html`<p><a href="/models">All models</a></p>
<p>${m.description}</p>
<dl class="facts">
  <dt>Model id</dt><dd><code>${m.id}</code></dd>
  <dt>Kind</dt><dd>${kind}${m.generation_types.length > 0 ? ` (${m.generation_types.join(', ')})` : ''}</dd>
  <dt>Price</dt><dd>${priceLines(m).map((l, i) => html`${i > 0 ? html`<br>` : ''}${l}`)}</dd>
  ${m.paid_only ? html`<dt>Who</dt><dd>Paid accounts only (after a first top-up or a subscription)</dd>` : ''}
  ${chat
    ? html`<dt>Context window</dt><dd>${m.context_window?.toLocaleString('en-US')} tokens</dd>
  <dt>Longest answer</dt><dd>${m.max_output_tokens?.toLocaleString('en-US')} tokens (default ${m.default_max_tokens?.toLocaleString('en-US')})</dd>
  ${m.supported_parameters ? html`<dt>Parameters</dt><dd>${m.supported_parameters.join(', ')}</dd>` : ''}`
    : html`<dt>Time limit</dt><dd>${m.deadline_seconds} seconds per job</dd>`}
</dl>
${Object.keys(m.settings).length > 0
  ? html`<h2>Settings</h2>
<div class="table-wrap" role="region" tabindex="0" aria-label="Settings"><table>
  <thead><tr><th>Name</th><th>Type</th><th>Allowed</th><th>Default</th><th>What it does</th></tr></thead>
  <tbody>${settingRows(m)}</tbody>
</table></div>`
  : ''}
${Object.keys(m.inputs).length > 0
  ? html`<h2>Inputs</h2>
<p>Files the job can take (a URL, or the id of a file uploaded with <code>POST /files</code>).</p>
<div class="table-wrap" role="region" tabindex="0" aria-label="Inputs"><table>
  <thead><tr><th>Name</th><th>Accepts</th><th>Required</th><th>What it is</th></tr></thead>
  <tbody>${inputRows(m)}</tbody>
</table></div>`
  : ''}
<h2>Ready requests</h2>
<p>Replace <code>$MAS_API_KEY</code> with one of <a href="/account/keys">your API keys</a> (or export it in your shell). ${chat ? 'Any OpenAI-compatible client works with this base URL.' : 'A job answers with its id and status; the result link comes when it has succeeded.'}</p>
${snippets.map(
  (s) => html`<h3 id="request-${s.id}">${s.label}</h3>
<div class="snippet"><pre tabindex="0" aria-label="${s.label} request"><code id="snippet-${s.id}">${s.code}</code></pre><button type="button" data-copy="snippet-${s.id}" aria-label="Copy the ${s.label} request" hidden>Copy</button></div>`,
)}`,
  );
}

export function modelNotFoundPage(visitor: Visitor, id: string) {
  return page(
    { title: 'No such model', publicNav: { current: '/models', signedIn: visitor.signedIn } },
    html`<p class="error" role="alert">There is no model <code>${truncate(id, 200)}</code> in the catalog (or it is not offered right now).</p>
<p><a href="/models">See every model</a></p>`,
  );
}
