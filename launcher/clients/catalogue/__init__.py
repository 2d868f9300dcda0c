"""The MCP clients ironcurtain knows (where each keeps its servers, in which format and
entry shape, how it fills variables, what it reads that ironcurtain does not), and which of
them are configured on this machine, with what each entry starts."""
