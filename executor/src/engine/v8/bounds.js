// The V8 engine's bounds on memory V8 allocates outside its heap and its ArrayBuffer
// allocator (engine/v8/bounds.rs says why each is charged this way). Evaluated once in
// each new context, before the runtime's own built-ins; `reserve(bytes)` charges the
// execution's budget and, when the budget has no room, stops the run with the memory
// outcome. Returns the function that puts a bounded `WebAssembly` on the global.
(reserve, intlObjectBytes) => {
  'use strict';
  const { apply, construct, defineProperty, getOwnPropertyDescriptor } = Reflect;
  const WeakMapConstructor = WeakMap;
  const weakGet = WeakMap.prototype.get;
  const weakSet = WeakMap.prototype.set;
  const Uint8ArrayConstructor = Uint8Array;
  const isView = ArrayBuffer.isView;
  const ArrayBufferConstructor = ArrayBuffer;
  const bufferSlice = ArrayBuffer.prototype.slice;
  const typedArrayBuffer = getOwnPropertyDescriptor(Object.getPrototypeOf(Uint8Array.prototype), 'buffer').get;
  const typedArrayOffset = getOwnPropertyDescriptor(Object.getPrototypeOf(Uint8Array.prototype), 'byteOffset').get;
  const typedArrayLength = getOwnPropertyDescriptor(Object.getPrototypeOf(Uint8Array.prototype), 'byteLength').get;
  const dataViewBuffer = getOwnPropertyDescriptor(DataView.prototype, 'buffer').get;
  const dataViewOffset = getOwnPropertyDescriptor(DataView.prototype, 'byteOffset').get;
  const dataViewLength = getOwnPropertyDescriptor(DataView.prototype, 'byteLength').get;
  const ObjectConstructor = Object;
  const TypeErrorConstructor = TypeError;
  const RangeErrorConstructor = RangeError;
  const NumberConstructor = Number;
  const MathMin = Math.min;
  const isInteger = Number.isInteger;

  // A constructor whose instances are charged `bytes(args)` before they are made. The
  // prototype's `constructor` names the wrapper, so no program reaches the original.
  const charged = (original, bytes) => {
    const wrapper = new Proxy(original, {
      construct(target, args, newTarget) {
        reserve(bytes(args));
        return construct(target, args, newTarget === wrapper ? target : newTarget);
      },
    });
    defineProperty(original.prototype, 'constructor', { value: wrapper, writable: true, configurable: true });
    return wrapper;
  };
  const replace = (holder, name, value) => {
    defineProperty(holder, name, { value, writable: true, configurable: true, enumerable: false });
  };

  // Resizable and growable buffers: V8 reserves `maxByteLength` and commits it as the
  // buffer grows, past the allocator. The whole of it is charged when the buffer is made.
  const maxByteLength = (args) => {
    const options = args[1];
    if (options === null || typeof options !== 'object') return 0;
    const max = options.maxByteLength;
    if (max === undefined) return 0;
    const n = NumberConstructor(max);
    return n > 0 && n === n ? n : 0;
  };
  replace(globalThis, 'ArrayBuffer', charged(ArrayBuffer, maxByteLength));
  replace(globalThis, 'SharedArrayBuffer', charged(SharedArrayBuffer, maxByteLength));

  // Intl objects hold ICU's objects outside the heap, which V8 does not report: each is
  // charged a fixed size measured above the largest (engines.md).
  for (const name of ['Collator', 'DateTimeFormat', 'DisplayNames', 'DurationFormat', 'ListFormat', 'Locale',
    'NumberFormat', 'PluralRules', 'RelativeTimeFormat', 'Segmenter']) {
    const original = Intl[name];
    if (typeof original === 'function') replace(Intl, name, charged(original, () => intlObjectBytes));
  }
  const segment = Intl.Segmenter.prototype.segment;
  replace(Intl.Segmenter.prototype, 'segment', function segment_(input) {
    reserve(intlObjectBytes);
    return apply(segment, this, [input]);
  });

  // WebAssembly, when a run asks for it.
  const PAGE = 65536;
  // Code compiled from a module is charged this many times the module's bytes.
  const CODE_PER_BYTE = 8;
  return (wasm) => {
    const perInstance = new WeakMapConstructor();
    const copy = (source) => {
      if (isView(source)) {
        const [buffer, offset, length] = source instanceof DataView
          ? [apply(dataViewBuffer, source, []), apply(dataViewOffset, source, []), apply(dataViewLength, source, [])]
          : [apply(typedArrayBuffer, source, []), apply(typedArrayOffset, source, []), apply(typedArrayLength, source, [])];
        return new Uint8ArrayConstructor(apply(bufferSlice, buffer, [offset, offset + length]));
      }
      if (source instanceof ArrayBufferConstructor) return new Uint8ArrayConstructor(apply(bufferSlice, source, []));
      throw new TypeErrorConstructor('WebAssembly: the module must be an ArrayBuffer or a typed array');
    };
    const compileError = (text) => new wasm.CompileError(`WebAssembly.Module(): ${text}`);
    // Every memory the module defines gets a maximum (its initial size when it declares
    // none), and the module's instances are charged the sum of those maxima: growth past
    // a maximum is refused by the engine, so nothing grows uncharged.
    const bounded = (source) => {
      const bytes = copy(source);
      let at = 8;
      const byte = () => {
        if (at >= bytes.length) throw compileError('the module ends early');
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
      const encode = (value, out) => {
        do {
          let b = value % 128;
          value = (value - b) / 128;
          if (value > 0) b |= 0x80;
          out.push(b);
        } while (value > 0);
      };
      reserve(bytes.length * CODE_PER_BYTE);
      let memoryBytes = 0;
      while (at < bytes.length) {
        const start = at;
        const id = byte();
        const size = leb();
        const payload = at;
        if (id !== 5) {
          at = payload + size;
          continue;
        }
        const out = [];
        const count = leb();
        encode(count, out);
        for (let i = 0; i < count; i++) {
          const flags = byte();
          if (flags & ~0x03) throw compileError('only 32-bit memories of 64 KiB pages are supported here');
          const initial = leb();
          const maximum = flags & 1 ? leb() : initial;
          out.push(flags | 1);
          encode(initial, out);
          encode(maximum, out);
          memoryBytes += maximum * PAGE;
        }
        if (at !== payload + size) throw compileError('the memory section is malformed');
        const header = [5];
        encode(out.length, header);
        const rewritten = new Uint8ArrayConstructor(start + header.length + out.length + (bytes.length - at));
        rewritten.set(bytes.subarray(0, start), 0);
        rewritten.set(header, start);
        rewritten.set(out, start + header.length);
        rewritten.set(bytes.subarray(at), start + header.length + out.length);
        return { bytes: rewritten, memoryBytes };
      }
      return { bytes, memoryBytes };
    };
    const Module = wasm.Module;
    const Instance = wasm.Instance;
    const Memory = wasm.Memory;
    const compiled = (module, memoryBytes) => {
      apply(weakSet, perInstance, [module, memoryBytes]);
      return module;
    };
    const instanceBytes = (module) => {
      const bytes = apply(weakGet, perInstance, [module]);
      if (bytes === undefined) throw new TypeErrorConstructor('WebAssembly.Instance(): Argument 0 must be a WebAssembly.Module');
      return bytes;
    };
    const ModuleWrapper = new Proxy(Module, {
      construct(target, args, newTarget) {
        const { bytes, memoryBytes } = bounded(args[0]);
        return compiled(construct(target, [bytes], newTarget === ModuleWrapper ? target : newTarget), memoryBytes);
      },
    });
    const InstanceWrapper = new Proxy(Instance, {
      construct(target, args, newTarget) {
        reserve(instanceBytes(args[0]));
        return construct(target, args, newTarget === InstanceWrapper ? target : newTarget);
      },
    });
    const MemoryWrapper = new Proxy(Memory, {
      construct(target, args, newTarget) {
        const descriptor = args[0];
        if (descriptor === null || typeof descriptor !== 'object') {
          throw new TypeErrorConstructor('WebAssembly.Memory(): Argument 0 must be a memory descriptor');
        }
        if (descriptor.address !== undefined && descriptor.address !== 'i32') {
          throw new RangeErrorConstructor('WebAssembly.Memory(): only 32-bit memories are supported here');
        }
        const initial = NumberConstructor(descriptor.initial);
        const maximum = descriptor.maximum === undefined ? initial : NumberConstructor(descriptor.maximum);
        if (!isInteger(initial) || !isInteger(maximum) || initial < 0 || maximum < initial || maximum > 65536) {
          throw new RangeErrorConstructor('WebAssembly.Memory(): the initial and maximum sizes must be whole pages, initial <= maximum <= 65536');
        }
        reserve(maximum * PAGE);
        const bounded = { initial, maximum };
        if (descriptor.shared !== undefined) bounded.shared = descriptor.shared;
        return construct(target, [bounded], newTarget === MemoryWrapper ? target : newTarget);
      },
    });
    defineProperty(Module.prototype, 'constructor', { value: ModuleWrapper, writable: true, configurable: true });
    defineProperty(Instance.prototype, 'constructor', { value: InstanceWrapper, writable: true, configurable: true });
    defineProperty(Memory.prototype, 'constructor', { value: MemoryWrapper, writable: true, configurable: true });
    const compile = wasm.compile;
    const instantiate = wasm.instantiate;
    const namespace = ObjectConstructor.create(ObjectConstructor.getPrototypeOf(wasm));
    for (const key of Reflect.ownKeys(wasm)) {
      if (key === 'compileStreaming' || key === 'instantiateStreaming') continue;
      defineProperty(namespace, key, getOwnPropertyDescriptor(wasm, key));
    }
    replace(namespace, 'Module', ModuleWrapper);
    replace(namespace, 'Instance', InstanceWrapper);
    replace(namespace, 'Memory', MemoryWrapper);
    replace(namespace, 'compile', async function compile_(source) {
      const { bytes, memoryBytes } = bounded(source);
      return compiled(await apply(compile, wasm, [bytes]), memoryBytes);
    });
    replace(namespace, 'instantiate', async function instantiate_(source, imports) {
      if (source instanceof Module) {
        reserve(instanceBytes(source));
        return apply(instantiate, wasm, [source, imports]);
      }
      const { bytes, memoryBytes } = bounded(source);
      const module = compiled(await apply(compile, wasm, [bytes]), memoryBytes);
      reserve(memoryBytes);
      return { module, instance: await apply(instantiate, wasm, [module, imports]) };
    });
    replace(globalThis, 'WebAssembly', namespace);
  };
}
