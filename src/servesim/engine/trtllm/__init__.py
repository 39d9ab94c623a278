"""TensorRT-LLM's engine: its scheduler, and what servesim knows of TensorRT-LLM (backend.py)."""
