// Runs generated entry sources on Node (V8), one fresh node:vm context per case, with
// a stand-in __dispatch and base64 pair. Reads {cases: [...]} on stdin; writes
// {name: {calls, outcome, globalReads}} on stdout. Used by tests/node_entry.rs.
'use strict';
const vm = require('node:vm');

const STANDARD_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
async function runCase(testCase) {
  const calls = [];
  const globalReads = [];
  const context = vm.createContext({});
  context.__dispatch = (provider, tool, argsJson) => {
    calls.push([provider, tool, argsJson]);
    const answer = testCase.answers[`${provider}.${tool}`];
    return Promise.resolve(answer !== undefined ? answer : JSON.stringify({ result: { provider, tool, argsJson } }));
  };
  context.__bytesToBase64 = (view) => Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString('base64');
  context.__base64ToBytes = vm.runInContext(
    '(decode, check) => (text) => { if (!check(text)) return undefined; const b = decode(text); const copy = new ArrayBuffer(b.length); new Uint8Array(copy).set(b); return copy; }',
    context,
  )((text) => Buffer.from(text, 'base64'), (text) => STANDARD_BASE64.test(text));
  if (testCase.poison) {
    // Every configurable global outside the reserved list records its reads.
    vm.runInContext(
      `(allowed, record) => {
        const names = Object.getOwnPropertyNames(globalThis);
        const describe = Object.getOwnPropertyDescriptor;
        const define = Object.defineProperty;
        for (const name of names) {
          const descriptor = describe(globalThis, name);
          if (allowed.has(name) || descriptor === undefined || !descriptor.configurable) continue;
          const original = globalThis[name];
          define(globalThis, name, { configurable: true, get() { record(name); return original; } });
        }
      }`,
      context,
    )(new Set(testCase.reserved), (name) => globalReads.push(name));
  }
  let outcome;
  try {
    const [run, stringify] = vm.runInContext(testCase.source, context);
    const result = await run;
    outcome = result === undefined ? {} : { result: JSON.parse(stringify(result)) };
  } catch (failure) {
    const isError = failure !== null && typeof failure === 'object' && typeof failure.message === 'string';
    outcome = { error: isError ? failure.message : String(failure) };
  }
  return { calls, outcome, globalReads };
}

(async () => {
  let input = '';
  for await (const chunk of process.stdin) input += chunk;
  const { cases } = JSON.parse(input);
  const results = {};
  for (const testCase of cases) results[testCase.name] = await runCase(testCase);
  process.stdout.write(JSON.stringify(results));
})();
