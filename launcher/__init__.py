"""The trusted process: CLI, configuration, spawning and supervising servers, the endpoint."""
