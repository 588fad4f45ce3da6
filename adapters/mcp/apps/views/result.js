// The result viewer for generate, get_generation (and list_generations): one job, or a list of jobs.
/* global el, when, coins, truncate, show, connectApp, linkTo */

const { app, start } = await connectApp('mas-result-viewer');

const KIND_3D = /^model\/(gltf\+json|gltf-binary|obj)$/;
const KIND_NAMES = { image: 'image', audio: 'audio', video: 'video' };

function mediaOf(job) {
  const { url, mime_type: mime } = job.output;
  const label = `Result of ${job.id}${job.prompt ? `: ${truncate(job.prompt, 120)}` : ''}`;
  const kind = KIND_NAMES[mime.split('/')[0]];
  if (kind === 'image') return el('img', { class: 'media', src: url, alt: label });
  if (kind === 'audio' || kind === 'video') {
    // A format this browser cannot play (the demo video is an AVI) says so, beside the file's link.
    const note = el('p', { class: 'muted', hidden: true }, `This viewer cannot play ${mime}: open the file.`);
    const player = el(kind, { class: 'media', src: url, controls: true, preload: 'metadata', playsinline: kind === 'video', 'aria-label': label, onerror: () => {
      player.setAttribute('hidden', '');
      note.removeAttribute('hidden');
    } });
    return el('div', {}, player, note);
  }
  if (KIND_3D.test(mime) || /\.(gltf|glb|obj)(\?|$)/.test(new URL(url).pathname)) return viewer3d(url, mime, label);
  return el('p', {}, `A ${mime} file.`);
}

function details(job) {
  const rows = [['Model', job.model]];
  if (job.status === 'succeeded') {
    rows.push(['Cost', coins(job.cost_coins)]);
    if (job.output) rows.push(['Link expires', when(job.output.expires_at)], ['Size', `${job.output.bytes.toLocaleString('en')} bytes, ${job.output.mime_type}`]);
  } else if (job.status === 'failed' || job.status === 'canceled') {
    rows.push(['Cost', `${coins(job.cost_coins ?? 0)} (${coins(job.price_coins)} refunded)`]);
  } else {
    rows.push(['Price', `${coins(job.price_coins)}, reserved; refunded if it fails`]);
  }
  rows.push(['Started', when(job.started_at ?? job.created_at)]);
  if (job.completed_at) rows.push(['Ended', when(job.completed_at)]);
  if (job.prompt) rows.push(['Prompt', truncate(job.prompt, 200)]);
  return el('dl', {}, rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
}

function heading(job) {
  return el('h1', {}, `${job.id} `, el('span', { class: `status ${job.status}` }, job.status));
}

function refreshButton(job) {
  if (!app.getHostCapabilities()?.serverTools) return el('p', { class: 'muted' }, `Call get_generation with id "${job.id}" for its result.`);
  return el('div', { class: 'row' }, el('button', {
    type: 'button',
    'aria-label': `Check job ${job.id} again`,
    onclick: async (event) => {
      event.currentTarget.disabled = true;
      try {
        const result = await app.callServerTool({ name: 'get_generation', arguments: { id: job.id } });
        renderResult(result);
      } catch (err) {
        show(heading(job), details(job), el('p', { class: 'error' }, `Could not check the job: ${err?.message ?? err}`), refreshButton(job));
      }
    },
  }, 'Check again'));
}

function renderJob(job, back) {
  const parts = [heading(job)];
  if (job.status === 'succeeded' && job.output) {
    parts.push(mediaOf(job), details(job), el('p', {}, linkTo(app, job.output.url, 'Open the file', `Open the file: the result of ${job.id}`), el('span', { class: 'muted' }, ' (the link expires; get_generation gives a fresh one)')));
  } else if (job.status === 'failed') {
    parts.push(el('p', { class: 'error' }, `Failed: ${truncate(job.error?.message ?? 'unknown error', 300)} (${job.error?.code ?? 'failed'}).`), details(job));
  } else if (job.status === 'canceled') {
    parts.push(el('p', {}, 'Canceled, and refunded in full.'), details(job));
  } else {
    parts.push(el('p', {}, job.status === 'queued' ? 'Waiting for a worker…' : 'Running…'), details(job), refreshButton(job));
  }
  if (back) parts.push(el('div', { class: 'row' }, el('button', { type: 'button', onclick: back }, 'Back to the list')));
  show(...parts);
}

function renderList(list) {
  const jobs = list.data.filter((j) => j && j.object === 'generation');
  const again = () => renderList(list);
  show(
    el('h1', {}, `${jobs.length} job${jobs.length === 1 ? '' : 's'}${list.has_more ? ' (more on the next page)' : ''}`),
    el('ul', { class: 'jobs' }, jobs.map((job) => el('li', {},
      el('div', {}, el('span', { class: 'model-id' }, job.id), ' ', job.model, ' ', el('span', { class: `status ${job.status}` }, job.status)),
      el('div', { class: 'choice' },
        el('span', { class: 'price' }, job.status === 'succeeded' ? coins(job.cost_coins) : job.status === 'failed' || job.status === 'canceled' ? 'refunded' : `${coins(job.price_coins)} reserved`),
        el('button', { type: 'button', 'aria-label': `Show job ${job.id}`, onclick: () => renderJob(job, again) }, 'Show')),
    ))),
  );
}

function renderResult(result) {
  const s = result?.structuredContent;
  if (result?.isError || !s) {
    const text = (result?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
    show(el('h1', {}, 'No result'), el('p', { class: 'error' }, truncate(text || 'The tool gave no result.', 500)));
  } else if (s.object === 'generation') renderJob(s);
  else if (s.object === 'list' && Array.isArray(s.data)) renderList(s);
  else show(el('h1', {}, 'Result'), el('p', {}, 'This result has nothing to show.'));
}

app.ontoolinput = ({ arguments: args }) => {
  if (args?.model) show(el('h1', {}, 'Starting a job'), el('p', {}, `On ${args.model}…`));
};
app.ontoolresult = renderResult;
app.ontoolcancelled = () => show(el('h1', {}, 'Canceled'), el('p', {}, 'The call was canceled. A started job keeps running: list_generations or get_generation finds it.'));

// ---- A small WebGL viewer for triangle meshes: glTF 2.0 (embedded buffers), GLB and OBJ. ----

function viewer3d(url, mime, label) {
  const canvas = el('canvas', { class: 'media', width: 640, height: 480, role: 'img', 'aria-label': `3D model: ${label}. Drag to turn it.` });
  const status = el('p', { class: 'muted' }, 'Loading the 3D model…');
  const box = el('div', {}, canvas, status);
  fetch(url)
    .then(async (res) => {
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const bytes = new Uint8Array(await res.arrayBuffer());
      const mesh = /obj/.test(mime) || /\.obj(\?|$)/.test(url) ? parseObj(new TextDecoder().decode(bytes)) : parseGltf(bytes);
      draw(canvas, mesh);
      status.textContent = `${mesh.triangles.toLocaleString('en')} triangles. Drag to turn it.`;
    })
    .catch((err) => {
      status.textContent = `The 3D model could not be shown here (${err?.message ?? err}); open the file instead.`;
      status.className = 'error';
    });
  return box;
}

const COMPONENTS = { SCALAR: 1, VEC2: 2, VEC3: 3, VEC4: 4 };
const ARRAYS = { 5120: Int8Array, 5121: Uint8Array, 5122: Int16Array, 5123: Uint16Array, 5125: Uint32Array, 5126: Float32Array };

function base64Bytes(dataUri) {
  const comma = dataUri.indexOf(',');
  const bin = atob(dataUri.slice(comma + 1));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Positions of every triangle of every mesh (mode 4), from a .gltf (JSON, data: buffers) or a .glb. */
function parseGltf(bytes) {
  let doc;
  let bin;
  if (bytes[0] === 0x67 && bytes[1] === 0x6c && bytes[2] === 0x54 && bytes[3] === 0x46) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    let at = 12;
    while (at < bytes.length) {
      const length = view.getUint32(at, true);
      const type = view.getUint32(at + 4, true);
      const chunk = bytes.subarray(at + 8, at + 8 + length);
      if (type === 0x4e4f534a) doc = JSON.parse(new TextDecoder().decode(chunk));
      else if (type === 0x004e4942) bin = chunk;
      at += 8 + length;
    }
  } else doc = JSON.parse(new TextDecoder().decode(bytes));
  const buffers = (doc.buffers ?? []).map((b, i) => {
    if (b.uri === undefined && i === 0 && bin) return bin;
    if (typeof b.uri === 'string' && b.uri.startsWith('data:')) return base64Bytes(b.uri);
    throw new Error('external buffers are not shown here');
  });
  const read = (index) => {
    const a = doc.accessors[index];
    const bv = doc.bufferViews[a.bufferView];
    const src = buffers[bv.buffer];
    const n = COMPONENTS[a.type] * a.count;
    const Type = ARRAYS[a.componentType];
    const start = src.byteOffset + (bv.byteOffset ?? 0) + (a.byteOffset ?? 0);
    const stride = bv.byteStride;
    const size = COMPONENTS[a.type] * Type.BYTES_PER_ELEMENT;
    if (!stride || stride === size) return new Type(src.buffer.slice(start, start + n * Type.BYTES_PER_ELEMENT));
    const out = new Type(n);
    for (let i = 0; i < a.count; i++) {
      const row = new Type(src.buffer.slice(start + i * stride, start + i * stride + size));
      out.set(row, i * COMPONENTS[a.type]);
    }
    return out;
  };
  const positions = [];
  for (const mesh of doc.meshes ?? []) {
    for (const p of mesh.primitives ?? []) {
      if ((p.mode ?? 4) !== 4 || p.attributes?.POSITION === undefined) continue;
      const pos = read(p.attributes.POSITION);
      const idx = p.indices !== undefined ? read(p.indices) : Array.from({ length: pos.length / 3 }, (_, i) => i);
      for (const i of idx) positions.push(pos[i * 3], pos[i * 3 + 1], pos[i * 3 + 2]);
    }
  }
  if (positions.length === 0) throw new Error('no triangles in the file');
  return { positions: new Float32Array(positions), triangles: positions.length / 9 };
}

/** Positions of the faces of an OBJ (polygons as fans). */
function parseObj(text) {
  const v = [];
  const positions = [];
  for (const line of text.split('\n')) {
    const parts = line.trim().split(/\s+/);
    if (parts[0] === 'v') v.push(parts.slice(1, 4).map(Number));
    else if (parts[0] === 'f') {
      const ids = parts.slice(1).map((p) => {
        const n = parseInt(p.split('/')[0], 10);
        return n < 0 ? v.length + n : n - 1;
      });
      for (let i = 1; i + 1 < ids.length; i++) for (const k of [ids[0], ids[i], ids[i + 1]]) positions.push(...(v[k] ?? [0, 0, 0]));
    }
  }
  if (positions.length === 0) throw new Error('no faces in the file');
  return { positions: new Float32Array(positions), triangles: positions.length / 9 };
}

const VERTEX = `attribute vec3 p; attribute vec3 n; uniform mat4 m; varying vec3 vn;
void main() { gl_Position = m * vec4(p, 1.0); vn = mat3(m) * n; }`;
const FRAGMENT = `precision mediump float; varying vec3 vn;
void main() { float l = 0.3 + 0.7 * abs(dot(normalize(vn), normalize(vec3(0.4, 0.7, -0.6)))); gl_FragColor = vec4(vec3(0.36, 0.62, 0.88) * l, 1.0); }`;

function draw(canvas, mesh) {
  const gl = canvas.getContext('webgl', { preserveDrawingBuffer: true, antialias: true });
  if (!gl) throw new Error('no WebGL in this browser');
  const p = mesh.positions;
  // Centre and scale into the unit cube; one flat normal per triangle.
  const min = [Infinity, Infinity, Infinity];
  const max = [-Infinity, -Infinity, -Infinity];
  for (let i = 0; i < p.length; i++) {
    min[i % 3] = Math.min(min[i % 3], p[i]);
    max[i % 3] = Math.max(max[i % 3], p[i]);
  }
  const scale = 1.2 / Math.max(max[0] - min[0], max[1] - min[1], max[2] - min[2], 1e-9);
  const pos = new Float32Array(p.length);
  for (let i = 0; i < p.length; i++) pos[i] = (p[i] - (min[i % 3] + max[i % 3]) / 2) * scale;
  const nor = new Float32Array(p.length);
  for (let t = 0; t < pos.length; t += 9) {
    const ax = pos[t + 3] - pos[t], ay = pos[t + 4] - pos[t + 1], az = pos[t + 5] - pos[t + 2];
    const bx = pos[t + 6] - pos[t], by = pos[t + 7] - pos[t + 1], bz = pos[t + 8] - pos[t + 2];
    let nx = ay * bz - az * by, ny = az * bx - ax * bz, nz = ax * by - ay * bx;
    const len = Math.hypot(nx, ny, nz) || 1;
    nx /= len; ny /= len; nz /= len;
    for (let k = 0; k < 3; k++) nor.set([nx, ny, nz], t + k * 3);
  }
  const shader = (type, src) => {
    const s = gl.createShader(type);
    gl.shaderSource(s, src);
    gl.compileShader(s);
    return s;
  };
  const prog = gl.createProgram();
  gl.attachShader(prog, shader(gl.VERTEX_SHADER, VERTEX));
  gl.attachShader(prog, shader(gl.FRAGMENT_SHADER, FRAGMENT));
  gl.linkProgram(prog);
  gl.useProgram(prog);
  const attribute = (name, data) => {
    const buf = gl.createBuffer();
    gl.bindBuffer(gl.ARRAY_BUFFER, buf);
    gl.bufferData(gl.ARRAY_BUFFER, data, gl.STATIC_DRAW);
    const loc = gl.getAttribLocation(prog, name);
    gl.enableVertexAttribArray(loc);
    gl.vertexAttribPointer(loc, 3, gl.FLOAT, false, 0, 0);
  };
  attribute('p', pos);
  attribute('n', nor);
  const matrix = gl.getUniformLocation(prog, 'm');
  gl.enable(gl.DEPTH_TEST);
  let yaw = 0.6;
  let pitch = 0.35;
  const render = () => {
    const cy = Math.cos(yaw), sy = Math.sin(yaw), cp = Math.cos(pitch), sp = Math.sin(pitch);
    const aspect = canvas.width / canvas.height;
    // Column-major: rotate about y, then x; keep the aspect; z into [-1, 1] for depth.
    const m = [cy / aspect, sy * sp, -sy * cp * 0.5, 0, 0, cp, sp * 0.5, 0, sy / aspect, -cy * sp, cy * cp * 0.5, 0, 0, 0, 0, 1];
    gl.viewport(0, 0, canvas.width, canvas.height);
    gl.clearColor(0, 0, 0, 0);
    gl.clear(gl.COLOR_BUFFER_BIT | gl.DEPTH_BUFFER_BIT);
    gl.uniformMatrix4fv(matrix, false, new Float32Array(m));
    gl.drawArrays(gl.TRIANGLES, 0, pos.length / 3);
  };
  let drag;
  canvas.addEventListener('pointerdown', (e) => {
    drag = { x: e.clientX, y: e.clientY };
    canvas.setPointerCapture(e.pointerId);
  });
  canvas.addEventListener('pointerup', () => (drag = undefined));
  canvas.addEventListener('pointermove', (e) => {
    if (!drag) return;
    yaw += (e.clientX - drag.x) * 0.01;
    pitch = Math.max(-1.5, Math.min(1.5, pitch + (e.clientY - drag.y) * 0.01));
    drag = { x: e.clientX, y: e.clientY };
    render();
  });
  render();
}

await start();
