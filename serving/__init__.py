"""The gateway: OpenAI-compatible HTTP API, routing, metrics and the CLI."""
