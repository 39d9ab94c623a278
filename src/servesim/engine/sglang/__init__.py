"""SGLang's engine: its scheduler, and what servesim knows of SGLang (backend.py)."""
