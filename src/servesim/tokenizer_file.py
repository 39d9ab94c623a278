"""A local tokenizer.json read with the `tokenizers` library (an optional dependency, imported
when a config names a tokenizer): `servesim serve`'s prompt counts and ShareGPT lengths."""

from __future__ import annotations

from pathlib import Path

from servesim.errors import ServesimError


def load_tokenizer(path: Path, key: str = "serve.tokenizer"):
    """A `tokenizers.Tokenizer` from a tokenizer.json, or from a folder holding one; errors name `key`."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        extra = "serve" if key.startswith("serve.") else "tokenizer"
        raise ServesimError(f"{key} needs the tokenizers library: pip install 'servesim[{extra}]'") from None

    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise ServesimError(f"{key}: {file} does not exist")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as err:   # the library raises a bare Exception for an unreadable file
        raise ServesimError(f"{key}: {file} is not a tokenizer.json the tokenizers "
                            f"library can read ({str(err).splitlines()[0]})") from None
