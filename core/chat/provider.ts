// The text-model port moved to core/ports.ts; this re-export goes once core/chat imports it there.
export { ProviderError, type ChatProvider, type ProviderChatRequest, type ProviderEvent, type ProviderRegistry } from '../ports.ts';
