"""Helpers the test files share, imported as `tests.support.<module>`.

runs.py (small traces through the public API, and the `Run` a test reads; conftest.py's `run`
fixture wraps it), cli.py (`servesim ...` in a subprocess), scenarios.py (hypothesis strategies
for random workloads and settings), equivalence.py (fast engine against reference on one
config), offload.py (a small host-KV-tier scenario), bad_input_corpus.py (the bad-input corpus: `python -m tests.support.bad_input_corpus`)
and docs_examples.py (the docs' shown outputs: `python tests/test_docs_examples.py --update`).
"""
