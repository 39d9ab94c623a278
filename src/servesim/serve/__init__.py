"""`servesim serve`: an OpenAI-compatible HTTP server answering at the simulated engine's pace.

Only settings.py (the config block) is imported by the core package; the server modules need
the `serve` extra (FastAPI, uvicorn, prometheus_client, tokenizers) and are imported lazily
by cli.py. docs/serve.md describes the server.
"""
