// A host built on the TypeScript MCP SDK: connects, lists tools, calls a tool (`echo` by default),
// then waits (bounded) for N channel pushes. Prints one JSON line when it is ready for pushes, one
// when it is done.
//
//   node push_client.mjs <url> <expected pushes> <timeout ms> [bearer token] [tool] [tool args JSON]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, expectedArg, timeoutArg, token, toolName = "echo", toolArgs = '{"text": "from typescript"}'] =
  process.argv.slice(2);
const expected = Number(expectedArg);
const timeoutMs = Number(timeoutArg);

// The fleet pushes only to the names in ENTRABOT_PUSH_HOSTS, by default the channel bridge's push name
// (service/mcp/hosts.py BRIDGE_PUSH_CLIENT_NAME): this client stands in for a bridge run with --push.
const client = new Client({ name: "claude-code-channel-bridge", version: "ts-sdk-test" });
const pushes = [];
let allArrived;
const arrived = new Promise((resolve) => (allArrived = resolve));
client.fallbackNotificationHandler = async (notification) => {
  if (notification.method === "notifications/claude/channel") {
    pushes.push(notification.params);
    if (pushes.length >= expected) allArrived();
  }
};

const headers = token ? { Authorization: `Bearer ${token}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
await client.connect(transport);
const tools = await client.listTools();
const called = await client.callTool({ name: toolName, arguments: JSON.parse(toolArgs) });
console.log(
  JSON.stringify({
    event: "ready",
    sessionId: transport.sessionId,
    protocolVersion: transport.protocolVersion,
    tools: tools.tools.map((t) => t.name).sort(),
    echo: called.structuredContent,
    experimental: client.getServerCapabilities()?.experimental ?? {},
  }),
);

let timer;
const timedOut = new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs)));
await Promise.race([arrived, timedOut]);
clearTimeout(timer);
console.log(JSON.stringify({ event: "done", pushes }));
await transport.terminateSession();
await client.close();
