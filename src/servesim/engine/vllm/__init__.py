"""vLLM v1's engine: its scheduler (reference and fast), and what servesim knows of vLLM (backend.py)."""
