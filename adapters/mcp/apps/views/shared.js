// Shared by the views (inlined after the ext-apps App bundle, which defines `App`). Browser code:
// it builds the page with DOM calls (no innerHTML), so every value from a tool result is text.

/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== undefined && c !== null && c !== false) node.append(c instanceof Node ? c : String(c));
  return node;
}

const TIME = new Intl.DateTimeFormat('en-GB', { day: 'numeric', month: 'short', year: 'numeric', hour: '2-digit', minute: '2-digit', hourCycle: 'h23', timeZone: 'UTC' });
/** "27 Nov 2026, 14:03 UTC". */
function when(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : `${TIME.format(d)} UTC`;
}

function coins(n) {
  return n === null || n === undefined ? '–' : `${n} coin${n === 1 ? '' : 's'}`;
}

function truncate(text, max) {
  const s = String(text ?? '');
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/** Replaces the view's content. */
function show(...nodes) {
  const root = document.getElementById('app');
  root.replaceChildren(...nodes);
}

/** Connects to the host; follows its theme when it names one. */
async function connectApp(name) {
  const app = new App({ name, version: '1.0.0' }, {}, { autoResize: true });
  const theme = (ctx) => {
    if (ctx?.theme === 'dark' || ctx?.theme === 'light') document.documentElement.dataset.theme = ctx.theme;
  };
  app.onhostcontextchanged = theme;
  return {
    app,
    start: async () => {
      await app.connect();
      theme(app.getHostContext());
    },
  };
}

/** Opens a link through the host when it can (a sandboxed frame may not open windows itself). */
function linkTo(app, url, text, label) {
  return el('a', {
    href: url,
    target: '_blank',
    rel: 'noopener noreferrer',
    'aria-label': label,
    onclick: (event) => {
      if (!app.getHostCapabilities()?.openLinks) return;
      event.preventDefault();
      app.openLink({ url }).catch(() => window.open(url, '_blank', 'noopener'));
    },
  }, text);
}
