"""Run inside the oracle's virtualenv: parse launch arguments with the engines' own parsers.

`python launch_parsers.py ARGV.json` reads {"vllm": [argv...], "sglang": [argv...]} (each argv
without the program's own words) and prints, per argv, each option given and the value the
engine's parser stored for it. vLLM 0.32.0: `make_arg_parser` (vllm/entrypoints/launchers/
cli_args.py), the parser `vllm serve` builds. SGLang 0.5.9: `ServerArgs.add_cli_args`; its
package imports optional modules (IPython, CUDA kernels) the parser never uses, stubbed here.
"""

from __future__ import annotations

import argparse
import json
import sys
from unittest import mock


def _vllm_parser():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    parser.add_argument("model_tag", nargs="?")
    return parser


def _sglang_parser():
    for _ in range(80):
        try:
            from sglang.srt.server_args import ServerArgs
            break
        except ModuleNotFoundError as err:
            for name in [m for m in sys.modules if m.startswith("sglang")]:
                del sys.modules[name]
            stub = mock.MagicMock(name=err.name)
            stub.__path__, stub.__spec__ = [], None
            sys.modules[err.name] = stub
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser


def _parsed(parser, argv: list[str]) -> dict:
    args = parser.parse_args(argv)   # an unknown option or a bad value exits 2 here
    out = {}
    for word in argv:
        if word.startswith("--"):
            value = getattr(args, parser._option_string_actions[word].dest)
            out[word] = value if isinstance(value, (bool, int, float, str, type(None))) else str(value)
    return out


def main() -> None:
    argvs = json.load(open(sys.argv[1]))
    result = {}
    for engine, make in (("vllm", _vllm_parser), ("sglang", _sglang_parser)):
        if argvs.get(engine):
            parser = make()
            result[engine] = [_parsed(parser, argv) for argv in argvs[engine]]
    print("PARSED " + json.dumps(result))


if __name__ == "__main__":
    main()
