"""Run the examples whose output README.md and docs/ show, and compare or refresh that output.

A shown output is tied to the command that prints it by an HTML comment (invisible on GitHub)
right before it, a YAML mapping:

    <!-- docs-example
    run: servesim run offload.yaml --out out/   # or a `$ servesim ...` first line in the block
    files: [offload.yaml]       # blocks of this page whose first line is `# offload.yaml`
    needs: [../shared/traces/mooncake/conversation_trace.jsonl]   # skipped when absent
    slow: true                  # over ~10 s: the slow suite
    env: {COLUMNS: "170"}       # extra environment (rich tables wrap at COLUMNS)
    update: excerpt             # excerpt (default) | head | full: what --update rewrites
    -->

before a fenced block (the printed lines), or `docs-table` before a markdown table whose rows
are runs (`rows: [{run: ...}, ...]`, one per body row, in order) and whose `columns` map a
header to the printed label its cell shows (`Mean TTFT (ms)`) or to `{json: key, scale: 100}`,
a `summary.json` key (the run's `--out DIR/summary.json`; dotted, with list indices).

Every command runs in a fresh scratch folder laid out like the repository root: `docs/`,
`benchmarks/` and `src/` are links into the checkout, the page's named blocks are written there,
and `../shared` is a link to the checkout's `../shared`, so paths read as the docs write them and
nothing is written into the checkout. `servesim` is this interpreter's `python -m servesim`.

A block passes when each of its lines (trailing spaces aside) appears in the output, in order;
`...` lines and other lines between are elided, so rows added to the printed table do not break
it. A line naming a wall time is compared up to its value. A table cell passes when its number
equals the run's figure at the cell's printed precision; cells without a number are not checked.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINKED = ("docs", "benchmarks", "src")
MARKER = re.compile(r"^<!-- docs-(example|table)\s*$")
NAMED_BLOCK = re.compile(r"^# ([\w./-]+\.(?:ya?ml|json|jsonl|csv))\b")
WALL = re.compile(r"(?i)(wall[^:]*:\s*)\S+")
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")
TIMEOUT_S = 900


@dataclass
class Example:
    """One shown output: a fenced block or a table, with the command(s) behind it."""

    page: Path
    kind: str                       # "example" or "table"
    spec: dict
    start: int                      # index of the first shown line in the page
    end: int                        # index past the last shown line
    lines: list[str]
    commands: list[list[str] | None] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{_rel(self.page)}:{self.start + 1}"

    @property
    def slow(self) -> bool:
        return bool(self.spec.get("slow", False))

    def missing_needs(self) -> list[str]:
        return [need for need in self.spec.get("needs", []) if not (REPO / need).exists()]


def _rel(page: Path) -> str:
    return page.relative_to(REPO).as_posix() if page.is_relative_to(REPO) else str(page)


def _fence_end(lines: list[str], i: int) -> int:
    """Index of the closing fence of the block opened at lines[i]."""
    j = i + 1
    while j < len(lines) and not lines[j].startswith("```"):
        j += 1
    if j == len(lines):
        raise ValueError(f"unclosed code block at line {i + 1}")
    return j


def named_blocks(lines: list[str]) -> dict[str, str]:
    """Fenced blocks whose first line is `# NAME.yaml ...`: the files a page's examples write."""
    files, i = {}, 0
    while i < len(lines):
        if lines[i].startswith("```"):
            j = _fence_end(lines, i)
            if j > i + 1 and (m := NAMED_BLOCK.match(lines[i + 1])):
                files[m.group(1)] = "\n".join(lines[i + 1:j]) + "\n"
            i = j
        i += 1
    return files


def _command_lines(body: list[str]) -> tuple[list[str] | None, int]:
    """A block's leading `$ cmd \\` lines: the command and how many lines it takes."""
    if not body or not body[0].startswith("$ "):
        return None, 0
    n, text = 0, ""
    while n < len(body):
        text += body[n].removeprefix("$ ").rstrip().removesuffix("\\") + " "
        n += 1
        if not body[n - 1].rstrip().endswith("\\"):
            break
    return shlex.split(text), n


def find_examples(page: Path) -> list[Example]:
    lines = page.read_text(encoding="utf-8").split("\n")
    found, i = [], 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            if lines[i].startswith("```"):
                i = _fence_end(lines, i)
            i += 1
            continue
        j = lines.index("-->", i)
        spec = yaml.safe_load("\n".join(lines[i + 1:j])) or {}
        k = j + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        where = f"{_rel(page)}:{i + 1}"
        if m.group(1) == "example":
            if not lines[k].startswith("```"):
                raise ValueError(f"{where}: a docs-example marker must precede a code block")
            end = _fence_end(lines, k)
            example = Example(page, "example", spec, k + 1, end, lines[k + 1:end])
            command, _ = _command_lines(example.lines)
            if (command is None) == (spec.get("run") is None):
                raise ValueError(f"{where}: give the command once, as `run:` or a `$ ` line")
            example.commands = [command or shlex.split(spec["run"])]
            i = end
        else:
            end = k
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            example = Example(page, "table", spec, k, end, lines[k:end])
            example.commands = [shlex.split(r["run"]) if r.get("run") else None for r in spec["rows"]]
            if len(example.commands) != end - k - 2:
                raise ValueError(f"{where}: {end - k - 2} table rows but {len(example.commands)} runs")
        found.append(example)
        i += 1
    return found


def all_examples() -> list[Example]:
    return [example for page in PAGES for example in find_examples(page)]


# --- running ---------------------------------------------------------------------------------

@dataclass
class Output:
    text: str
    summary: dict | None


def _scratch_root(base: Path, page_lines: list[str], names: list[str]) -> Path:
    root = base / "root"
    root.mkdir()
    for name in LINKED:
        (root / name).symlink_to(REPO / name)
    if SHARED.exists():
        (base / "shared").symlink_to(SHARED)
    files = named_blocks(page_lines)
    for name in names:
        if name not in files:
            raise ValueError(f"no block starting with `# {name}` on this page")
        (root / name).write_text(files[name], encoding="utf-8")
    return root


def run_command(example: Example, command: list[str]) -> Output:
    """Run one command in a fresh scratch root; its merged stdout and stderr, and summary.json."""
    if command[0] != "servesim":
        raise ValueError(f"{example.name}: only servesim commands run here, not {command[0]!r}")
    page_lines = example.page.read_text(encoding="utf-8").split("\n")
    with tempfile.TemporaryDirectory(prefix="servesim-docs-") as tmp:
        root = _scratch_root(Path(tmp), page_lines, example.spec.get("files", []))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "TERM": "dumb",
               "COLUMNS": "80", **{k: str(v) for k, v in example.spec.get("env", {}).items()}}
        proc = subprocess.run([sys.executable, "-m", "servesim", *command[1:]], cwd=root, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=TIMEOUT_S)
        if proc.returncode != 0:
            raise AssertionError(f"{example.name}: `{shlex.join(command)}` exited {proc.returncode}:\n"
                                 f"{proc.stdout[-3000:]}")
        summary = None
        if "--out" in command:
            path = root / command[command.index("--out") + 1] / "summary.json"
            if path.exists():
                summary = json.loads(path.read_text())
    return Output(proc.stdout, summary)


# --- comparing -------------------------------------------------------------------------------

def _norm(line: str) -> str:
    return WALL.sub(r"\1<wall>", line.rstrip())


def _key(line: str) -> str:
    """A line with its figures blanked: what identifies a printed row across runs."""
    return re.sub(r"\s+", " ", NUMBER.sub("#", _norm(line))).strip()


def _shown(example: Example) -> tuple[list[str], list[int]]:
    """The block lines a check compares, and their indices in the block (commands and ... out)."""
    _, skip = _command_lines(example.lines)
    keep = [i for i in range(skip, len(example.lines))
            if example.lines[i].strip() not in ("", "...", "…")]
    return [example.lines[i] for i in keep], keep


def block_mismatches(example: Example, output: str) -> list[str]:
    """Shown lines not found, in order, in the output (empty when the block is up to date)."""
    printed = [_norm(line) for line in output.split("\n")]
    problems, at = [], 0
    for line in _shown(example)[0]:
        want = _norm(line)
        hit = next((j for j in range(at, len(printed)) if printed[j] == want), None)
        if hit is None:
            near = next((p for p in printed[at:] if _key(p) == _key(line)), None)
            problems.append(f"shown:   {line.rstrip()}\n  printed: {near if near is not None else '(no such line)'}")
        else:
            at = hit + 1
    return problems


def updated_block(example: Example, output: str) -> list[str]:
    """The block's lines rewritten from the output, as its `update` mode says."""
    printed = [line.rstrip() for line in output.rstrip("\n").split("\n")]
    _, skip = _command_lines(example.lines)
    mode = example.spec.get("update", "excerpt")
    if mode == "full":
        return example.lines[:skip] + printed
    shown, where = _shown(example)
    new, at, last = list(example.lines), 0, -1
    for line, index in zip(shown, where):
        hit = next((j for j in range(at, len(printed)) if _key(printed[j]) == _key(line)), None)
        if hit is None:
            raise AssertionError(f"{example.name}: the output has no line like {line.rstrip()!r}")
        # A line equal up to its wall time (or trailing spaces) is left as written: no churn.
        keep = _norm(line) == _norm(printed[hit])
        new[index], at, last = (line if keep else printed[hit]), hit + 1, hit
    if mode == "head":
        tail = example.lines[where[-1] + 1:]
        return example.lines[:skip] + printed[:last + 1] + tail
    return new


def _figure(output: Output, column) -> str | None:
    """The printed figure (as text) or summary.json value a table column shows."""
    if isinstance(column, str):
        for line in output.text.split("\n"):
            if line.startswith(column + ":"):
                m = NUMBER.search(line[len(column) + 1:])
                return m.group(0) if m else None
        raise AssertionError(f"the output prints no {column!r} line")
    value = output.summary
    if value is None:
        raise AssertionError("a json column needs the run's --out DIR")
    for part in column["json"].split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return None if value is None else repr(value * column.get("scale", 1))


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _decimals(number: str) -> int:
    return len(number.split(".")[1]) if "." in number else 0


def _formatted(figure: str, like: str) -> str:
    """figure rounded to the precision of `like`, with thousands separators as `like` has."""
    value = float(figure.replace(",", ""))
    places = _decimals(like)
    sep = "," if "," in like or abs(value) >= 1000 and "," in figure else ""
    return f"{value:{sep}.{places}f}"


def table_rows(example: Example, outputs: list[Output | None]) -> tuple[list[str], list[str]]:
    """(the table's lines with checked cells rewritten from the outputs, the mismatches)."""
    header = _cells(example.lines[0])
    columns = example.spec["columns"]
    unknown = set(columns) - set(header)
    if unknown:
        raise ValueError(f"{example.name}: no table column {sorted(unknown)}")
    new, problems = list(example.lines), []
    for r, output in enumerate(outputs):
        if output is None:
            continue
        line_index = r + 2
        cells = _cells(example.lines[line_index])
        for name, column in columns.items():
            c = header.index(name)
            m = NUMBER.search(cells[c])
            if m is None:
                continue
            figure = _figure(output, column)
            want = _formatted(figure, m.group(0)) if figure is not None else "(none)"
            if want.replace(",", "") != m.group(0).replace(",", ""):
                problems.append(f"row {r + 1} `{name}`: shown {m.group(0)}, now {want}")
                cells[c] = cells[c][:m.start()] + want + cells[c][m.end():]
                new[line_index] = "| " + " | ".join(cells) + " |"
    return new, problems


def check(example: Example) -> tuple[list[str], list[str]]:
    """Run an example: (its shown lines as they would be now, the mismatches)."""
    if example.kind == "example":
        output = run_command(example, example.commands[0]).text
        problems = block_mismatches(example, output)
        try:
            return updated_block(example, output), problems
        except AssertionError as exc:           # a shown line the output no longer has
            return example.lines, problems or [str(exc)]
    outputs = [run_command(example, cmd) if cmd else None for cmd in example.commands]
    return table_rows(example, outputs)


def update(pages_filter: list[str], include_slow: bool = True) -> int:
    """Rewrite every stale shown output in place; returns how many examples changed."""
    changed = 0
    for page in PAGES:
        if pages_filter and not any(_rel(page).startswith(p) for p in pages_filter):
            continue
        # Bottom-up, so earlier examples' line numbers stay valid while later ones change.
        for example in reversed(find_examples(page)):
            if (example.slow and not include_slow) or example.missing_needs():
                print(f"skipped {example.name}", file=sys.stderr)
                continue
            try:
                new, problems = check(example)
            except (AssertionError, subprocess.TimeoutExpired) as exc:
                print(f"{example.name}: FAILED, left as it is: {str(exc)[-800:]}", file=sys.stderr)
                continue
            print(f"{example.name}: {'updated' if new != example.lines else 'up to date'}", file=sys.stderr)
            for problem in problems:
                print("  " + problem.replace("\n", "\n  "), file=sys.stderr)
            if new != example.lines:
                lines = page.read_text(encoding="utf-8").split("\n")
                lines[example.start:example.end] = new
                page.write_text("\n".join(lines), encoding="utf-8")
                changed += 1
    return changed
