import { crc32, deflateSync } from 'node:zlib';

/**
 * Small, real media files made from bytes, for the offline `local` provider: a PNG image, a
 * WAV clip, an uncompressed AVI video and a glTF 2.0 model. `rand` is a seeded generator so
 * the same job always makes the same file.
 */
export type Rand = () => number;

export function seededRandom(seed: Uint8Array): Rand {
  let state = seed.reduce((h, b) => Math.imul(h ^ b, 16777619) >>> 0, 2166136261) || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state / 0x100000000;
  };
}

/** RGB pixels of a seeded gradient with a few discs; `frame` animates it for video. */
function paint(width: number, height: number, rand: Rand, frame = 0): Uint8Array {
  const base = [rand() * 255, rand() * 255, rand() * 255];
  const discs = Array.from({ length: 4 }, () => ({ x: rand() * width, y: rand() * height, r: (0.1 + rand() * 0.25) * width, c: [rand() * 255, rand() * 255, rand() * 255] }));
  const px = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = (y * width + x) * 3;
      let rgb = [base[0]! * (x / width), base[1]! * (y / height), base[2]!];
      for (const d of discs) {
        const dx = x - ((d.x + frame * 3) % width);
        if (dx * dx + (y - d.y) ** 2 < d.r * d.r) rgb = d.c;
      }
      px[i] = rgb[0]!;
      px[i + 1] = rgb[1]!;
      px[i + 2] = rgb[2]!;
    }
  }
  return px;
}

function pngChunk(type: string, data: Uint8Array): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'ascii');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
  return Buffer.concat([head, data, crc]);
}

export function png(width: number, height: number, rand: Rand): Uint8Array {
  const px = paint(width, height, rand);
  const raw = Buffer.alloc((width * 3 + 1) * height);
  for (let y = 0; y < height; y++) {
    raw[y * (width * 3 + 1)] = 0; // filter: none
    Buffer.from(px.buffer, y * width * 3, width * 3).copy(raw, y * (width * 3 + 1) + 1);
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8); // 8-bit RGB
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', ihdr),
    pngChunk('IDAT', deflateSync(raw)),
    pngChunk('IEND', new Uint8Array(0)),
  ]);
}

export function wav(seconds: number, rand: Rand, sampleRate = 22050): Uint8Array {
  const samples = Math.round(seconds * sampleRate);
  const out = Buffer.alloc(44 + samples * 2);
  out.write('RIFF', 0, 'ascii');
  out.writeUInt32LE(36 + samples * 2, 4);
  out.write('WAVEfmt ', 8, 'ascii');
  out.writeUInt32LE(16, 16);
  out.writeUInt16LE(1, 20); // PCM
  out.writeUInt16LE(1, 22); // mono
  out.writeUInt32LE(sampleRate, 24);
  out.writeUInt32LE(sampleRate * 2, 28);
  out.writeUInt16LE(2, 32);
  out.writeUInt16LE(16, 34);
  out.write('data', 36, 'ascii');
  out.writeUInt32LE(samples * 2, 40);
  const notes = Array.from({ length: 8 }, () => 220 * 2 ** (Math.floor(rand() * 24) / 12));
  for (let i = 0; i < samples; i++) {
    const f = notes[Math.floor((i / samples) * notes.length)]!;
    const envelope = Math.min(1, (samples - i) / 2000, i / 200);
    out.writeInt16LE(Math.round(Math.sin((2 * Math.PI * f * i) / sampleRate) * 12000 * envelope), 44 + i * 2);
  }
  return out;
}

/** An uncompressed (RGB24 DIB) AVI: a RIFF container any video player reads. */
export function avi(size: number, seconds: number, fps: number, rand: Rand): Uint8Array {
  const frames = Math.max(1, Math.round(seconds * fps));
  const stride = Math.ceil((size * 3) / 4) * 4;
  const frameBytes = stride * size;
  const seed = Array.from({ length: 8 }, () => Math.floor(rand() * 256));
  const chunk = (id: string, data: Buffer) => {
    const head = Buffer.alloc(8);
    head.write(id, 0, 'ascii');
    head.writeUInt32LE(data.length, 4);
    return Buffer.concat([head, data, data.length % 2 ? Buffer.alloc(1) : Buffer.alloc(0)]);
  };
  const list = (type: string, ...parts: Buffer[]) => chunk('LIST', Buffer.concat([Buffer.from(type, 'ascii'), ...parts]));

  const avih = Buffer.alloc(56);
  avih.writeUInt32LE(Math.round(1_000_000 / fps), 0);
  avih.writeUInt32LE(frameBytes * fps, 4);
  avih.writeUInt32LE(0x10, 12); // AVIF_HASINDEX
  avih.writeUInt32LE(frames, 16);
  avih.writeUInt32LE(1, 24);
  avih.writeUInt32LE(frameBytes, 28);
  avih.writeUInt32LE(size, 32);
  avih.writeUInt32LE(size, 36);
  const strh = Buffer.alloc(56);
  strh.write('vids', 0, 'ascii');
  strh.write('DIB ', 4, 'ascii');
  strh.writeUInt32LE(1, 20); // scale
  strh.writeUInt32LE(fps, 24); // rate
  strh.writeUInt32LE(frames, 32);
  strh.writeUInt32LE(frameBytes, 36);
  strh.writeInt32LE(-1, 40);
  strh.writeInt16LE(size, 52);
  strh.writeInt16LE(size, 54);
  const strf = Buffer.alloc(40);
  strf.writeUInt32LE(40, 0);
  strf.writeInt32LE(size, 4);
  strf.writeInt32LE(size, 8);
  strf.writeUInt16LE(1, 12);
  strf.writeUInt16LE(24, 14);
  strf.writeUInt32LE(frameBytes, 20);

  const movieChunks: Buffer[] = [];
  const index = Buffer.alloc(16 * frames);
  let offset = 4;
  for (let f = 0; f < frames; f++) {
    const px = paint(size, size, seededRandom(Uint8Array.from(seed)), f);
    const frame = Buffer.alloc(frameBytes);
    for (let y = 0; y < size; y++) {
      for (let x = 0; x < size; x++) {
        const src = ((size - 1 - y) * size + x) * 3; // bottom-up rows, BGR
        frame[y * stride + x * 3] = px[src + 2]!;
        frame[y * stride + x * 3 + 1] = px[src + 1]!;
        frame[y * stride + x * 3 + 2] = px[src]!;
      }
    }
    const c = chunk('00db', frame);
    index.write('00db', f * 16, 'ascii');
    index.writeUInt32LE(0x10, f * 16 + 4);
    index.writeUInt32LE(offset, f * 16 + 8);
    index.writeUInt32LE(frameBytes, f * 16 + 12);
    offset += c.length;
    movieChunks.push(c);
  }
  const body = Buffer.concat([
    Buffer.from('AVI ', 'ascii'),
    list('hdrl', chunk('avih', avih), list('strl', chunk('strh', strh), chunk('strf', strf))),
    list('movi', ...movieChunks),
    chunk('idx1', index),
  ]);
  const head = Buffer.alloc(8);
  head.write('RIFF', 0, 'ascii');
  head.writeUInt32LE(body.length, 4);
  return Buffer.concat([head, body]);
}

/** A glTF 2.0 model (JSON with an embedded buffer): a seeded, lumpy sphere of `rings` rings. */
export function gltf(rings: number, rand: Rand): Uint8Array {
  const segments = rings * 2;
  const positions: number[] = [];
  const bumps = Array.from({ length: 6 }, () => 0.15 * rand());
  for (let r = 0; r <= rings; r++) {
    const theta = (r / rings) * Math.PI;
    for (let s = 0; s <= segments; s++) {
      const phi = (s / segments) * 2 * Math.PI;
      const radius = 1 + bumps[(r + s) % bumps.length]! * Math.sin(3 * phi);
      positions.push(radius * Math.sin(theta) * Math.cos(phi), radius * Math.cos(theta), radius * Math.sin(theta) * Math.sin(phi));
    }
  }
  const indices: number[] = [];
  for (let r = 0; r < rings; r++) {
    for (let s = 0; s < segments; s++) {
      const a = r * (segments + 1) + s;
      const b = a + segments + 1;
      indices.push(a, b, a + 1, b, b + 1, a + 1);
    }
  }
  const pos = Buffer.from(new Float32Array(positions).buffer);
  const idx = Buffer.from(new Uint16Array(indices).buffer);
  const pad = Buffer.alloc((4 - (idx.length % 4)) % 4);
  const buffer = Buffer.concat([pos, idx, pad]);
  const axis = (i: number) => positions.filter((_, j) => j % 3 === i);
  const doc = {
    asset: { version: '2.0', generator: 'mas local provider' },
    scene: 0,
    scenes: [{ nodes: [0] }],
    nodes: [{ mesh: 0 }],
    meshes: [{ primitives: [{ attributes: { POSITION: 0 }, indices: 1 }] }],
    buffers: [{ byteLength: buffer.length, uri: `data:application/octet-stream;base64,${buffer.toString('base64')}` }],
    bufferViews: [
      { buffer: 0, byteOffset: 0, byteLength: pos.length, target: 34962 },
      { buffer: 0, byteOffset: pos.length, byteLength: idx.length, target: 34963 },
    ],
    accessors: [
      { bufferView: 0, componentType: 5126, count: positions.length / 3, type: 'VEC3', min: [0, 1, 2].map((i) => Math.min(...axis(i))), max: [0, 1, 2].map((i) => Math.max(...axis(i))) },
      { bufferView: 1, componentType: 5123, count: indices.length, type: 'SCALAR' },
    ],
  };
  return Buffer.from(JSON.stringify(doc));
}
