// A second executor, in JavaScript on Node (node:vm, one fresh context per execution),
// speaking the codemode wire protocol on stdin/stdout. A test fixture that shows the
// conformance suite checks an implementation written apart from the built-in one, on
// V8. It is NOT a sandbox: node:vm contexts do not isolate a hostile program.
'use strict';
const vm = require('node:vm');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');
const acorn = require('acorn');

// The sandbox-side codec is the protocol's own (codemode_protocol::codec_source()):
// the part an alternative executor takes as it is. Everything else here is written apart.
const CODEC = fs.readFileSync(path.join(__dirname, 'codec.generated.js'), 'utf8');

const TEXTS = {
  completed: 'Execution has already completed.',
  toolNotFound: (tool) => `Tool "${tool}" not found`,
  payload: (size, limit) => `Tool call payload is ${size} bytes, over the limit of ${limit} bytes (provider, tool and arguments together). Send less per call.`,
  timeout: (ms) => `Execution timed out after ${ms} ms.`,
  cpuTime: (ms) => `Execution used its CPU time limit of ${ms} ms.`,
  callLimit: (n) => `Execution reached its limit of ${n} calls (tool calls and fetches together); the call over it was not sent.`,
  networkClosed: 'Network access is closed for this execution: fetch is refused. Reach data through the declared providers.',
  unprintable: 'The program threw a value that cannot be converted to a string.',
  reserved: (n) => `Provider name "${n}" is reserved. Give the provider a name the entry scope does not bind.`,
  identifier: (n) => `Provider name "${n}" must be ASCII letters, digits, underscore and dollar, and must not start with a digit.`,
  refused: (n) => `Provider name "${n}" is on the list this executor refuses: every ECMAScript reserved word, the names strict mode reserves, and async. Pick a name outside it.`,
  duplicate: (n) => `Provider name "${n}" is declared twice. Give each provider its own name.`,
};
const RESERVED = new Set(['console', '__dispatch', '__stringifyForDispatch', '__parseForDispatch', '__encodeBinary',
  '__decodeBinary', '__providerProxy', '__bytesToBase64', '__base64ToBytes', 'globalThis', 'Object', 'Array',
  'Reflect', 'Proxy', 'JSON', 'Error', 'SyntaxError', 'Symbol', 'ArrayBuffer', 'Uint8Array', 'Uint8ClampedArray',
  'Int8Array', 'Uint16Array', 'Int16Array', 'Uint32Array', 'Int32Array', 'Float32Array', 'Float64Array',
  'BigInt64Array', 'BigUint64Array']);
const REFUSED = new Set(('await break case catch class const continue debugger default delete do else enum export ' +
  'extends false finally for function if import in instanceof new null return super switch this throw true try ' +
  'typeof var void while with implements interface let package private protected public static yield arguments ' +
  'eval async').split(' '));

function checkNames(providers) {
  const seen = new Set();
  for (const { name } of providers) {
    if (RESERVED.has(name)) return TEXTS.reserved(name);
    if (!/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name)) return TEXTS.identifier(name);
    if (REFUSED.has(name)) return TEXTS.refused(name);
    if (seen.has(name)) return TEXTS.duplicate(name);
    seen.add(name);
  }
  return null;
}

function normalize(code) {
  let body = code.trim();
  const fence = /^```(js|javascript|ts|typescript)?[^\n]*\n([\s\S]*?)\n?```\s*$/i.exec(body);
  if (fence) body = fence[2].trim();
  if (body === '') return 'async () => {}';
  const program = acorn.parse(body, { ecmaVersion: 'latest', sourceType: 'module', allowReturnOutsideFunction: true });
  if (program.body.length === 1) {
    const [only] = program.body;
    if (only.type === 'ExpressionStatement' && /^(Arrow)?FunctionExpression$/.test(only.expression.type)) {
      return body.slice(only.expression.start, only.expression.end);
    }
    if (only.type === 'FunctionDeclaration') return body.slice(only.start, only.end);
  }
  const last = program.body[program.body.length - 1];
  if (last && last.type === 'ExpressionStatement') {
    return `async () => {\n${body.slice(0, last.start)}return (${body.slice(last.expression.start, last.expression.end)});${body.slice(last.end)}\n}`;
  }
  return `async () => {\n${body}\n}`;
}

function scopeSource(program, providers) {
  let source = 'function (__dispatch, __stringifyForDispatch, __parseForDispatch, __encodeBinary, __decodeBinary, __providerProxy) {\n"use strict";\n';
  for (const p of providers) {
    source += p.proxySource !== undefined ? `${p.proxySource}\n;\n` : `const ${p.name} = __providerProxy(${JSON.stringify(p.name)}, ${p.positionalArgs !== false});\n`;
  }
  for (const p of providers) if (p.prelude !== undefined) source += `{\n${p.prelude}\n;}\n`;
  return `(${source}return [(async () => await (\n${program}\n)())(), __stringifyForDispatch];\n})`;
}

function format(value) {
  if (typeof value === 'string') return value;
  if (value instanceof Error || Object.prototype.toString.call(value) === '[object Error]') return `${value.name}: ${value.message}`;
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) return String(value);
  if (typeof value === 'function') return String(value);
  try {
    const json = JSON.stringify(value);
    return json === undefined ? String(value) : json;
  } catch {
    return String(value);
  }
}

function thrownText(value) {
  if (value !== null && typeof value === 'object' && Object.prototype.toString.call(value) === '[object Error]') return String(value.message);
  try { return String(value); } catch { return TEXTS.unprintable; }
}

const send = (message) => process.stdout.write(JSON.stringify(message) + '\n');
// An error outcome with its kind: how the run ended, never read from the text.
const failed = (kind, error, logs) => ({ error, kind, logs });
const waiting = new Map(); // `${execution}:${call}` -> resolve
const live = new Map(); // execution -> { dispose }

function execute(execution, request) {
  const logs = [];
  const providers = request.providers ?? [];
  const refusal = checkNames(providers);
  if (refusal !== null) return send({ type: 'outcome', execution, outcome: failed('invalid', refusal, logs) });
  let program;
  try {
    program = normalize(request.code);
  } catch (failure) {
    return send({ type: 'outcome', execution, outcome: failed('syntax', `SyntaxError in code: ${failure.message}`, logs) });
  }
  let over = false;
  let nextCall = 1;
  // Calls that left, for maxCalls (version 5); the one over it ends the run here.
  let left = 0;
  const timers = new Set();
  const maxPayload = request.maxPayloadBytes ?? 8 << 20;
  // WebAssembly is absent unless a run asks for it (this peer never offers it).
  const context = vm.createContext({}, { codeGeneration: { wasm: false } });
  const inside = (source) => vm.runInContext(source, context);
  inside('delete globalThis.WebAssembly');
  const reject = inside('(message) => Promise.reject(new Error(message))');
  // Refusals by a bound: a run that ends rejected with one of these ends 'payload'.
  const bounded = new WeakSet();
  const refuse = inside('(message) => new Error(message)');
  context.__dispatch = (provider, tool, argsJson) => {
    if (over) return reject(TEXTS.completed);
    const size = Buffer.byteLength(String(provider)) + Buffer.byteLength(String(tool)) + Buffer.byteLength(String(argsJson));
    if (size > maxPayload) {
      const refusal = refuse(TEXTS.payload(size, maxPayload));
      bounded.add(refusal);
      return inside('Promise').reject(refusal);
    }
    if (!request.dispatch) return inside('Promise').resolve(JSON.stringify({ error: TEXTS.toolNotFound(tool) }));
    if (request.maxCalls !== undefined && left >= request.maxCalls) {
      settle(failed('callLimit', TEXTS.callLimit(request.maxCalls), logs.slice()));
      return new (inside('Promise'))(() => {});
    }
    left++;
    const call = nextCall++;
    return new (inside('Promise'))((resolve) => {
      waiting.set(`${execution}:${call}`, resolve);
      send({ type: 'call', execution, call, provider: String(provider), tool: String(tool), argsJson: String(argsJson) });
    });
  };
  context.__bytesToBase64 = (view) => Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString('base64');
  context.__base64ToBytes = inside('(decode) => (text) => { const b = decode(text); if (b === undefined) return undefined; const copy = new ArrayBuffer(b.length); new Uint8Array(copy).set(b); return copy; }')(
    (text) => (/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(text) ? Buffer.from(text, 'base64') : undefined));
  const log = (prefix) => (...args) => { if (!over) logs.push(prefix + args.map(format).join(' ')); };
  context.console = { log: log(''), info: log(''), debug: log(''), warn: log('[warn] '), error: log('[error] ') };
  const timer = (repeat) => (callback, ms, ...args) => {
    const handle = (repeat ? setInterval : setTimeout)(() => { if (!repeat) timers.delete(handle); callback(...args); }, ms);
    timers.add(handle);
    return handle;
  };
  context.setTimeout = timer(false);
  context.setInterval = timer(true);
  context.clearTimeout = context.clearInterval = (handle) => { clearTimeout(handle); timers.delete(handle); };
  context.queueMicrotask = queueMicrotask;
  context.fetch = inside(`async () => { throw new TypeError(${JSON.stringify(TEXTS.networkClosed)}) }`);
  const dispose = () => { over = true; for (const t of timers) clearTimeout(t); timers.clear(); live.delete(execution); };
  live.set(execution, { dispose });
  const timeoutMs = request.timeoutMs ?? 30000;
  let settled = false;
  const settle = (outcome) => {
    if (settled) return;
    settled = over = true;
    if (!request.retainHandles) dispose();
    send({ type: 'outcome', execution, outcome });
  };
  let run, stringify, scope;
  try {
    scope = inside(scopeSource(program, providers));
  } catch (failure) {
    return settle(failed('syntax', thrownText(failure), logs));
  }
  // The program's synchronous start runs under cpuTimeLimitMs (version 5) as node:vm's
  // timeout, wall time standing in for CPU time: this peer bounds nothing after an await.
  const cpuMs = request.cpuTimeLimitMs;
  try {
    const codec = inside(CODEC);
    context[START] = () => scope.apply(undefined, codec);
    [run, stringify] = vm.runInContext(`(() => { const start = globalThis[${JSON.stringify(START)}]; delete globalThis[${JSON.stringify(START)}]; return start(); })()`,
      context, cpuMs === undefined ? {} : { timeout: cpuMs });
  } catch (failure) {
    if (failure?.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') return settle(failed('cpuTime', TEXTS.cpuTime(cpuMs), logs));
    return settle(failed('thrown', thrownText(failure), logs));
  }
  let deadline;
  const timedOut = new Promise((resolve) => { deadline = setTimeout(() => resolve(TIMED_OUT), timeoutMs); });
  Promise.race([run, timedOut]).then(
    (value) => {
      clearTimeout(deadline);
      if (value === TIMED_OUT) return settle(failed('timeout', TEXTS.timeout(timeoutMs), logs));
      if (value === undefined) return settle({ logs });
      try { settle({ result: JSON.parse(stringify(value)), logs }); } catch (failure) { settle(failed('thrown', thrownText(failure), logs)); }
    },
    (failure) => { clearTimeout(deadline); settle(failed(bounded.has(failure) ? 'payload' : 'thrown', thrownText(failure), logs)); },
  );
}
const TIMED_OUT = Symbol('timed out');
const START = '__codemodePeerStart';

// A program's floating rejection (a late call meeting the completion text, say) is the
// program's business; it must not end this process.
process.on('unhandledRejection', () => {});

const lines = readline.createInterface({ input: process.stdin });
let greeted = false;
lines.on('line', (line) => {
  let message;
  try { message = JSON.parse(line); } catch (failure) {
    send({ type: 'error', kind: 'malformedFrame', message: `a line is not JSON: ${failure.message}` });
    process.exit(1);
  }
  if (!greeted) {
    // Versions 1 to 5, of which it speaks what transcripts need: version 5's limits.
    if (message.type !== 'hello' || message.protocol !== 'codemode' || !(message.version >= 1)) {
      send({ type: 'error', kind: 'hello', message: 'the first message must be a hello for codemode version 1 or newer' });
      process.exit(1);
    }
    greeted = true;
    return send({ type: 'hello', protocol: 'codemode', version: Math.min(message.version, 5) });
  }
  if (message.type === 'execute') execute(message.execution, message.request);
  else if (message.type === 'answer') {
    const key = `${message.execution}:${message.call}`;
    const resolve = waiting.get(key);
    if (resolve) { waiting.delete(key); resolve(message.answer); }
  } else if (message.type === 'cancel' || message.type === 'release') live.get(message.execution)?.dispose();
});
lines.on('close', () => { for (const { dispose } of [...live.values()]) dispose(); process.exit(0); });
