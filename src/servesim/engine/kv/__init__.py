"""The paged KV cache every backend uses: fast (cache.py), reference (reference_cache.py), host tier."""
