// A file-resource MCP server on the official TypeScript SDK (McpServer, whose
// resources/read parses the URI with the WHATWG URL parser): file:///{+path} is the file's
// text. TS_SDK names the SDK's directory (the filesystem server's own, as installed).
import { readFile } from "node:fs/promises";

const sdk = process.env.TS_SDK;
const { McpServer, ResourceTemplate } = await import(`${sdk}/dist/esm/server/mcp.js`);
const { StdioServerTransport } = await import(`${sdk}/dist/esm/server/stdio.js`);

const server = new McpServer({ name: "files", version: "1.0.0" });
server.registerResource(
  "file",
  new ResourceTemplate("file:///{+path}", { list: undefined }),
  { description: "a file by its path" },
  async (uri) => ({ contents: [{ uri: uri.href, text: await readFile(uri.pathname, "utf8") }] }),
);
// A tool too, as the probe's policy annotates one (a server is started with its tools).
server.registerTool("linger", { description: "does nothing" }, async () => ({
  content: [{ type: "text", text: "done" }],
}));
await server.connect(new StdioServerTransport());
