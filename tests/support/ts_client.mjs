// A client on the official TypeScript SDK (@modelcontextprotocol/client 2.x), for the tests:
//   node ts_client.mjs MODE stdio COMMAND [ARG...]     MODE: legacy, auto or a version to pin
//   node ts_client.mjs MODE http URL                    (the bearer token in $MCP_TOKEN)
// It calls each tool named in $MCP_CALLS (a JSON list of [name, arguments]) and prints one
// JSON line: the protocol version it speaks, each call's text and whether it is an error,
// and the questions it was asked. It approves ironcurtain's approvals ("approve") and answers
// a server's form with {"name": "Ada"} and a sampling request with the model's answer.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [mode, kind, ...target] = process.argv.slice(2);
const negotiation =
  mode === "legacy" || mode === "auto" ? { mode } : { mode: { pin: mode } };
const client = new Client(
  { name: "ts-test-client", version: "1.0.0" },
  {
    capabilities: { elicitation: { form: {} }, sampling: {} },
    versionNegotiation: negotiation,
  },
);
const asked = [];
client.setRequestHandler("elicitation/create", async (request) => {
  const message = request.params.message ?? "";
  asked.push(message);
  if (message.startsWith("ironcurtain:")) {
    return { action: "accept", content: { answer: "approve" } };
  }
  return { action: "accept", content: { name: "Ada" } };
});
client.setRequestHandler("sampling/createMessage", async () => {
  asked.push("sampling");
  return {
    role: "assistant",
    content: { type: "text", text: "the model's answer" },
    model: "recorded",
  };
});
const transport =
  kind === "stdio"
    ? new StdioClientTransport({ command: target[0], args: target.slice(1), env: process.env })
    : new StreamableHTTPClientTransport(new URL(target[0]), {
        requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } },
      });
await client.connect(transport);
const calls = [];
for (const [name, args] of JSON.parse(process.env.MCP_CALLS)) {
  const result = await client.callTool({ name, arguments: args });
  const text = (result.content ?? []).map((c) => c.text ?? "").join("\n");
  calls.push([Boolean(result.isError), text]);
}
const version = client.getNegotiatedProtocolVersion?.() ?? null;
process.stdout.write(JSON.stringify({ version, calls, asked }) + "\n");
await client.close();
