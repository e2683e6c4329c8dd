// A host built on the TypeScript MCP SDK that spawns a stdio server (the channel bridge), lists its
// tools, calls one, then waits (bounded) for N channel pushes. Prints one JSON line when it is ready
// for pushes, one when it is done. The server's environment is inherited.
//
//   node stdio_channel_client.mjs <expected pushes> <timeout ms> <tool> <tool args JSON> -- <command> [args...]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const argv = process.argv.slice(2);
const split = argv.indexOf("--");
const [expectedArg, timeoutArg, toolName, toolArgs] = argv.slice(0, split);
const [command, ...commandArgs] = argv.slice(split + 1);
const expected = Number(expectedArg);
const timeoutMs = Number(timeoutArg);

const client = new Client({ name: "claude-code", version: "ts-sdk-stdio-test" });
const pushes = [];
let allArrived;
const arrived = new Promise((resolve) => (allArrived = resolve));
client.fallbackNotificationHandler = async (notification) => {
  if (notification.method === "notifications/claude/channel") {
    pushes.push(notification.params);
    if (pushes.length >= expected) allArrived();
  }
};

const transport = new StdioClientTransport({ command, args: commandArgs, env: process.env, stderr: "inherit" });
await client.connect(transport);
const tools = await client.listTools();
const called = await client.callTool({ name: toolName, arguments: JSON.parse(toolArgs) });
console.log(
  JSON.stringify({
    event: "ready",
    server: client.getServerVersion()?.name ?? null,
    tools: tools.tools.map((t) => t.name).sort(),
    called: called.structuredContent ?? null,
    experimental: client.getServerCapabilities()?.experimental ?? {},
  }),
);

let timer;
const timedOut = new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs)));
await Promise.race([arrived, timedOut]);
clearTimeout(timer);
console.log(JSON.stringify({ event: "done", pushes }));
await client.close();
