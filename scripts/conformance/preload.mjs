// Loaded into the conformance CLI (NODE_OPTIONS=--import): every request it makes to
// $CONFORMANCE_URL carries "Authorization: Bearer $CONFORMANCE_TOKEN", as a client entry for
// `ironcurtain run --http` does. The CLI has no option for headers of its own: it sends with
// the global fetch, with undici's request where it sets its own Host header (resolved from
// $CONFORMANCE_CLI, the CLI's own file, so the same module instance is patched), and with
// node:http's request where it sends headers fetch would not (malformed MCP-* headers).
import http from "node:http";
import { createRequire } from "node:module";

const url = process.env.CONFORMANCE_URL;
const token = process.env.CONFORMANCE_TOKEN;

function ours(target) {
  const text = typeof target === "string" ? target : target instanceof URL ? target.href : target?.url;
  return Boolean(url && token && typeof text === "string" && text.startsWith(url));
}

const fetched = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  if (!ours(input)) {
    return fetched(input, init);
  }
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  headers.set("authorization", `Bearer ${token}`);
  return fetched(input, { ...init, headers });
};

if (process.env.CONFORMANCE_CLI) {
  const undici = createRequire(process.env.CONFORMANCE_CLI)("undici");
  const requested = undici.request;
  undici.request = (target, options = {}) => {
    if (!ours(target)) {
      return requested(target, options);
    }
    const headers = { ...(options.headers ?? {}), authorization: `Bearer ${token}` };
    return requested(target, { ...options, headers });
  };
}

const posted = http.request;
http.request = (options, ...rest) => {
  const target =
    options && typeof options === "object" && !(options instanceof URL)
      ? `http://${options.hostname ?? options.host}:${options.port}${options.path ?? "/"}`
      : options;
  if (!ours(target)) {
    return posted(options, ...rest);
  }
  const headers = { ...(options.headers ?? {}), authorization: `Bearer ${token}` };
  return posted({ ...options, headers }, ...rest);
};
