// The sandbox's web globals, built on a few natives. quickjs.rs evaluates this as a
// function and calls it with those natives before the entry source, so none of them
// is left on the global object.
(natives) => {
  'use strict';
  const global = globalThis;
  const define = (name, value) =>
    Object.defineProperty(global, name, { value, writable: true, configurable: true, enumerable: false });
  const PromiseConstructor = Promise;
  const resolved = PromiseConstructor.resolve();
  const then = Promise.prototype.then;
  const apply = Reflect.apply;
  const isView = ArrayBuffer.isView;
  const Uint8ArrayConstructor = Uint8Array;

  define('queueMicrotask', function queueMicrotask(callback) {
    if (typeof callback !== 'function') throw new TypeError('queueMicrotask: the callback must be a function');
    apply(then, resolved, [() => callback()]);
  });

  const asBytes = (input) => {
    if (input === undefined) return new Uint8ArrayConstructor(0);
    if (input instanceof ArrayBuffer) return new Uint8ArrayConstructor(input);
    if (isView(input)) return new Uint8ArrayConstructor(input.buffer, input.byteOffset, input.byteLength);
    throw new TypeError('Expected an ArrayBuffer or a typed array');
  };

  class TextEncoder {
    get encoding() { return 'utf-8'; }
    encode(text = '') { return natives.utf8Encode(String(text)); }
  }
  class TextDecoder {
    constructor(label = 'utf-8') {
      const name = String(label).toLowerCase();
      if (name !== 'utf-8' && name !== 'utf8') throw new RangeError(`TextDecoder: only utf-8 is supported, not "${label}"`);
    }
    get encoding() { return 'utf-8'; }
    decode(input) { return natives.utf8Decode(asBytes(input)); }
  }
  define('TextEncoder', TextEncoder);
  define('TextDecoder', TextDecoder);

  define('btoa', function btoa(text) {
    const string = String(text);
    const bytes = new Uint8ArrayConstructor(string.length);
    for (let i = 0; i < string.length; i++) {
      const code = string.charCodeAt(i);
      if (code > 255) throw new Error('btoa: the string contains a character outside Latin-1');
      bytes[i] = code;
    }
    return natives.bytesToBase64(bytes);
  });
  define('atob', function atob(text) {
    let string = String(text).replace(/[\t\n\f\r ]/g, '');
    if (string.length % 4 === 1) throw new Error('atob: the string is not valid base64');
    while (string.length % 4 !== 0) string += '=';
    const buffer = natives.base64ToBytes(string);
    if (buffer === undefined) throw new Error('atob: the string is not valid base64');
    return natives.latin1Decode(new Uint8ArrayConstructor(buffer));
  });

  define('structuredClone', function structuredClone(value) {
    const seen = new Map();
    const clone = (input) => {
      if (input === null || (typeof input !== 'object' && typeof input !== 'function')) {
        if (typeof input === 'symbol') throw new TypeError('structuredClone: a symbol cannot be cloned');
        return input;
      }
      if (typeof input === 'function') throw new TypeError('structuredClone: a function cannot be cloned');
      if (seen.has(input)) return seen.get(input);
      let copy;
      if (Array.isArray(input)) {
        copy = [];
        seen.set(input, copy);
        for (let i = 0; i < input.length; i++) copy[i] = clone(input[i]);
        return copy;
      }
      if (input instanceof Date) copy = new Date(input.getTime());
      else if (input instanceof RegExp) copy = new RegExp(input.source, input.flags);
      else if (input instanceof ArrayBuffer) copy = input.slice(0);
      else if (isView(input)) copy = new input.constructor(input);
      else if (input instanceof Map) {
        copy = new Map();
        seen.set(input, copy);
        for (const [k, v] of input) copy.set(clone(k), clone(v));
        return copy;
      } else if (input instanceof Set) {
        copy = new Set();
        seen.set(input, copy);
        for (const v of input) copy.add(clone(v));
        return copy;
      } else if (input instanceof Error) {
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
      const pairs = Array.isArray(init) ? init : init instanceof Headers ? init.entries() : Object.entries(init);
      for (const [name, value] of pairs) this.append(name, value);
    }
    append(name, value) { this.#entries.push([String(name).toLowerCase(), String(value)]); }
    get(name) {
      const key = String(name).toLowerCase();
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
    async json() { return JSON.parse(decoder.decode(this.#body)); }
  }
  define('Headers', Headers);
  define('Response', Response);

  const closed = natives.networkClosed;
  define('fetch', async function fetch(input, init = {}) {
    if (closed !== undefined) throw new TypeError(closed);
    const url = String(input);
    const method = String(init.method ?? 'GET').toUpperCase();
    const headers = new Headers(init.headers ?? []).entries();
    const body = init.body === undefined || init.body === null ? new Uint8ArrayConstructor(0)
      : typeof init.body === 'string' ? encoder.encode(init.body) : asBytes(init.body);
    const [status, responseHeaders, responseBody] = await natives.outbound(method, url, JSON.stringify(headers), body);
    return new Response(responseBody, { status, headers: JSON.parse(responseHeaders), url });
  });
};
