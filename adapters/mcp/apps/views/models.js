// The model picker for list_models: the models with their prices; choosing one asks the conversation to use it.
/* global el, show, connectApp, truncate */

const { app, start } = await connectApp('mas-model-picker');

function price(model) {
  const p = model.pricing ?? {};
  if (model.type === 'text') return `${p.input ?? '?'} in / ${p.output ?? '?'} out coins per million tokens`;
  return `from ${p.from ?? p.base ?? '?'} coins a job`;
}

let models = [];
let chosen = '';

function choose(model, note) {
  if (!app.getHostCapabilities()?.message) {
    note.textContent = `Use the model id ${model.id} in your request.`;
    return;
  }
  note.textContent = `Asking to use ${model.id}…`;
  app
    .sendMessage({ role: 'user', content: [{ type: 'text', text: `Use the model ${model.id} (${model.name}, ${price(model)}).` }] })
    .then((r) => (note.textContent = r?.isError ? `The host refused: use the model id ${model.id} in your request.` : `Asked to use ${model.id}.`))
    .catch(() => (note.textContent = `Use the model id ${model.id} in your request.`));
}

function render() {
  const types = [...new Set(models.map((m) => m.type))];
  const shown = chosen ? models.filter((m) => m.type === chosen) : models;
  const note = el('p', { class: 'muted', role: 'status' });
  const filter = el('select', { id: 'type', onchange: (e) => { chosen = e.currentTarget.value; render(); document.getElementById('type')?.focus(); } },
    el('option', { value: '' }, 'All kinds'),
    types.map((t) => el('option', { value: t, selected: t === chosen }, t)));
  show(
    el('h1', {}, `${shown.length} model${shown.length === 1 ? '' : 's'}`),
    types.length > 1 ? el('div', { class: 'row' }, el('label', { for: 'type' }, 'Kind'), filter) : null,
    el('ul', { class: 'models' }, shown.map((m) => el('li', {},
      el('div', {}, el('span', { class: 'model-name' }, m.name), ' ', el('span', { class: 'model-id' }, m.id), m.paid_only ? el('span', { class: 'muted' }, ' · paid accounts') : null,
        el('br'), el('span', { class: 'muted' }, truncate(m.description, 140))),
      el('div', { class: 'choice' },
        el('span', { class: 'price' }, price(m)),
        el('button', { type: 'button', 'aria-label': `Use ${m.name} (${m.id})`, onclick: () => choose(m, note) }, 'Use')),
    ))),
    note,
  );
}

app.ontoolresult = (result) => {
  const data = result?.structuredContent?.data;
  if (!Array.isArray(data)) {
    show(el('h1', {}, 'No models'), el('p', { class: 'muted' }, 'The tool gave no list.'));
    return;
  }
  models = data;
  render();
};

await start();
