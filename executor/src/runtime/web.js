// The sandbox's web globals (queueMicrotask, TextEncoder/TextDecoder, atob/btoa,
// structuredClone, Headers, Response, fetch), built on the prelude's captured intrinsics
// and ops. The runtime hands it to the prelude on the first touch of any of these names
// (compiled once per process where the engine can): most programs use none, and loading
// it for each run would cost them all.
(env) => {
  'use strict';
  const { StringConstructor, ErrorConstructor, TypeErrorConstructor, RangeErrorConstructor, Uint8ArrayConstructor, ArrayBufferConstructor, isView, isArray, objectEntries, MapConstructor, SetConstructor, DateConstructor, RegExpConstructor, jsonStringify, jsonParse, apply, then, define, resolved, outbound, opUtf8Encode, opUtf8Decode, opLatin1Decode, opBytesToBase64, opBase64ToBytes, hasOutbound, texts } = env;

  const resolvedPromise = resolved(undefined);
  define('queueMicrotask', function queueMicrotask(callback) {
    if (typeof callback !== 'function') throw new TypeErrorConstructor('queueMicrotask: the callback must be a function');
    apply(then, resolvedPromise, [() => callback()]);
  });

  const asBytes = (input) => {
    if (input === undefined) return new Uint8ArrayConstructor(0);
    if (input instanceof ArrayBufferConstructor) return new Uint8ArrayConstructor(input);
    if (isView(input)) return new Uint8ArrayConstructor(input.buffer, input.byteOffset, input.byteLength);
    throw new TypeErrorConstructor('Expected an ArrayBuffer or a typed array');
  };

  class TextEncoder {
    get encoding() { return 'utf-8'; }
    encode(text = '') { return new Uint8ArrayConstructor(opUtf8Encode(StringConstructor(text))); }
  }
  class TextDecoder {
    constructor(label = 'utf-8') {
      const name = StringConstructor(label).toLowerCase();
      if (name !== 'utf-8' && name !== 'utf8') throw new RangeErrorConstructor(`TextDecoder: only utf-8 is supported, not "${label}"`);
    }
    get encoding() { return 'utf-8'; }
    decode(input) { return opUtf8Decode(asBytes(input)); }
  }
  define('TextEncoder', TextEncoder);
  define('TextDecoder', TextDecoder);

  define('btoa', function btoa(text) {
    const string = StringConstructor(text);
    const bytes = new Uint8ArrayConstructor(string.length);
    for (let i = 0; i < string.length; i++) {
      const code = string.charCodeAt(i);
      if (code > 255) throw new ErrorConstructor('btoa: the string contains a character outside Latin-1');
      bytes[i] = code;
    }
    return opBytesToBase64(bytes);
  });
  define('atob', function atob(text) {
    let string = StringConstructor(text).replace(/[\t\n\f\r ]/g, '');
    if (string.length % 4 === 1) throw new ErrorConstructor('atob: the string is not valid base64');
    while (string.length % 4 !== 0) string += '=';
    const buffer = opBase64ToBytes(string);
    if (buffer === undefined) throw new ErrorConstructor('atob: the string is not valid base64');
    return opLatin1Decode(new Uint8ArrayConstructor(buffer));
  });

  define('structuredClone', function structuredClone(value) {
    const seen = new MapConstructor();
    const clone = (input) => {
      if (input === null || (typeof input !== 'object' && typeof input !== 'function')) {
        if (typeof input === 'symbol') throw new TypeErrorConstructor('structuredClone: a symbol cannot be cloned');
        return input;
      }
      if (typeof input === 'function') throw new TypeErrorConstructor('structuredClone: a function cannot be cloned');
      if (seen.has(input)) return seen.get(input);
      let copy;
      if (isArray(input)) {
        copy = [];
        seen.set(input, copy);
        for (let i = 0; i < input.length; i++) copy[i] = clone(input[i]);
        return copy;
      }
      if (input instanceof DateConstructor) copy = new DateConstructor(input.getTime());
      else if (input instanceof RegExpConstructor) copy = new RegExpConstructor(input.source, input.flags);
      else if (input instanceof ArrayBufferConstructor) copy = input.slice(0);
      else if (isView(input)) copy = new input.constructor(input);
      else if (input instanceof MapConstructor) {
        copy = new MapConstructor();
        seen.set(input, copy);
        for (const [k, v] of input) copy.set(clone(k), clone(v));
        return copy;
      } else if (input instanceof SetConstructor) {
        copy = new SetConstructor();
        seen.set(input, copy);
        for (const v of input) copy.add(clone(v));
        return copy;
      } else if (input instanceof ErrorConstructor) {
        copy = new input.constructor(input.message);
      } else {
        copy = {};
        seen.set(input, copy);
        for (const key of Object.keys(input)) copy[key] = clone(input[key]);
        return copy;
      }
      seen.set(input, copy);
      return copy;
    };
    return clone(value);
  });

  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  class Headers {
    #entries;
    constructor(init = []) {
      this.#entries = [];
      const pairs = isArray(init) ? init : init instanceof Headers ? init.entries() : objectEntries(init);
      for (const [name, value] of pairs) this.append(name, value);
    }
    append(name, value) { this.#entries.push([StringConstructor(name).toLowerCase(), StringConstructor(value)]); }
    get(name) {
      const key = StringConstructor(name).toLowerCase();
      const values = this.#entries.filter(([k]) => k === key).map(([, v]) => v);
      return values.length === 0 ? null : values.join(', ');
    }
    has(name) { return this.get(name) !== null; }
    entries() { return this.#entries.map(([k, v]) => [k, v]); }
    [Symbol.iterator]() { return this.entries()[Symbol.iterator](); }
    forEach(callback) { for (const [k, v] of this.#entries) callback(v, k, this); }
  }
  class Response {
    #body;
    constructor(body, init = {}) {
      this.#body = asBytes(body);
      this.status = init.status ?? 200;
      this.statusText = init.statusText ?? '';
      this.headers = new Headers(init.headers ?? []);
      this.url = init.url ?? '';
      this.ok = this.status >= 200 && this.status < 300;
    }
    async arrayBuffer() { return this.#body.slice().buffer; }
    async bytes() { return this.#body.slice(); }
    async text() { return decoder.decode(this.#body); }
    async json() { return jsonParse(decoder.decode(this.#body)); }
  }
  define('Headers', Headers);
  define('Response', Response);

  define('fetch', async function fetch(input, init = {}) {
    if (!hasOutbound) throw new TypeErrorConstructor(texts.networkClosed);
    const url = StringConstructor(input);
    const method = StringConstructor(init.method ?? 'GET').toUpperCase();
    const headers = new Headers(init.headers ?? []).entries();
    const body = init.body === undefined || init.body === null ? new Uint8ArrayConstructor(0)
      : typeof init.body === 'string' ? encoder.encode(init.body) : asBytes(init.body);
    const [status, responseHeaders, responseBody] = await outbound(method, url, jsonStringify(headers), body);
    return new Response(responseBody, { status, headers: jsonParse(responseHeaders), url });
  });

}
