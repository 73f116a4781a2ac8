"""HTTP edge: OpenAI-compatible routes, health and metrics, error rendering."""
