// @ts-check
import { PluginKind, declareValuePlugin } from '@stryker-mutator/api/plugin';

/**
 * Mutants Stryker need not make in the money and limits modules (stryker.config.js,
 * `ignorers`): the words of messages, which no rule depends on. Ignored mutants are listed in
 * the report as such and count neither way in the score.
 *
 * - the message argument of an error: `new CoreError(code, message, …)`, `invalid(param,
 *   message)`, `notFound(reason, message)`, `new Error(message)`, `new RangeError(message)`,
 *   `new InvalidAmountError(message)`; the error's code, reason and param are still mutated;
 * - the text of a job error, the value of a `message:` property (`{ message: '…', code }`): the
 *   code is the rule, the words are for people;
 * - a log line: `….logger.<level>(…)` and `logger.<level>(…)` calls, the operator's warning hook
 *   of the chat (`deps.warn?.(…)`, core/chat/chat.ts), and the statement made of one.
 */

/** Which argument of which callee is a message. */
const MESSAGE_ARGUMENT = new Map([
  ['CoreError', 1],
  ['invalid', 1],
  ['notFound', 1],
  ['Error', 0],
  ['RangeError', 0],
  ['InvalidAmountError', 0],
]);
const LOG_LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error', 'fatal']);

/** @param {any} callee */
function calleeName(callee) {
  if (callee?.type === 'Identifier') return callee.name;
  return undefined;
}

/** @param {any} callee */
function isLogger(callee) {
  if (callee?.type !== 'MemberExpression' || callee.property?.type !== 'Identifier' || !LOG_LEVELS.has(callee.property.name)) return false;
  const object = callee.object;
  if (object?.type === 'Identifier') return object.name === 'logger' || (object.name === 'deps' && callee.property.name === 'warn');
  return object?.type === 'MemberExpression' && object.property?.type === 'Identifier' && object.property.name === 'logger';
}

/** @param {any} call */
function isLogCall(call) {
  return (call?.type === 'CallExpression' || call?.type === 'OptionalCallExpression') && isLogger(call.callee);
}

export const strykerPlugins = [
  declareValuePlugin(PluginKind.Ignore, 'MessageText', {
    /** @param {any} path */
    shouldIgnore(path) {
      const parent = path.parentPath;
      if (path.listKey === 'arguments' && (parent?.isNewExpression() || parent?.isCallExpression())) {
        const name = calleeName(parent.node.callee);
        if (name !== undefined && MESSAGE_ARGUMENT.get(name) === path.key) return 'The text of an error message: no rule depends on its words.';
      }
      if (
        path.parentPath?.isObjectProperty() &&
        path.key === 'value' &&
        (path.isStringLiteral() || path.isTemplateLiteral()) &&
        path.parent.key?.type === 'Identifier' &&
        path.parent.key.name === 'message'
      ) {
        return 'The text of an error message: no rule depends on its words.';
      }
      // A block made only of log lines (`if (…) { logger.warn(…); }`): emptying it drops only the line.
      if (path.isBlockStatement() && path.node.body.length > 0 && path.node.body.every((/** @type {any} */ s) => s.type === 'ExpressionStatement' && isLogCall(s.expression))) {
        return 'A log line: what is logged is no rule of money or limits.';
      }
      const call = path.isExpressionStatement() ? path.node.expression : path.node;
      if (isLogCall(call)) return 'A log line: what is logged is no rule of money or limits.';
      return undefined;
    },
  }),
];
