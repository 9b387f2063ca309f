// Peers measured side by side with `cargo bench`: the same three workloads on node:vm,
// isolated-vm and quickjs-emscripten, each with a fresh engine (context/isolate/runtime)
// per run. Prints one JSON line per measurement: {peer, workload, median, unit}.
'use strict';
const vm = require('node:vm');
const ivm = require('isolated-vm');
const { getQuickJS } = require('quickjs-emscripten');

const MIB = 1 << 20;
const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const now = () => Number(process.hrtime.bigint()) / 1e3; // µs

async function sample(times, run) {
  const out = [];
  for (let i = 0; i < times; i++) {
    const start = now();
    await run();
    out.push(now() - start);
  }
  return median(out);
}

const callsProgram = (n) => `(async () => { let sum = 0; for (let i = 0; i < ${n}; i++) sum += JSON.parse(await __dispatch('store', 'one', JSON.stringify([i]))).result; return sum })()`;
const bytesProgram = `(async () => {
  const sent = new Uint8Array(${MIB}).fill(7);
  const argsJson = JSON.stringify([{ __executor_binary_v1__: 'Uint8Array', data: __bytesToBase64(sent) }]);
  const envelope = JSON.parse(await __dispatch('store', 'echo', argsJson));
  return new Uint8Array(__base64ToBytes(envelope.result.data)).length;
})()`;
const echo = (argsJson) => {
  const [tag] = JSON.parse(argsJson);
  const bytes = Buffer.from(tag.data, 'base64');
  return JSON.stringify({ result: { __executor_binary_v1__: 'Uint8Array', data: bytes.toString('base64') } });
};

const peers = {
  'node:vm': {
    async run(code) {
      const context = vm.createContext({
        __dispatch: async (p, t, a) => (t === 'echo' ? echo(a) : '{"result":1}'),
        __bytesToBase64: (view) => Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString('base64'),
        __base64ToBytes: (text) => { const b = Buffer.from(text, 'base64'); return b.buffer.slice(b.byteOffset, b.byteOffset + b.length); },
      });
      return vm.runInContext(code, context);
    },
  },
  'isolated-vm': {
    async run(code) {
      const isolate = new ivm.Isolate({ memoryLimit: 64 });
      try {
        const context = await isolate.createContext();
        const dispatch = new ivm.Reference(async (p, t, a) => (t === 'echo' ? echo(a) : '{"result":1}'));
        await context.global.set('__ref', dispatch);
        await context.global.set('__toBase64', new ivm.Reference((bytes) => Buffer.from(bytes).toString('base64')));
        await context.global.set('__fromBase64', new ivm.Reference((text) => new ivm.ExternalCopy(Buffer.from(text, 'base64').buffer).copyInto()));
        await context.eval(`
          globalThis.__dispatch = (p, t, a) => __ref.apply(undefined, [p, t, a], { result: { promise: true } });
          globalThis.__bytesToBase64 = (view) => __toBase64.applySync(undefined, [new Uint8Array(view)], { arguments: { copy: true } });
          globalThis.__base64ToBytes = (text) => __fromBase64.applySync(undefined, [text]);`);
        return await context.eval(code, { promise: true, copy: true });
      } finally {
        isolate.dispose();
      }
    },
  },
  'quickjs-emscripten': {
    async run(code) {
      const QuickJS = await quickjs;
      const runtime = QuickJS.newRuntime();
      const vmc = runtime.newContext();
      try {
        const host = (name, fn) => { const h = vmc.newFunction(name, fn); vmc.setProp(vmc.global, name, h); h.dispose(); };
        host('__dispatch', (p, t, a) => {
          const promise = vmc.newPromise();
          const tool = vmc.getString(t), args = vmc.getString(a);
          Promise.resolve().then(() => {
            const answer = vmc.newString(tool === 'echo' ? echo(args) : '{"result":1}');
            promise.resolve(answer); answer.dispose();
            runtime.executePendingJobs();
          });
          return promise.handle;
        });
        host('__bytesToBase64', (view) => {
          const buffer = vmc.getProp(view, 'buffer');
          const bytes = vmc.getArrayBuffer(buffer); buffer.dispose();
          return vmc.newString(Buffer.from(bytes.value).toString('base64'));
        });
        host('__base64ToBytes', (text) => vmc.newArrayBuffer(Buffer.from(vmc.getString(text), 'base64')));
        const result = vmc.unwrapResult(vmc.evalCode(code));
        const settled = vmc.resolvePromise(result); result.dispose();
        runtime.executePendingJobs();
        const value = vmc.unwrapResult(await settled);
        const out = vmc.dump(value); value.dispose();
        return out;
      } finally {
        vmc.dispose();
        runtime.dispose();
      }
    },
  },
};
const quickjs = getQuickJS();

// The programs of benches/programs/ (the compute bench runs them on codemode-rs and bare
// rquickjs), on node:vm: `store.orders()` is JSON.parse of the answer inside the context.
const fs = require('node:fs');
const path = require('node:path');
const programFile = (name) => fs.readFileSync(path.join(__dirname, '..', 'programs', name), 'utf8').split('\n').slice(1).join('\n').trim();
const rowsJson = JSON.stringify(Array.from({ length: 10000 }, (_, i) => ({ id: i, region: ['north', 'south', 'east', 'west'][i % 4], amount: (i * 37) % 1000, open: i % 3 !== 0 })));
// Samples per program; the short records program takes more, as its median moved by a
// third between runs of 50.
const computeWorkloads = [['compute mix', 'compute-mix.js', 15], ['JSON round trip of 2 MB', 'json.js', 15], ['10,000 records', 'records.js', 300]];
const runInVm = (code) => {
  const context = vm.createContext({ __answer: rowsJson });
  return vm.runInContext(`const store = { orders: async () => JSON.parse(__answer) };\n(${code})()`, context);
};

(async () => {
  const only = process.argv[2];
  for (const [name, peer] of Object.entries(peers)) {
    if (only && only !== name) continue;
    const one = await sample(300, () => peer.run('(async () => 1)()'));
    const zero = await sample(100, () => peer.run(callsProgram(0)));
    const hundred = await sample(100, () => peer.run(callsProgram(100)));
    const bytes = await sample(15, () => peer.run(bytesProgram));
    const emit = (workload, median, unit) => console.log(JSON.stringify({ peer: name, workload, median: Math.round(median * 100) / 100, unit }));
    emit('async () => 1, one at a time', one, 'µs');
    emit('runs per second, one at a time', 1e6 / one, 'runs/s');
    emit('tool call overhead (100 sequential calls)', (hundred - zero) / 100, 'µs');
    emit('1 MiB Uint8Array to dispatch and back', bytes / 1000, 'ms');
  }
  if (!only || only === 'node:vm') {
    for (const [workload, file, times] of computeWorkloads) {
      const code = programFile(file);
      for (let i = 0; i < 5; i++) await runInVm(code);
      const median = await sample(times, () => runInVm(code));
      console.log(JSON.stringify({ peer: 'node:vm', workload: `compute: ${workload}`, median: Math.round(median / 10) / 100, unit: 'ms' }));
    }
  }
})();
