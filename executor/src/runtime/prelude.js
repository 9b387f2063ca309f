// The runtime's JavaScript side, the same on every engine: the host functions the codec
// reads, console, timers, the web globals, and the helpers the runtime calls to settle a
// run. prelude.rs wraps this body in a function of `ops` that also returns `configure`, which
// sets maxLogBytes, maxResultBytes, hasOutbound and maxPayloadBytes once the execution is
// known (the body runs on an idle thread ahead of it). It runs before any provider or program source and
// captures every intrinsic it uses, so a program that rewrites globals changes nothing here.
'use strict';
const global = globalThis;
const apply = Reflect.apply;
const defineProperty = Object.defineProperty;
const PromiseConstructor = Promise;
const promiseResolve = Promise.resolve;
const promiseReject = Promise.reject;
const then = Promise.prototype.then;
const ErrorConstructor = Error;
const TypeErrorConstructor = TypeError;
const RangeErrorConstructor = RangeError;
const StringConstructor = String;
const stringSlice = String.prototype.slice;
const isError = Error.isError;
const jsonStringify = JSON.stringify;
const jsonParse = JSON.parse;
const mathTrunc = Math.trunc;
const WeakMapConstructor = WeakMap;
const weakMapGet = WeakMap.prototype.get;
const weakMapSet = WeakMap.prototype.set;
const isView = ArrayBuffer.isView;
const isArray = Array.isArray;
const objectEntries = Object.entries;
const Uint8ArrayConstructor = Uint8Array;
const ArrayBufferConstructor = ArrayBuffer;
const MapConstructor = Map;
const SetConstructor = Set;
const DateConstructor = Date;
const RegExpConstructor = RegExp;

const opCall = ops.call;
const opWebGlobals = ops.webGlobals;
const opRefuseLarge = ops.refuseLarge;
const opFetch = ops.fetch;
const opTimer = ops.timer;
const opClearTimer = ops.clearTimer;
const opLog = ops.log;
const opUtf8Encode = ops.utf8Encode;
const opUtf8Decode = ops.utf8Decode;
const opLatin1Decode = ops.latin1Decode;
const opBytesToBase64 = ops.bytesToBase64;
const opBase64ToBytes = ops.base64ToBytes;

const resolved = (value) => apply(promiseResolve, PromiseConstructor, [value]);
const rejected = (error) => apply(promiseReject, PromiseConstructor, [error]);

// Errors the runtime made for a call a bound refused, with their texts; a run ending with
// one, its text as made, is a payload outcome.
const refusals = new WeakMapConstructor();
const refuse = (text) => {
  const error = new ErrorConstructor(text);
  apply(weakMapSet, refusals, [error, text]);
  return rejected(error);
};

// Calls awaiting the host, by the id the runtime gave them: [resolve, reject].
const pending = { __proto__: null };
const later = (id) => new PromiseConstructor((resolve, reject) => { pending[id] = [resolve, reject]; });

// An op answers a call with the answer itself (ready at once), an id (answered later), or
// [text] (refused by a bound). Asked with a fourth argument `true` (the codec does), the
// answer may come as [envelope], parsed natively (docs/protocol.md); it is read from
// `arguments` so that `__dispatch.length` stays 3.
const dispatch = function __dispatch(provider, tool, argsJson) {
  const p = StringConstructor(provider);
  const t = StringConstructor(tool);
  const a = StringConstructor(argsJson);
  // Past the bound even in UTF-16 units, the call is refused before a byte is copied out.
  const units = p.length + t.length + a.length;
  // The heads of its names and arguments (one unit past the preview, so it reads as cut) are for a watcher.
  if (units > maxPayloadBytes) return refuse(opRefuseLarge(units, p.slice(0, 1025), t.slice(0, 1025), a.slice(0, 257)));
  const answer = opCall(p, t, a, arguments.length > 3 && arguments[3] === true);
  if (typeof answer === 'string') return resolved(answer);
  if (typeof answer === 'number') return later(answer);
  if (typeof answer[0] === 'string') return refuse(answer[0]);
  return resolved(answer);
};

// A fetch answers [status, headersJson, ArrayBuffer], false-and-text for a failure, an id or [text].
const outbound = (method, url, headers, body) => {
  const answer = opFetch(method, url, headers, body);
  if (typeof answer === 'number') return later(answer);
  if (answer.length === 1) return refuse(answer[0]);
  if (answer[0] === false) return rejected(new ErrorConstructor(answer[1]));
  return resolved(answer);
};

global.__dispatch = dispatch;
global.__bytesToBase64 = function __bytesToBase64(view) { return opBytesToBase64(view); };
global.__base64ToBytes = function __base64ToBytes(text) { return opBase64ToBytes(StringConstructor(text)); };

// The outcome text of a thrown value: an Error's message, String(value) otherwise.
const describe = (thrown) => {
  if (thrown !== null && typeof thrown === 'object' && isError(thrown)) {
    try {
      return StringConstructor(thrown.message);
    } catch {
      return '';
    }
  }
  try {
    return StringConstructor(thrown);
  } catch {
    return texts.unprintable;
  }
};
// A thrown Error's stack as the engine wrote it, for the runtime to find the program's
// frames in: its tail only (frames follow the message, which may be long); undefined for
// anything else.
const stackOf = (thrown) => {
  if (thrown === null || typeof thrown !== 'object' || !isError(thrown)) return undefined;
  try {
    const stack = thrown.stack;
    if (typeof stack !== 'string') return undefined;
    return stack.length > 8192 ? apply(stringSlice, stack, [stack.length - 8192]) : stack;
  } catch {
    return undefined;
  }
};
// The text a refusal was made with; undefined for anything else.
const refusalText = (thrown) => apply(weakMapGet, refusals, [thrown]);

// One console argument by the outcome rules.
const field = (object, name) => {
  try {
    return StringConstructor(object[name]);
  } catch {
    return '';
  }
};
const format = (value) => {
  if (typeof value === 'string') return value;
  if (value !== null && typeof value === 'object') {
    if (isError(value)) return field(value, 'name') + ': ' + field(value, 'message');
    try {
      const json = jsonStringify(value);
      if (typeof json === 'string') return json;
    } catch {}
  }
  try {
    return StringConstructor(value);
  } catch {
    return '';
  }
};
let logsStopped = false;
// level: what the runtime reports to a watcher (ConsoleLevel::from_number, the same numbers).
const log = (level, prefix, args) => {
  if (logsStopped) return;
  let line = prefix;
  for (let i = 0; i < args.length; i++) {
    if (i > 0) line += ' ';
    line += format(args[i]);
  }
  // A line past the whole bound never crosses to the host: only its length does.
  const kept = line.length > maxLogBytes ? opLog(undefined, line.length, level) : opLog(line, undefined, level);
  if (!kept) logsStopped = true;
};
global.console = {
  log(...args) { log(0, '', args); },
  info(...args) { log(1, '', args); },
  debug(...args) { log(2, '', args); },
  warn(...args) { log(3, '[warn] ', args); },
  error(...args) { log(4, '[error] ', args); },
};

// Timers: the runtime keeps when each is due; the callbacks and their arguments stay here.
const timers = { __proto__: null };
const delayOf = (delay) => {
  const ms = delay === undefined ? 0 : +delay;
  return ms > 0 && ms < Infinity ? (ms < 2147483647 ? ms : 2147483647) : 0;
};
const timer = (name, repeat) => function (callback, delay, ...args) {
  if (typeof callback !== 'function') throw new TypeErrorConstructor(`${name}: the callback must be a function`);
  const id = opTimer(delayOf(delay), repeat);
  timers[id] = [callback, args, repeat];
  return id;
};
const clear = function (id) {
  if (id === undefined) return;
  const n = mathTrunc(+id);
  if (!(n >= 1)) return;
  if (timers[n] !== undefined) delete timers[n];
  opClearTimer(n);
};
const define = (name, value) =>
  defineProperty(global, name, { value, writable: true, configurable: true, enumerable: false });
global.setTimeout = timer('setTimeout', false);
global.setInterval = timer('setInterval', true);
global.clearTimeout = clear;
global.clearInterval = clear;

// The web globals: most programs use none, so they are built on first touch of any of them.
// The web globals (web.js) are a built-in the runtime hands over on first touch only:
// loading them for every run would cost the programs that use none of them.
const webGlobals = () => opWebGlobals()({ StringConstructor, ErrorConstructor, TypeErrorConstructor, RangeErrorConstructor, Uint8ArrayConstructor, ArrayBufferConstructor, isView, isArray, objectEntries, MapConstructor, SetConstructor, DateConstructor, RegExpConstructor, jsonStringify, jsonParse, apply, then, define, resolved, outbound, opUtf8Encode, opUtf8Decode, opLatin1Decode, opBytesToBase64, opBase64ToBytes, hasOutbound, texts });
let webGlobalsInstalled = false;
const installWebGlobals = () => {
  if (webGlobalsInstalled) return;
  webGlobalsInstalled = true;
  webGlobals();
};
for (const name of texts.webGlobals) {
  defineProperty(global, name, {
    get() { installWebGlobals(); return global[name]; },
    set(value) { installWebGlobals(); global[name] = value; },
    configurable: true,
  });
}

// What the runtime calls. `receive` delivers answers and fires timers; `start` runs the
// entry scope; `finish` writes a result; `describe` and `refusalText` read a thrown value.
let stringify;
// `what` says which (the same numbers in runtime/mod.rs): 1 a tool's answer, 2 a fetch's
// response, 3 a fetch's failure, 4 a timer due.
const receive = (what, id, a, b, c) => {
  if (what === 4) {
    const entry = timers[id];
    if (entry === undefined) return;
    if (!entry[2]) delete timers[id];
    apply(entry[0], undefined, entry[1]);
    return;
  }
  const call = pending[id];
  if (call === undefined) return;
  delete pending[id];
  if (what === 1) call[0](a);
  else if (what === 2) call[0]([a, b, c]);
  else call[1](new ErrorConstructor(a));
};
const start = (scope, codec) => {
  const pair = apply(scope, undefined, codec);
  stringify = pair[1];
  return pair[0];
};
// undefined for undefined, false when the result is past the bound, else its JSON text.
const finish = (value) => {
  if (value === undefined) return undefined;
  const json = stringify(value);
  if (typeof json !== 'string') return undefined;
  return json.length > maxResultBytes ? false : json;
};
// A thrown value's text as the runtime copies it out: past the result bound, only its
// head crosses, with the whole text's length.
const describeBounded = (thrown) => {
  const text = describe(thrown);
  return text.length > maxResultBytes ? [text.slice(0, maxResultBytes), text.length] : text;
};
return [receive, start, finish, describeBounded, refusalText, stackOf];
