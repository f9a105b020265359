// The official TypeScript SDK client (@modelcontextprotocol/sdk from npm) driving the tether
// gateway, for tests/mcp/test_typescript.py. Usage:
//   node ts_client.mjs stdio PYTHON CONFIG      (the gateway started over stdio)
//   node ts_client.mjs http URL TOKEN           (streamable HTTP, a bearer credential)
// It lists the tools, makes an allowed call, makes a call that asks for approval, then waits
// for a line on stdin (the approval was decided in another process) and sends that call
// again. Each step is one JSON line on stdout.
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const prefix = process.env.TETHER_NPM_PREFIX;
const require = createRequire(`${prefix}/package.json`);
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);
const { Client } = await load("@modelcontextprotocol/sdk/client/index.js");

const [mode, target, extra] = process.argv.slice(2);
let transport;
if (mode === "stdio") {
  const { StdioClientTransport } = await load("@modelcontextprotocol/sdk/client/stdio.js");
  transport = new StdioClientTransport({
    command: target,
    args: ["-m", "tether", "mcp", "serve", "--config", extra],
    env: process.env,
    stderr: "ignore",
  });
} else {
  const { StreamableHTTPClientTransport } = await load(
    "@modelcontextprotocol/sdk/client/streamableHttp.js",
  );
  transport = new StreamableHTTPClientTransport(new URL(target), {
    requestInit: { headers: { Authorization: `Bearer ${extra}` } },
  });
}
const say = (step, value) => process.stdout.write(JSON.stringify({ step, value }) + "\n");
const client = new Client({ name: "tether-ts-test", version: "1.0.0" });
await client.connect(transport);
const listed = await client.listTools();
say("list", listed.tools.map((t) => t.name));
say("read", await client.callTool({ name: "lookup", arguments: { tenant: "acme", key: "k" } }));
const write = { name: "save", arguments: { tenant: "acme", key: "k", value: "v" } };
say("asked", await client.callTool(write));
const lines = createInterface({ input: process.stdin });
for await (const _ of lines) break; // the approval is decided elsewhere
say("resent", await client.callTool(write));
await client.close();
process.exit(0);
