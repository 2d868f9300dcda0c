"""A client's file reached without being led elsewhere, read and edited in its own format
(JSON, JSONC, TOML, YAML), and where a path lies by identity."""
