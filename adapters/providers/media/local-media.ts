import { createHash } from 'node:crypto';
import type { MediaJobSpec, MediaPollResult, MediaProvider, MediaResult } from '../../../core/ports.ts';
import { avi, gltf, png, seededRandom, wav } from './formats.ts';

/**
 * The offline, deterministic media provider behind the demo models: a PNG, a WAV, an AVI or a
 * glTF file made from the prompt and settings (`size`, `duration`, `resolution`, `detail`,
 * `seed` change the file). Its handle carries the whole job, so any worker can poll it after
 * a restart. Test knobs, as settings of the demo models (docs/generations.md):
 *   delay_ms  the job runs this long before it succeeds
 *   fail      the job fails (after delay_ms)
 * Inputs (URLs, fetched through the URL guard so they are checked again at connect time, or
 * uploaded files) are read at submit and their bytes feed the seed.
 */
interface Handle {
  spec: MediaJobSpec;
  submittedAt: number;
  inputDigest: string;
}

export function localMediaProvider(opts: { now?: () => number } = {}): MediaProvider {
  const now = opts.now ?? Date.now;
  return {
    async submit(spec, inputs) {
      const digest = createHash('sha256');
      for (const value of Object.values(spec.inputs).flat()) digest.update(await inputs.read(value));
      return JSON.stringify({ spec, submittedAt: now(), inputDigest: digest.digest('hex') } satisfies Handle);
    },
    async poll(raw): Promise<MediaPollResult> {
      const { spec, submittedAt } = JSON.parse(raw) as Handle;
      const delay = Number(spec.settings.delay_ms ?? 0);
      if (now() - submittedAt < delay) return { status: 'running' };
      if (spec.settings.fail === true) return { status: 'failed', message: 'The local provider was asked to fail (fail: true).', code: 'provider_failed' };
      return { status: 'succeeded' };
    },
    async fetchResult(raw): Promise<MediaResult> {
      const { spec, inputDigest } = JSON.parse(raw) as Handle;
      const { delay_ms: _d, fail: _f, ...shaping } = spec.settings;
      const seed = createHash('sha256').update(JSON.stringify([spec.prompt, shaping, inputDigest])).digest();
      const rand = seededRandom(seed);
      const n = (key: string, fallback: number) => Number(spec.settings[key] ?? fallback);
      switch (spec.type) {
        case 'image':
          return { bytes: png(n('size', 256), n('size', 256), rand), mimeType: 'image/png', extension: 'png' };
        case 'audio':
          return { bytes: wav(n('duration', 2), rand), mimeType: 'audio/wav', extension: 'wav' };
        case 'video':
          return { bytes: avi(n('resolution', 64), n('duration', 1), 8, rand), mimeType: 'video/x-msvideo', extension: 'avi' };
        case '3d':
          return { bytes: gltf(spec.settings.detail === 'high' ? 32 : 12, rand), mimeType: 'model/gltf+json', extension: 'gltf' };
      }
    },
  };
}
