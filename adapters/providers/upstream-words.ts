/**
 * What a chat upstream's failure says, in the same words whichever adapter met it: core puts
 * them after "The provider of '<model>' failed: " in the customer's error (core/chat/chat.ts),
 * so no vendor is named and a route on Anthropic reads as one on any OpenAI-compatible upstream.
 * What the upstream itself said goes to the operator's log only.
 */
export const UPSTREAM_SAYS = {
  contentPolicy: 'it refused the request under its content policy',
  invalid: 'it refused the request as invalid',
  rateLimited: 'it is rate limiting this service',
  keyRefused: "it refused this service's key",
  unknownModel: 'it does not know the model',
  overloaded: 'it is overloaded',
  status: (status: number) => `it answered with an error (${status})`,
  failedWhileAnswering: 'it failed while answering',
  unreachable: 'it could not be reached',
  unreadable: 'it sent an unreadable answer',
  closedEarly: 'it closed the answer before it finished',
  timeout: 'it did not answer in time',
} as const;
