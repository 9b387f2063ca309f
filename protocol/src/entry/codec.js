// The sandbox side of the protocol: the codec, the envelope reader and the provider proxy.
// entry.rs wraps this body in `((texts, kinds) => { ... })(...)`; it runs before any
// program or provider source, captures every intrinsic it uses, and returns the
// entry scope's bindings. Keep it engine-neutral: it runs on QuickJS and on V8.
const host = globalThis;
const dispatch = host.__dispatch;
const bytesToBase64 = host.__bytesToBase64;
const base64ToBytes = host.__base64ToBytes;
const apply = Reflect.apply;
const reflectGet = Reflect.get;
const ProxyConstructor = Proxy;
const ErrorConstructor = Error;
const SyntaxErrorPrototype = SyntaxError.prototype;
const JSONObject = JSON;
const jsonParse = JSON.parse;
const jsonStringify = JSON.stringify;
const isArray = Array.isArray;
const objectKeys = Object.keys;
const getPrototypeOf = Object.getPrototypeOf;
const getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
const defineProperty = Object.defineProperty;
const hasOwnProperty = Object.prototype.hasOwnProperty;
const objectToString = Object.prototype.toString;
const isView = ArrayBuffer.isView;
const arrayBufferByteLength = getOwnPropertyDescriptor(ArrayBuffer.prototype, 'byteLength').get;
const TypedArrayPrototype = getPrototypeOf(Uint8Array.prototype);
const typedArrayKind = getOwnPropertyDescriptor(TypedArrayPrototype, Symbol.toStringTag).get;
const typedArrayBuffer = getOwnPropertyDescriptor(TypedArrayPrototype, 'buffer').get;
const typedArrayByteOffset = getOwnPropertyDescriptor(TypedArrayPrototype, 'byteOffset').get;
const typedArrayByteLength = getOwnPropertyDescriptor(TypedArrayPrototype, 'byteLength').get;
const Uint8ArrayConstructor = Uint8Array;
const TAG = texts.tag;
const kindsByName = { __proto__: null };
for (let i = 0; i < kinds.length; i++) kindsByName[kinds[i][0]] = kinds[i];

const hasOwn = (object, key) => apply(hasOwnProperty, object, [key]);
const fill = (pieces, values) => {
  let text = '';
  for (let i = 0; i < pieces.length; i++) {
    text += typeof pieces[i] === 'number' ? values[pieces[i]] : pieces[i];
  }
  return text;
};
// The Error a tool call's failure is thrown as, made when the program made the call: its
// stack then holds the program's frame at the call (the answer is read in a later job,
// with none of the program's frames on the stack). Set while an answer is read.
let callSite;
const fail = (message) => {
  const site = callSite;
  if (site === undefined) return new ErrorConstructor(message);
  callSite = undefined;
  defineProperty(site, 'message', { value: message, writable: true, enumerable: false, configurable: true });
  return site;
};

const isArrayBuffer = (value) => {
  if (apply(objectToString, value, []) !== '[object ArrayBuffer]') return false;
  try {
    apply(arrayBufferByteLength, value, []);
    return true;
  } catch {
    return false;
  }
};

// The visible bytes of an ArrayBuffer or typed array as [kind, base64], else undefined.
const binaryOf = (value) => {
  if (isView(value)) {
    const kind = apply(typedArrayKind, value, []);
    if (kind === undefined) return undefined;
    const visible = new Uint8ArrayConstructor(
      apply(typedArrayBuffer, value, []),
      apply(typedArrayByteOffset, value, []),
      apply(typedArrayByteLength, value, []),
    );
    return [kind, bytesToBase64(visible)];
  }
  if (isArrayBuffer(value)) return ['ArrayBuffer', bytesToBase64(new Uint8ArrayConstructor(value))];
  return undefined;
};

// The JSON.stringify replacer: ArrayBuffer and typed arrays become the tag, each
// carrying only its visible bytes. It sees a value after toJSON, so a Node Buffer
// arrives here already turned into {type, data} and is not tagged.
const encodeBinary = function (key, value) {
  if (value === null || typeof value !== 'object') return value;
  const binary = binaryOf(value);
  return binary === undefined ? value : { [TAG]: binary[0], data: binary[1] };
};

// Taken from literals, so the codec reads no global beyond the reserved names.
const stringIndexOf = ''.indexOf;
const stringSlice = ''.slice;
const arrayPush = [].push;
const arrayJoin = [].join;
const TAG_KEY = '{"' + TAG + '":"';
const DATA_KEY = '","data":';

// JSON.stringify with the codec's replacer, but the base64 of each binary value is
// spliced into the text afterwards instead of going through JSON.stringify's quoting,
// which engines do a character at a time (for 1 MiB, most of the cost). The text is the
// same: each tag is written with its index as `data`, and every `{"<tag>":"` in the text
// is one of ours, in order, because a program's own object holding the tag key takes
// the plain path.
const stringifyForDispatch = (value) => {
  const chunks = [];
  let plain = false;
  const replacer = function (key, item) {
    if (item === null || typeof item !== 'object') return item;
    const binary = binaryOf(item);
    if (binary !== undefined) {
      apply(arrayPush, chunks, [binary[1]]);
      return { [TAG]: binary[0], data: chunks.length - 1 };
    }
    if (hasOwn(item, TAG)) plain = true;
    return item;
  };
  const text = apply(jsonStringify, JSONObject, [value, replacer]);
  if (text === undefined) return 'null';
  if (chunks.length === 0) return text;
  if (plain) return apply(jsonStringify, JSONObject, [value, encodeBinary]);
  const parts = [];
  let at = 0;
  for (let i = 0; i < chunks.length; i++) {
    const tag = apply(stringIndexOf, text, [TAG_KEY, at]);
    const data = apply(stringIndexOf, text, [DATA_KEY, tag + TAG_KEY.length]) + DATA_KEY.length;
    apply(arrayPush, parts, [apply(stringSlice, text, [at, data]), '"', chunks[i], '"']);
    at = apply(stringIndexOf, text, ['}', data]);
  }
  apply(arrayPush, parts, [apply(stringSlice, text, [at])]);
  return apply(arrayJoin, parts, ['']);
};

// While readAnswer revives an answer whose binary data it took out of the text: the
// decoded buffers, addressed by the `=<index>` that stands in the text for each one.
let spliced;

const rebuildBinary = (tag) => {
  const kind = tag[TAG];
  const data = tag.data;
  if (objectKeys(tag).length !== 2 || typeof kind !== 'string' || typeof data !== 'string' || !hasOwn(tag, 'data')) {
    throw fail(texts.shape);
  }
  const entry = kindsByName[kind];
  if (entry === undefined) throw fail(fill(texts.unknownKind, [kind]));
  const buffer = spliced !== undefined && data[0] === '=' ? spliced[+apply(stringSlice, data, [1])] : base64ToBytes(data);
  if (buffer === undefined) throw fail(fill(texts.badBase64, [kind]));
  const length = apply(arrayBufferByteLength, buffer, []);
  if (length % entry[2] !== 0) throw fail(fill(texts.badLength, [kind, length, entry[2]]));
  return entry[1] === ArrayBuffer ? buffer : new entry[1](buffer);
};

// Rebuild every tag inside a parsed JSON value, in place.
const decodeBinary = (value) => {
  if (value === null || typeof value !== 'object') return value;
  if (isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item = value[i];
      const rebuilt = decodeBinary(item);
      if (rebuilt !== item) value[i] = rebuilt;
    }
    return value;
  }
  if (hasOwn(value, TAG)) return rebuildBinary(value);
  const keys = objectKeys(value);
  for (let i = 0; i < keys.length; i++) {
    const item = value[keys[i]];
    const rebuilt = decodeBinary(item);
    if (rebuilt !== item) value[keys[i]] = rebuilt;
  }
  return value;
};

const parseForDispatch = (text) => decodeBinary(apply(jsonParse, JSONObject, [text]));

const DATA_OPEN = '","data":"';
const SPLICE_ANSWERS_FROM = 1 << 16;

// Take each compact tag's base64 out of a large answer and decode it natively, leaving
// `=<index>` in its place, so the engine's JSON.parse never reads the base64 a
// character at a time. The parse is the same: a match is a real tag (its quotes are
// unescaped), valid base64 holds nothing JSON would unescape, and no `"=` string was in
// the answer's other text, so every `=<index>` is ours. Anything unusual takes the
// plain path.
const spliceAnswer = (answer) => {
  if (answer.length < SPLICE_ANSWERS_FROM) return undefined;
  // Checked piece by piece on what stays in the text (never on the base64 taken out,
  // which holds no quote): a scan of the whole answer would cost what splicing saves.
  const kept = (piece) => apply(stringIndexOf, piece, ['"=']) === -1;
  const parts = [];
  const buffers = [];
  let at = 0;
  let search = 0;
  for (;;) {
    const tag = apply(stringIndexOf, answer, [TAG_KEY, search]);
    if (tag === -1) break;
    const kindEnd = apply(stringIndexOf, answer, ['"', tag + TAG_KEY.length]);
    if (kindEnd === -1) break;
    search = kindEnd + 1;
    if (apply(stringSlice, answer, [kindEnd, kindEnd + DATA_OPEN.length]) !== DATA_OPEN) continue;
    const start = kindEnd + DATA_OPEN.length;
    const end = apply(stringIndexOf, answer, ['"', start]);
    if (end === -1 || apply(stringSlice, answer, [end, end + 2]) !== '"}') continue;
    const before = apply(stringSlice, answer, [at, start]);
    const buffer = kept(before) ? base64ToBytes(apply(stringSlice, answer, [start, end])) : undefined;
    if (buffer === undefined) return undefined;
    apply(arrayPush, parts, [before, '=' + buffers.length]);
    apply(arrayPush, buffers, [buffer]);
    at = end;
    search = end;
  }
  const rest = apply(stringSlice, answer, [at]);
  if (buffers.length === 0 || !kept(rest)) return undefined;
  apply(arrayPush, parts, [rest]);
  return [apply(arrayJoin, parts, ['']), buffers];
};

const parseAnswer = (text) => {
  try {
    return apply(jsonParse, JSONObject, [text]);
  } catch (failure) {
    if (failure !== null && typeof failure === 'object' && getPrototypeOf(failure) === SyntaxErrorPrototype) {
      throw fail(texts.outside);
    }
    throw failure;
  }
};

// Read an answer as envelope.rs's read_answer does. A host asked for it (the fourth
// argument of dispatch) may hand the envelope already parsed, as [envelope], when the
// answer's text can hold no binary tag: there is then nothing to splice or decode.
const readAnswer = (answer) => {
  const parsed = isArray(answer) && answer.length === 1;
  if (!parsed && typeof answer !== 'string') throw fail(texts.outside);
  const taken = parsed ? undefined : spliceAnswer(answer);
  let envelope = parsed ? answer[0] : parseAnswer(taken === undefined ? answer : taken[0]);
  if (envelope === null || typeof envelope !== 'object' || isArray(envelope)) {
    throw fail(texts.outside);
  }
  if (hasOwn(envelope, 'error') && envelope.error !== null) {
    // An error is written back as JSON text: read it from the answer as it came.
    if (taken !== undefined) envelope = parseAnswer(answer);
    const error = envelope.error;
    throw fail(typeof error === 'string' ? error : apply(jsonStringify, JSONObject, [error]));
  }
  if (!hasOwn(envelope, 'result')) return undefined;
  if (parsed) return envelope.result;
  spliced = taken === undefined ? undefined : taken[1];
  try {
    return decodeBinary(envelope.result);
  } finally {
    spliced = undefined;
  }
};

const tool = (provider, name, positional) => async (...args) => {
  const payload = positional ? args : args.length === 0 || args[0] === undefined ? {} : args[0];
  const site = new ErrorConstructor();
  const answer = await dispatch(provider, name, stringifyForDispatch(payload), true);
  callSite = site;
  try {
    return readAnswer(answer);
  } finally {
    callSite = undefined;
  }
};

// A Proxy over an empty object: a property written on it wins; symbols and `then`
// read undefined, so awaiting the provider yields the proxy; every other read is a tool.
const providerProxy = (provider, positional) =>
  new ProxyConstructor({}, {
    get: (target, key, receiver) => {
      if (hasOwn(target, key)) return reflectGet(target, key, receiver);
      if (typeof key === 'symbol' || key === 'then') return undefined;
      return tool(provider, key, positional);
    },
  });

return [dispatch, stringifyForDispatch, parseForDispatch, encodeBinary, decodeBinary, providerProxy];
