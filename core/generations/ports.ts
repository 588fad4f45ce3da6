/**
 * What media jobs need from outside core. Implemented in adapters/ (providers, storage, the
 * URL guard) and config/ (the Temporal workflow starter).
 */
export interface MediaJobSpec {
  jobId: string;
  /** The model name the upstream knows. */
  model: string;
  type: 'image' | 'video' | 'audio' | '3d';
  prompt: string;
  settings: Record<string, unknown>;
  inputs: Record<string, string | string[]>;
}

export type MediaPollResult =
  | { status: 'running' }
  | { status: 'succeeded' }
  | { status: 'failed'; message: string; code?: string };

export interface MediaResult {
  bytes: Uint8Array;
  mimeType: string;
  /** File extension without the dot: png, wav, avi, gltf. */
  extension: string;
}

/** How a provider reads an input value: a public URL (fetched through the URL guard) or an uploaded file id. */
export interface InputReader {
  read(value: string): Promise<Uint8Array>;
  /** A URL an upstream can fetch the input from (a signed link for uploaded files). */
  url(value: string): string;
}

export interface MediaProvider {
  /** Starts the job upstream; returns the upstream's handle (opaque, JSON-serialisable). Idempotent on jobId. */
  submit(spec: MediaJobSpec, inputs: InputReader): Promise<string>;
  poll(handle: string): Promise<MediaPollResult>;
  fetchResult(handle: string): Promise<MediaResult>;
  /** Asks the upstream to stop the job, where it supports that. */
  cancel?(handle: string): Promise<void>;
}

export interface MediaProviderRegistry {
  get(name: string): MediaProvider | undefined;
}

export interface ResultStorage {
  put(key: string, bytes: Uint8Array): Promise<void>;
  /** Moves a local file (an upload spooled to disk) into storage. */
  putFile(key: string, sourcePath: string): Promise<void>;
  /** The bytes, or undefined once deleted. */
  get(key: string): Promise<Uint8Array | undefined>;
  delete(key: string): Promise<void>;
}

/** Refuses URLs that are not http(s) or that resolve to a loopback, private, link-local or metadata address. */
export interface UrlGuard {
  check(url: string): Promise<void>;
  /** GETs a URL's bytes over a connection that applies the same check. */
  fetch(url: string, init?: { maxBytes?: number; timeoutMs?: number }): Promise<Uint8Array>;
}

export interface GenerationStarter {
  /** Starts the job's workflow (its id is the job id); starting it twice is harmless. */
  start(jobId: string): Promise<void>;
  /** Tells a running job's workflow to stop (it then asks the provider to stop too). */
  cancel(jobId: string): Promise<void>;
}
