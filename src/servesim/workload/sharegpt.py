"""(input, output) length pairs from a ShareGPT-format file, as `vllm bench serve` reads it.

vLLM 0.32 `vllm/benchmarks/datasets.py` `ShareGPTDataset`: the file is one JSON list of
entries `{"conversations": [{"from": ..., "value": text}, ...], ...}`; entries without
`conversations` or with fewer than two messages are dropped; of the rest, the first
message's text is the prompt and the second's the completion (whatever their `from`: in
ShareGPT the human's question and the model's answer), each counted with the model's
tokenizer, special tokens included (`tokenizer(text).input_ids`); `is_valid_sequence`
then drops a pair whose prompt or completion is under 4 tokens, whose prompt is over 1024
or whose sum is over 2048. Other keys of an entry or a message (`id`, `model`, ...) are
ignored, as vLLM ignores them.

Token counts come from a local tokenizer.json (`synthetic.lengths_tokenizer`, read with the
`tokenizers` library) when the config names one, else ceil(characters / 4), the
approximation `servesim serve` uses without a tokenizer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from servesim.errors import ServesimError

KEY = "workload.synthetic.lengths_from"
CHARS_PER_TOKEN = 4
# vLLM 0.32 is_valid_sequence's defaults, which ShareGPTDataset.sample uses.
MIN_LENGTH = 4
MAX_PROMPT_LENGTH = 1024
MAX_TOTAL_LENGTH = 2048


def is_sharegpt(path: Path, fmt: str | None) -> bool:
    """`lengths_format: sharegpt`, or unset and the file opens a JSON list (no trace format does)."""
    if fmt is not None:
        return fmt == "sharegpt"
    try:
        with open(path, encoding="utf-8-sig") as fh:
            head = fh.read(4096).lstrip()
    except (OSError, UnicodeDecodeError):
        return False   # load_trace reports what is wrong with the file
    return head.startswith("[")


def sharegpt_lengths(path: Path, tokenizer_path: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """The kept (prompt, completion) token counts, in file order."""
    pairs = _text_pairs(path)
    count = _counter(tokenizer_path)
    inputs = count([p for p, _ in pairs])
    outputs = count([c for _, c in pairs])
    kept = [(i, o) for i, o in zip(inputs, outputs) if _valid(i, o)]
    if not kept:
        raise ServesimError(f"{KEY}: {path} holds no conversation vLLM's ShareGPT filters keep (prompt and "
                            f"completion of at least {MIN_LENGTH} tokens, prompt at most {MAX_PROMPT_LENGTH}, "
                            f"both at most {MAX_TOTAL_LENGTH})")
    arr = np.array(kept, dtype=np.int64)
    return arr[:, 0].copy(), arr[:, 1].copy()


def _valid(prompt: int, completion: int) -> bool:
    return (prompt >= MIN_LENGTH and completion >= MIN_LENGTH and prompt <= MAX_PROMPT_LENGTH
            and prompt + completion <= MAX_TOTAL_LENGTH)


def _text_pairs(path: Path) -> list[tuple[str, str]]:
    try:
        with open(path, encoding="utf-8-sig") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ServesimError(f"{KEY}: {path} does not exist") from None
    except IsADirectoryError:
        raise ServesimError(f"{KEY}: {path} is a folder, not a file") from None
    except UnicodeDecodeError:
        raise ServesimError(f"{KEY}: {path} is not UTF-8 text") from None
    except (json.JSONDecodeError, RecursionError) as err:
        where = f" (line {err.lineno})" if isinstance(err, json.JSONDecodeError) else ""
        raise ServesimError(f"{KEY}: {path} is not a ShareGPT JSON file{where}") from None
    if not isinstance(data, list):
        raise ServesimError(f"{KEY}: {path} is not a ShareGPT file: it holds a JSON {type(data).__name__}, "
                            "not a list of conversations")
    pairs = []
    for index, entry in enumerate(data):
        where = f"{KEY}: {path} entry {index}"
        if not isinstance(entry, dict):
            raise ServesimError(f"{where} is not a JSON object")
        messages = entry.get("conversations")
        if messages is None:
            continue
        if not isinstance(messages, list):
            raise ServesimError(f"{where}: conversations must be a list of messages")
        if len(messages) < 2:
            continue
        pairs.append((_text(messages[0], where, 0), _text(messages[1], where, 1)))
    return pairs


def _text(message: object, where: str, index: int) -> str:
    if not isinstance(message, dict) or not isinstance(message.get("value"), str):
        raise ServesimError(f"{where}: message {index} needs a text \"value\"")
    return message["value"]


def _counter(tokenizer_path: Path | None):
    """texts -> token counts: the tokenizer's (special tokens included), else ceil(chars / 4)."""
    if tokenizer_path is None:
        return lambda texts: [math.ceil(len(t) / CHARS_PER_TOKEN) for t in texts]
    from servesim.tokenizer_file import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_path, key="workload.synthetic.lengths_tokenizer")
    return lambda texts: [len(e.ids) for e in tokenizer.encode_batch(texts)] if texts else []
