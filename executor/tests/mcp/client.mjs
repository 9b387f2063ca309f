// A real MCP client, the official TypeScript SDK, driving a server for executor/tests/mcp_serve.rs.
//
// node client.mjs STEPS stdio COMMAND ARGS...   (starts the server as a child process)
// node client.mjs STEPS http URL                (streamable HTTP, one session)
//
// STEPS is a JSON array of {"list": true}, {"call": NAME, "arguments": {...}}, or
// {"together": [calls...], "staggerMs": N} (the calls sent at once, each N ms after the
// one before). After connecting, the script prints one JSON line with the server's
// identity, then one per step: what the SDK returned, or {"error": {"code", "message"}}
// for what it threw; for calls together, an array of those. A call with "abortAfterMs"
// is cancelled by the client after that long; a step with "delayMs" waits that long first.
//
// Cells: an argument "$cell" is the cell the last running answer named; a call with
// "untilSettled": true is made again until its answer is not running, and prints the array
// of its answers; a step with "session": "second" goes through a second client, in a
// session of its own (http only).
//
// Elicitation: when any step has "elicit", the client declares the elicitation capability
// and answers each elicitation request the server sends during a step with that step's
// "elicit" (an ElicitResult such as {"action": "accept"} or {"action": "decline",
// "content": {"reason": "..."}}); such a step prints {"answer": what it printed otherwise,
// "elicited": [the params of each elicitation request it got, but `_meta`]}. A step's answer stands
// until another step's replaces it (a run that yielded may ask between steps). Without
// any "elicit" the client declares no elicitation.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js'

const [stepsJson, kind, ...target] = process.argv.slice(2)
const steps = JSON.parse(stepsJson)
const print = (value) => process.stdout.write(JSON.stringify(value) + '\n')

const transport =
  kind === 'stdio'
    ? new StdioClientTransport({ command: target[0], args: target.slice(1), stderr: 'inherit' })
    : new StreamableHTTPClientTransport(new URL(target[0]))
const eliciting = steps.some((step) => step.elicit !== undefined)
const client = new Client(
  { name: 'codemode-mcp-serve-test', version: '1.0.0' },
  eliciting ? { capabilities: { elicitation: { form: {} } } } : {}
)
// The current step's answer to elicitation requests, and the requests it got.
let answering = null
let elicited = []
if (eliciting) {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    const { _meta, ...params } = request.params // rmcp's progress token, not the request's matter
    elicited.push(params)
    return answering ?? { action: 'cancel' }
  })
}
await client.connect(transport)
print({ server: client.getServerVersion(), instructions: client.getInstructions() })

let second = null
const secondClient = async () => {
  if (second === null) {
    second = new Client({ name: 'codemode-mcp-serve-test-second', version: '1.0.0' })
    await second.connect(new StreamableHTTPClientTransport(new URL(target[0])))
  }
  return second
}

let cell = null
const withCell = (args) =>
  args && Object.fromEntries(Object.entries(args).map(([key, value]) => [key, value === '$cell' ? cell : value]))
const noteCell = (answer) => {
  if (answer?.structuredContent?.status === 'running') cell = answer.structuredContent.cell
  return answer
}

const failure = (error) => ({ error: { code: error.code, message: error.message } })
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const callOnce = async (step) => {
  const options = {}
  if (step.abortAfterMs !== undefined) {
    const controller = new AbortController()
    setTimeout(() => controller.abort(new Error('aborted by the client')), step.abortAfterMs)
    options.signal = controller.signal
  }
  const through = step.session === 'second' ? await secondClient() : client
  const request = { name: step.call, arguments: withCell(step.arguments) }
  return noteCell(await through.callTool(request, undefined, options).catch(failure))
}
const callTool = async (step) => {
  if (!step.untilSettled) return callOnce(step)
  const answers = []
  do {
    answers.push(await callOnce(step))
  } while (answers.at(-1)?.structuredContent?.status === 'running' && answers.length < 1000)
  return answers
}

const run = async (step) => {
  if (step.list) return client.listTools().catch(failure)
  if (step.together) {
    return Promise.all(step.together.map((call, i) => sleep(i * (step.staggerMs ?? 0)).then(() => callTool(call))))
  }
  return callTool(step)
}

for (const step of steps) {
  await sleep(step.delayMs ?? 0)
  if (step.elicit === undefined) {
    print(await run(step))
  } else {
    answering = step.elicit
    elicited = []
    const answer = await run(step)
    print({ answer, elicited })
  }
}

if (kind === 'http') {
  // Ends the session on the server (DELETE), as a well-behaved client does.
  await transport.terminateSession()
}
await client.close()
if (second !== null) await second.close()
