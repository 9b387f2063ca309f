// The V8 engine's bounds on memory V8 allocates outside its heap limit and its ArrayBuffer
// allocator (engine/v8/bounds.rs says why each is charged this way). Evaluated once in each
// new context, before the runtime's own built-ins, so every intrinsic used here is the
// original: a program that rewrites globals or prototypes reaches nothing below.
// `reserve(bytes)` charges the execution's budget and, when it has no room, stops the run
// with the memory outcome; `icu(bytes)` counts ICU objects made and dropped at once (a
// `toLocaleString`), collecting garbage once they add up. Returns the function that puts
// a bounded `WebAssembly` on the global.
(reserve, release, icu, intlObjectBytes, icuCallBytes) => {
  'use strict';
  const { apply, construct, defineProperty, getOwnPropertyDescriptor, ownKeys } = Reflect;
  const ProxyConstructor = Proxy;
  const WeakMapConstructor = WeakMap;
  const weakGet = WeakMap.prototype.get;
  const weakSet = WeakMap.prototype.set;
  const PromiseConstructor = Promise;
  const then = Promise.prototype.then;
  const promiseReject = Promise.reject;
  const Uint8ArrayConstructor = Uint8Array;
  const ArrayBufferConstructor = ArrayBuffer;
  const DataViewConstructor = DataView;
  const isView = ArrayBuffer.isView;
  const bufferSlice = ArrayBuffer.prototype.slice;
  const TypedArrayPrototype = Object.getPrototypeOf(Uint8Array.prototype);
  const getter = (prototype, name) => getOwnPropertyDescriptor(prototype, name).get;
  const typedArrayBuffer = getter(TypedArrayPrototype, 'buffer');
  const typedArrayOffset = getter(TypedArrayPrototype, 'byteOffset');
  const typedArrayLength = getter(TypedArrayPrototype, 'byteLength');
  const typedArraySet = TypedArrayPrototype.set;
  const typedArraySubarray = TypedArrayPrototype.subarray;
  const dataViewBuffer = getter(DataView.prototype, 'buffer');
  const dataViewOffset = getter(DataView.prototype, 'byteOffset');
  const dataViewLength = getter(DataView.prototype, 'byteLength');
  const ObjectConstructor = Object;
  const objectCreate = Object.create;
  const getPrototypeOf = Object.getPrototypeOf;
  const TypeErrorConstructor = TypeError;
  const RangeErrorConstructor = RangeError;
  const NumberConstructor = Number;
  const isInteger = Number.isInteger;
  const isArray = Array.isArray;
  const mathMin = Math.min;
  const mathTrunc = Math.trunc;
  const reflectGet = Reflect.get;
  const iteratorSymbol = Symbol.iterator;

  const replace = (holder, name, value) => {
    defineProperty(holder, name, { value, writable: true, configurable: true, enumerable: false });
  };
  const point = (prototype, constructor) => {
    defineProperty(prototype, 'constructor', { value: constructor, writable: true, configurable: true });
  };
  // A constructor whose instances are charged before they are made: `prepare(args)` says
  // the bytes and the arguments the original gets (read once, so a getter cannot say one
  // thing to the charge and another to V8). The prototype's `constructor` names the
  // wrapper, so no program reaches the original.
  const charged = (original, prepare, callable) => {
    const traps = {
      construct(target, args, newTarget) {
        const [bytes, passed] = prepare(args);
        reserve(bytes);
        return construct(target, passed, newTarget === wrapper ? target : newTarget);
      },
    };
    if (callable) {
      // Intl's oldest constructors make an object when called without `new` too.
      traps.apply = (target, thisArgument, args) => {
        const [bytes, passed] = prepare(args);
        reserve(bytes);
        return apply(target, thisArgument, passed);
      };
    }
    const wrapper = new ProxyConstructor(original, traps);
    point(original.prototype, wrapper);
    return wrapper;
  };

  // Resizable and growable buffers: V8 reserves `maxByteLength` and commits it as the
  // buffer grows, past the allocator. The whole of it is charged when the buffer is made.
  const resizable = (args) => {
    const options = args[1];
    if (options === null || typeof options !== 'object') return [0, [args[0]]];
    const max = options.maxByteLength;
    if (max === undefined) return [0, [args[0]]];
    const n = NumberConstructor(max);
    return [n > 0 ? n : 0, [args[0], { maxByteLength: n }]];
  };
  replace(globalThis, 'ArrayBuffer', charged(ArrayBuffer, resizable, false));
  replace(globalThis, 'SharedArrayBuffer', charged(SharedArrayBuffer, resizable, false));

  // Intl objects hold ICU's objects outside the heap, which V8 does not report: each is
  // charged a fixed size above the largest measured (engines.md).
  const intl = (args) => [intlObjectBytes, args];
  for (const [name, callable] of [['Collator', true], ['DateTimeFormat', true], ['DisplayNames', false],
    ['DurationFormat', false], ['ListFormat', false], ['Locale', false], ['NumberFormat', true],
    ['PluralRules', false], ['RelativeTimeFormat', false], ['Segmenter', false]]) {
    const original = Intl[name];
    if (typeof original === 'function') replace(Intl, name, charged(original, intl, callable));
  }
  // A method that makes ICU objects: `before(args)` runs first. The wrapper keeps the
  // original's name and length.
  const wrap = (holder, name, before) => {
    const original = holder[name];
    const { [name]: wrapper } = {
      [name](...args) {
        before(args);
        return apply(original, this, args);
      },
    };
    defineProperty(wrapper, 'length', { value: original.length, configurable: true });
    replace(holder, name, wrapper);
  };
  // Each segments object, and each iterator over one, holds a copy of ICU's break iterator.
  // Their prototype is reached through the first segments object (no program has one
  // before `segment` returns it), rather than made here with every context.
  const segment = Intl.Segmenter.prototype.segment;
  let segmentsWrapped = false;
  wrap(Intl.Segmenter.prototype, 'segment', () => reserve(intlObjectBytes));
  const { segment: segmentWrapper } = Intl.Segmenter.prototype;
  const { segment: segmentOnce } = {
    segment(input) {
      const segments = apply(segmentWrapper, this, [input]);
      if (!segmentsWrapped) {
        segmentsWrapped = true;
        wrap(getPrototypeOf(segments), iteratorSymbol, () => reserve(intlObjectBytes));
      }
      return segments;
    },
  };
  defineProperty(segmentOnce, 'length', { value: segment.length, configurable: true });
  replace(Intl.Segmenter.prototype, 'segment', segmentOnce);
  // V8's own break iterator, outside the standard: gone rather than bounded.
  delete Intl.v8BreakIterator;
  // These make an ICU formatter or collator per call and drop it: garbage the heap limit
  // does not see, collected once enough of it is made.
  const icuCall = () => icu(icuCallBytes);
  for (const [holder, names] of [[Date.prototype, ['toLocaleString', 'toLocaleDateString', 'toLocaleTimeString']],
    [Number.prototype, ['toLocaleString']], [BigInt.prototype, ['toLocaleString']],
    [String.prototype, ['localeCompare']]]) {
    for (const name of names) wrap(holder, name, icuCall);
  }

  // Builtins that copy an array or array-like into an array of its length at once,
  // outside any interrupt check: the copy's bytes (8 per element, the most a slot takes)
  // are charged for the call, so one past the budget ends the run with the memory outcome
  // instead of growing the heap past its limit in one step (or ending the process, past
  // V8's largest array). An array-like's length is read once, and the builtin sees that.
  const SLOT_BYTES = 8;
  const lengthOf = (value) => {
    const n = mathTrunc(NumberConstructor(value));
    return n > 0 ? mathMin(n, 2 ** 53 - 1) : 0;
  };
  // `[receiver the builtin gets, its length]`.
  const fixed = (object) => {
    if (isArray(object)) return [object, object.length];
    const target = ObjectConstructor(object);
    const n = lengthOf(target.length);
    const view = new ProxyConstructor(target, {
      get: (t, key, receiver) => (key === 'length' ? n : reflectGet(t, key, receiver)),
    });
    return [view, n];
  };
  const copying = (holder, name, same) => {
    const original = holder[name];
    const { [name]: wrapper } = {
      [name](...args) {
        if (this === null || this === undefined) return apply(original, this, args);
        const [receiver, n] = fixed(this);
        const bytes = n * SLOT_BYTES;
        reserve(bytes);
        try {
          const result = apply(original, receiver, args);
          return same && result === receiver ? this : result;
        } finally {
          release(bytes);
        }
      },
    };
    defineProperty(wrapper, 'length', { value: original.length, configurable: true });
    replace(holder, name, wrapper);
  };
  copying(Array.prototype, 'sort', true);
  for (const name of ['toSorted', 'toReversed', 'toSpliced', 'with']) copying(Array.prototype, name, false);
  const arrayFrom = Array.from;
  const { from: fromWrapper } = {
    from(items, ...rest) {
      if (items === null || items === undefined || items[iteratorSymbol] !== undefined || typeof items !== 'object') {
        return apply(arrayFrom, this, [items, ...rest]);
      }
      const [receiver, n] = fixed(items);
      const bytes = n * SLOT_BYTES;
      reserve(bytes);
      try {
        return apply(arrayFrom, this, [receiver, ...rest]);
      } finally {
        release(bytes);
      }
    },
  };
  defineProperty(fromWrapper, 'length', { value: 1, configurable: true });
  replace(Array, 'from', fromWrapper);

  // WebAssembly, when a run asks for it.
  const PAGE = 65536;
  // Code compiled from a module is charged this many times the module's bytes, and each
  // module this much besides: its native objects (code space, jump tables, metadata; about
  // 10 KiB measured) that its bytes do not show.
  const CODE_PER_BYTE = 8;
  const MODULE_BYTES = 16384;
  return (wasm) => {
    const Module = wasm.Module;
    const Instance = wasm.Instance;
    const Memory = wasm.Memory;
    const CompileError = wasm.CompileError;
    const compile = wasm.compile;
    const instantiate = wasm.instantiate;
    // What each module's instance is charged: the sum of its memories' maxima. A module
    // not made here (none can be) is refused.
    const perInstance = new WeakMapConstructor();
    const compiled = (module, memoryBytes) => {
      apply(weakSet, perInstance, [module, memoryBytes]);
      return module;
    };
    const instanceBytes = (module) => {
      const bytes = apply(weakGet, perInstance, [module]);
      if (bytes === undefined) throw new TypeErrorConstructor('WebAssembly.Instance(): Argument 0 must be a WebAssembly.Module');
      return bytes;
    };
    // The module's bytes, copied: nothing the program holds changes them after the check.
    const copy = (source) => {
      let buffer, offset, length;
      if (isView(source)) {
        const view = source instanceof DataViewConstructor;
        buffer = apply(view ? dataViewBuffer : typedArrayBuffer, source, []);
        offset = apply(view ? dataViewOffset : typedArrayOffset, source, []);
        length = apply(view ? dataViewLength : typedArrayLength, source, []);
      } else if (source instanceof ArrayBufferConstructor) {
        buffer = source;
        offset = 0;
        length = undefined;
      } else {
        throw new TypeErrorConstructor('WebAssembly: the module must be an ArrayBuffer or a typed array');
      }
      const end = length === undefined ? undefined : offset + length;
      return new Uint8ArrayConstructor(apply(bufferSlice, buffer, end === undefined ? [offset] : [offset, end]));
    };
    const compileError = (text) => new CompileError(`WebAssembly.Module(): ${text}`);
    // The module's bytes, each memory it defines given a maximum (its initial size when it
    // declares none), and the sum of those maxima, charged per instance: growth past a
    // maximum is refused by the engine, so no memory grows uncharged.
    const bounded = (source) => {
      const bytes = copy(source);
      const size = apply(typedArrayLength, bytes, []);
      let at = 8;
      const byte = () => {
        if (at >= size) throw compileError('the module ends early');
        return bytes[at++];
      };
      const leb = () => {
        let value = 0, scale = 1, b;
        do {
          b = byte();
          value += (b & 0x7f) * scale;
          scale *= 128;
        } while (b & 0x80);
        return value;
      };
      reserve(size * CODE_PER_BYTE + MODULE_BYTES);
      while (at < size) {
        const start = at;
        const id = byte();
        const length = leb();
        const payload = at;
        if (id !== 5) {
          at = payload + length;
          continue;
        }
        const count = leb();
        // A typed array: its elements are its own, whatever a program put on prototypes.
        const out = new Uint8ArrayConstructor(5 + count * 11);
        let written = 0;
        const put = (b) => { out[written++] = b; };
        const encode = (value) => {
          do {
            let b = value % 128;
            value = (value - b) / 128;
            if (value > 0) b |= 0x80;
            put(b);
          } while (value > 0);
        };
        encode(count);
        let memoryBytes = 0;
        for (let i = 0; i < count; i++) {
          const flags = byte();
          if (flags & ~0x03) throw compileError('only 32-bit memories of 64 KiB pages are supported here');
          const initial = leb();
          const maximum = flags & 1 ? leb() : initial;
          put(flags | 1);
          encode(initial);
          encode(maximum);
          memoryBytes += maximum * PAGE;
        }
        if (at !== payload + length) throw compileError('the memory section is malformed');
        const header = new Uint8ArrayConstructor(6);
        let headerLength = 0;
        header[headerLength++] = 5;
        let rest = written;
        do {
          let b = rest % 128;
          rest = (rest - b) / 128;
          if (rest > 0) b |= 0x80;
          header[headerLength++] = b;
        } while (rest > 0);
        const rewritten = new Uint8ArrayConstructor(start + headerLength + written + (size - at));
        const place = (part, from) => apply(typedArraySet, rewritten, [part, from]);
        place(apply(typedArraySubarray, bytes, [0, start]), 0);
        place(apply(typedArraySubarray, header, [0, headerLength]), start);
        place(apply(typedArraySubarray, out, [0, written]), start + headerLength);
        place(apply(typedArraySubarray, bytes, [at]), start + headerLength + written);
        return [rewritten, memoryBytes];
      }
      return [bytes, 0];
    };
    const ModuleWrapper = new ProxyConstructor(Module, {
      construct(target, args, newTarget) {
        const [bytes, memoryBytes] = bounded(args[0]);
        return compiled(construct(target, [bytes], newTarget === ModuleWrapper ? target : newTarget), memoryBytes);
      },
    });
    const InstanceWrapper = new ProxyConstructor(Instance, {
      construct(target, args, newTarget) {
        reserve(instanceBytes(args[0]));
        return construct(target, [args[0], args[1]], newTarget === InstanceWrapper ? target : newTarget);
      },
    });
    const MemoryWrapper = new ProxyConstructor(Memory, {
      construct(target, args, newTarget) {
        const descriptor = args[0];
        if (descriptor === null || typeof descriptor !== 'object') {
          throw new TypeErrorConstructor('WebAssembly.Memory(): Argument 0 must be a memory descriptor');
        }
        const address = descriptor.address;
        if (address !== undefined && address !== 'i32') {
          throw new RangeErrorConstructor('WebAssembly.Memory(): only 32-bit memories are supported here');
        }
        const initial = NumberConstructor(descriptor.initial);
        const declared = descriptor.maximum;
        const maximum = declared === undefined ? initial : NumberConstructor(declared);
        const shared = descriptor.shared;
        if (!isInteger(initial) || !isInteger(maximum) || initial < 0 || maximum < initial || maximum > 65536) {
          throw new RangeErrorConstructor('WebAssembly.Memory(): the initial and maximum sizes must be whole pages, initial <= maximum <= 65536');
        }
        reserve(maximum * PAGE);
        const bounded = { initial, maximum };
        if (shared !== undefined) bounded.shared = shared;
        return construct(target, [bounded], newTarget === MemoryWrapper ? target : newTarget);
      },
    });
    point(Module.prototype, ModuleWrapper);
    point(Instance.prototype, InstanceWrapper);
    point(Memory.prototype, MemoryWrapper);
    // Promises are chained with the original `then` on the original promises, so the
    // charge and the record of a module never pass through anything a program replaced.
    const settle = (f) => {
      try {
        return f();
      } catch (error) {
        return apply(promiseReject, PromiseConstructor, [error]);
      }
    };
    const compileBounded = (source) => {
      const [bytes, memoryBytes] = bounded(source);
      return apply(then, apply(compile, wasm, [bytes]), [(module) => compiled(module, memoryBytes)]);
    };
    const namespace = objectCreate(getPrototypeOf(wasm));
    for (const key of ownKeys(wasm)) {
      if (key === 'compileStreaming' || key === 'instantiateStreaming') continue;
      defineProperty(namespace, key, getOwnPropertyDescriptor(wasm, key));
    }
    replace(namespace, 'Module', ModuleWrapper);
    replace(namespace, 'Instance', InstanceWrapper);
    replace(namespace, 'Memory', MemoryWrapper);
    const { compile: compileWrapper, instantiate: instantiateWrapper } = {
      compile(source) {
        return settle(() => compileBounded(source));
      },
      instantiate(source, imports) {
        return settle(() => {
          if (source instanceof Module) {
            reserve(instanceBytes(source));
            return apply(instantiate, wasm, [source, imports]);
          }
          return apply(then, compileBounded(source), [(module) => {
            reserve(instanceBytes(module));
            return apply(then, apply(instantiate, wasm, [module, imports]), [(instance) => ({ module, instance })]);
          }]);
        });
      },
    };
    replace(namespace, 'compile', compileWrapper);
    replace(namespace, 'instantiate', instantiateWrapper);
    replace(globalThis, 'WebAssembly', namespace);
  };
}
