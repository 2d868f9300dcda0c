"""The trusted process: CLI, configuration, spawning and supervising servers, the endpoint."""

# The one place the version is written: the package metadata is made from it.
__version__ = "0.1.0"
