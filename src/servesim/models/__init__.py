"""Model catalogue: architectures described by their Hugging Face config.json fields."""

from servesim.models.catalog import ModelSpec, list_models, resolve_model

__all__ = ["ModelSpec", "list_models", "resolve_model"]
