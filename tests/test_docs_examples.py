"""Every output README.md and docs/ show is what its command prints now (tests/support/docs_examples.py).

`python tests/test_docs_examples.py --update [PAGE ...]` reruns the examples (slow ones too;
`--fast` leaves them out) and rewrites each stale shown output in place; read the diff, and the
prose around it, before committing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository root, when run as a script
from tests.support import docs_examples as dx  # noqa: E402

EXAMPLES = dx.all_examples()


def _param(example: dx.Example):
    marks = [pytest.mark.slow] if example.slow else []
    return pytest.param(example, id=example.name, marks=marks)


@pytest.mark.parametrize("example", [_param(e) for e in EXAMPLES])
def test_shown_output_is_what_the_command_prints(example):
    missing = example.missing_needs()
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    _, problems = dx.check(example)
    assert not problems, (f"{example.name} is stale; rerun `python tests/test_docs_examples.py --update`:\n"
                          + "\n".join(problems))


def test_every_shown_output_is_tied_to_its_command():
    # The pages that show printed results; each such block or table carries a marker.
    pages = {e.page.relative_to(dx.REPO).as_posix() for e in EXAMPLES}
    assert {"README.md", "docs/modeling/kv_offload.md", "docs/modeling/speculative.md",
            "docs/modeling/trtllm.md", "docs/modeling/sglang.md"} <= pages
    starts = {(e.page, e.start) for e in EXAMPLES}
    for page in dx.PAGES:
        lines = page.read_text(encoding="utf-8").split("\n")
        for i, line in enumerate(lines):
            # A line ending "prints:" or "printed (excerpt):" introduces shown output.
            if re.search(r"print(s|ed)( \(.*\))?:$", line.rstrip()):
                fence = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
                assert (page, fence + 1) in starts, f"{page}:{i + 1} shows output without a docs-example marker"

def test_matching_ignores_added_rows_wall_times_and_elisions():
    example = dx.Example(dx.REPO / "README.md", "example", {}, 0, 0, [
        "Successful requests:   2,000", "...", "Mean TTFT (ms):   62.27", "Simulator wall time (s):  0.331"])
    printed = ("Successful requests:   2,000\nGPUs:   1\nMean TTFT (ms):   62.27   \n"
               "Simulator wall time (s):  9.999\n")
    assert dx.block_mismatches(example, printed) == []
    stale = printed.replace("62.27", "89.64")
    assert dx.block_mismatches(example, stale) == [
        "shown:   Mean TTFT (ms):   62.27\n  printed: Mean TTFT (ms):   89.64"]
    # Order matters: a line shown before another must be printed before it.
    swapped = "Mean TTFT (ms):   62.27\nSuccessful requests:   2,000\n"
    assert len(dx.block_mismatches(example, swapped)) == 2
    assert dx.updated_block(example, stale)[2:] == ["Mean TTFT (ms):   89.64", "Simulator wall time (s):  0.331"]


def test_table_cells_compare_at_their_printed_precision():
    example = dx.Example(dx.REPO / "README.md", "table", {"columns": {"TTFT": "Mean TTFT (ms)"}}, 0, 0,
                         ["| run | TTFT |", "| --- | --- |", "| a | 4,399.2 |", "| b | — |"])
    out = dx.Output("Mean TTFT (ms):    4,399.16\n", None)
    assert dx.table_rows(example, [out, out]) == (example.lines, [])   # 4,399.16 shown as 4,399.2
    new, problems = dx.table_rows(example, [dx.Output("Mean TTFT (ms):    7,182.41\n", None), None])
    assert problems == ["row 1 `TTFT`: shown 4,399.2, now 7,182.4"]
    assert new[2] == "| a | 7,182.4 |"


PAGE = """Some prose.

```yaml
# tiny.yaml, a config
model: llama-3.1-8b
```

<!-- docs-example
run: servesim run tiny.yaml
files: [tiny.yaml]
update: head
-->
```
Successful requests:   20
...
```

<!-- docs-example
slow: true
update: full
-->
```
$ servesim recommend --model m \\
    --gpu g
old line
```

<!-- docs-table
columns: {TTFT: Mean TTFT (ms)}
rows: [{run: servesim run a.yaml}, {}]
-->
| row | TTFT |
| --- | --- |
| a | 1.0 |
| b | 2.0 |
"""


def test_markers_name_commands_files_and_rows(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    run, rec, table = dx.find_examples(page)
    assert run.commands == [["servesim", "run", "tiny.yaml"]] and run.lines == ["Successful requests:   20", "..."]
    assert dx.named_blocks(page.read_text().split("\n")) == {"tiny.yaml": "# tiny.yaml, a config\nmodel: llama-3.1-8b\n"}
    assert rec.slow and rec.commands == [["servesim", "recommend", "--model", "m", "--gpu", "g"]]
    assert table.commands == [["servesim", "run", "a.yaml"], None] and table.lines[2] == "| a | 1.0 |"
    # head: the output down to the last shown line, then the elision; full: the whole output.
    assert dx.updated_block(run, "Title\nSuccessful requests:   30\nMore: 1\n") == [
        "Title", "Successful requests:   30", "..."]
    assert dx.updated_block(rec, "new\n") == ["$ servesim recommend --model m \\", "    --gpu g", "new"]


@pytest.mark.parametrize("marker, message", [
    ("<!-- docs-example\nrun: servesim run\n-->\nprose\n", "must precede a code block"),
    ("<!-- docs-example\n-->\n```\nout\n```\n", "give the command once"),
    ("<!-- docs-example\nrun: servesim run\n-->\n```\n$ servesim run\n```\n", "give the command once"),
    ("<!-- docs-table\ncolumns: {}\nrows: [{run: servesim run}]\n-->\n| a |\n| - |\n", "0 table rows but 1 runs"),
])
def test_bad_markers_are_refused(tmp_path, marker, message):
    page = tmp_path / "page.md"
    page.write_text(marker)
    with pytest.raises(ValueError, match=message):
        dx.find_examples(page)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--update" not in args:
        sys.exit("usage: python tests/test_docs_examples.py --update [--fast] [PAGE ...]")
    pages = [a for a in args if not a.startswith("--")]
    changed = dx.update(pages, include_slow="--fast" not in args)
    print(f"{changed} shown output(s) rewritten", file=sys.stderr)
