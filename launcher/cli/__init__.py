"""The ironcurtain command: its entry point, the typer app, one module per command."""
