"""README.md runs as written: every fenced python and shell block and every inline command, in a fresh directory.

The harness reads whatever README.md says today and names no command itself, so the README cannot rot while the CLI
changes under it. Its rules:

- **Where**: all items run in README order in one fresh directory that looks like a checkout (the repository's
  top-level entries linked in, gitignored outputs such as ``parasim_out/`` and ``runs/`` left out). Relative paths of
  the checkout (``.``, ``benchmarks/``) resolve, outputs land in the fresh directory, and later items read what earlier
  ones wrote (``simulate-log -o calls.jsonl`` before ``calibrate calls.jsonl``).
- **Fenced blocks**: ```` ```python ```` runs as a script with this venv's python; ```` ```bash ```` (``sh``,
  ``shell``) runs each command (backslash continuations joined) with bash; ```` ``` ```` or ```` ```text ```` is not
  code. Any other language fails until the README or this file classifies it.
- **Inline code**: in a table column headed "you run", a command runs with bash and python code runs after ``import
  gymnasium as gym`` and ``import parasim`` (the context the table names). A span that does not parse as python or
  is an expression that calls nothing (``mono``, ``torchrun``, ``POST /retrieve``) is a name, not code; python code
  must call or import something: a fragment like ``pool="x.json"`` runs nothing and fails. In prose only commands
  run.
- **A command** starts with a launcher (``parasim``, ``python``, ``pip``, ``pytest``, ``bash``, ...) or an executable
  of the checkout and has two arguments or an option; ``parasim calibrate``, ``torchrun`` or ``.ci/run`` only name one.
- **Installs**: ``pip install SPEC... && CMD`` checks the install with ``pip install --dry-run --no-deps
  --ignore-installed SPEC...`` (the specs resolve and the package's metadata builds), then runs CMD in this venv: a
  real install would replace the shared one and take minutes.
- **The suite's own command** (``pytest`` or ``python -m pytest`` on nothing but ``tests/``) is not run from inside
  the suite, which it would run again; instead ``.ci/run`` must run it verbatim.
- **Markers**, HTML comments that GitHub does not show, on the line before a fenced block or just before an inline
  span: ``<!-- readme-test: skip (REASON) -->`` for what cannot run here by nature (GPUs, checkpoints, network beyond
  PyPI, a server that runs until stopped), ``<!-- readme-test: needs EXE (REASON) -->`` to skip where EXE is not on
  PATH. Every marker names its reason; skips show with it in pytest's ``-ra`` summary. A command sent to the
  background (``&``, a server) fails until it is marked.
- **Slow** (``pytest.mark.slow``): ``parasim sweep`` and ``parasim train`` runs and pytest runs of other folders
  (benchmarks), minutes each, some twenty in all; with a listing flag (``--list-options``, ``--help``, ...) they are
  fast. They run with ``PARASIM_README_SLOW=1`` and are skipped, with that reason, otherwise, so that the suite stays
  within its time budget (the same code paths run at test sizes in test_sweep, test_grpo and the benchmarks' own
  collection).
- **Chains**: an item whose input file is missing is skipped, naming it, when an earlier item that names that path did
  not run (a README skip, or deselected, e.g. by ``-m "not slow"``); otherwise a missing input is a README failure,
  and a failure names the earlier items that failed.
"""
from __future__ import annotations

import ast
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PYTHON_LANGS = {"python", "py"}
SHELL_LANGS = {"bash", "sh", "shell"}
TEXT_LANGS = {"", "text", "txt"}
LAUNCHERS = {"parasim", "python", "python3", "pip", "pip3", "pytest", "bash", "sh", "torchrun"}
TABLE_RUN_COLUMN = "you run"
TABLE_PREAMBLE = "import gymnasium as gym\nimport parasim  # noqa: F401\n"
LISTING_FLAGS = {"--list-options", "--print-config", "--help", "-h", "--version"}
DATA_SUFFIXES = {".json", ".jsonl", ".parquet", ".csv", ".md", ".yaml", ".yml", ".toml", ".png", ".txt", ".py",
                 ".sh", ".pt", ".safetensors"}
TIMEOUT_S, SLOW_TIMEOUT_S = 600, 3600  # hang guards only

FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(.*)$")
MARKER = re.compile(r"<!--\s*readme-test:(.*?)-->", re.DOTALL)
MARKER_BODY = re.compile(r"\s*(skip|needs\s+(\S+))\s*\((.*\S.*)\)\s*$", re.DOTALL)
SPAN_OR_MARKER = re.compile(r"(<!--.*?-->)|(`+)(.+?)\2", re.DOTALL)
INSTALL = re.compile(r"^\s*(?:pip3?|python3?\s+-m\s+pip)\s+install\s+(.*)$", re.DOTALL)


@dataclass(frozen=True)
class Item:
    """One runnable thing of the README: a python program or a shell command, with where it came from."""

    index: int
    line: int
    kind: str  # "python" or "shell"
    code: str
    where: str  # "fenced", "table" or "prose"
    skip: str | None = None  # the reason of a skip marker
    needs: tuple[str, str] | None = None  # (executable, reason) of a needs marker
    paths: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        """A test id: line, kind and the start of the code, so a failure names the README item."""
        head = re.sub(r"[^\w.=/-]+", "_", self.code.strip().splitlines()[0] if self.code.strip() else "")
        return f"L{self.line}-{self.where}-{self.kind}-{head[:48]}"


@dataclass(frozen=True)
class Marker:
    """A parsed ``readme-test`` comment: ``skip`` (``exe`` is None) or ``needs EXE``, with its reason."""

    line: int
    exe: str | None
    reason: str


# ------------------------------------------------------------------------------------------------ parsing
def _marker(body: str, line: int, problems: list[str]) -> Marker | None:
    match = MARKER_BODY.match(body)
    if not match:
        problems.append(f"README line {line}: marker 'readme-test:{body}' must be 'skip (REASON)' or "
                        "'needs EXE (REASON)' with a non-empty reason")
        return None
    return Marker(line, match.group(2), " ".join(match.group(3).split()))


def _tokens(text: str) -> list[str] | None:
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return None


def is_command(text: str, root: Path = ROOT) -> bool:
    """A launcher or a checkout executable, then two arguments or an option: a command, not a command's name."""
    tokens = _tokens(text)
    if not tokens:
        return False
    first, args = tokens[0], tokens[1:]
    launcher = first in LAUNCHERS or ("/" in first and (root / first).is_file())
    return launcher and (len(args) >= 2 or any(a.startswith("-") for a in args))


def _is_python_code(span: str) -> bool:
    """Python that is more than a name: ``gym.make("X")`` or ``pool="x.json"``; not ``mono`` or ``POST /retrieve``
    (an expression that calls nothing)."""
    try:
        tree = ast.parse(span)
    except SyntaxError:
        return False
    calls = any(isinstance(n, ast.Call) for n in ast.walk(tree))
    return calls or not all(isinstance(statement, ast.Expr) for statement in tree.body)


def _path_like(token: str) -> bool:
    if token.startswith(("-", "/", "$")) or "=" in token or "://" in token or not re.fullmatch(r"[\w.\-/]+", token):
        return False
    return "/" in token or Path(token).suffix in DATA_SUFFIXES


def _paths(kind: str, code: str) -> tuple[str, ...]:
    if kind == "shell":
        found = [t.rstrip("/") for t in (_tokens(code) or []) if _path_like(t)]
    else:
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return ()
        found = [n.value.rstrip("/") for n in ast.walk(tree)
                 if isinstance(n, ast.Constant) and isinstance(n.value, str) and _path_like(n.value)]
    return tuple(dict.fromkeys(found))


def _shell_commands(body: list[str], first_line: int) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for offset, raw in enumerate(body):
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if not pending:
            start = first_line + offset
        part = raw.strip() if pending else raw.rstrip()
        if part.endswith("\\"):
            pending += part[:-1].rstrip() + " "
            continue
        out.append((start, (pending + part).strip()))
        pending = ""
    if pending:
        out.append((start, pending.strip()))
    return out


def _split_cells(row: str) -> list[str]:
    cells, current, ticks = [], "", 0
    body = row.strip().removeprefix("|").removesuffix("|")
    i = 0
    while i < len(body):
        char = body[i]
        if char == "`":
            run = len(body[i:]) - len(body[i:].lstrip("`"))
            ticks = 0 if ticks == run else (run if ticks == 0 else ticks)
            current += body[i:i + run]
            i += run
            continue
        if char == "|" and not ticks and (i == 0 or body[i - 1] != "\\"):
            cells.append(current)
            current = ""
        else:
            current += char
        i += 1
    return [*cells, current]


class _Reader:
    """One pass over a README's lines: fenced blocks, tables and paragraphs, with the markers that precede them."""

    def __init__(self, text: str, root: Path) -> None:
        self.lines, self.root = text.splitlines(), root
        self.items: list[Item] = []
        self.problems: list[str] = []
        self.block_marker: Marker | None = None

    def add(self, line: int, kind: str, code: str, where: str, marker: Marker | None) -> None:
        skip = marker.reason if marker and not marker.exe else None
        needs = (marker.exe, marker.reason) if marker and marker.exe else None
        self.items.append(Item(len(self.items), line, kind, code, where, skip, needs, _paths(kind, code)))

    def inline(self, chunk: str, first_line: int, where: str) -> None:
        """The code spans of a paragraph or table cell; a marker applies to the span right after it."""
        marker: Marker | None = None
        for match in SPAN_OR_MARKER.finditer(chunk):
            line = first_line + chunk.count("\n", 0, match.start())
            if match.group(1):
                body = MARKER.fullmatch(match.group(1))
                if body:
                    if marker:
                        self.problems.append(f"README line {marker.line}: marker applies to no code span")
                    marker = _marker(body.group(1), line, self.problems)
                continue
            span = " ".join(match.group(3).split())
            if is_command(span, self.root):
                self.add(line, "shell", span, where, marker)
            elif where == "table" and _is_python_code(span):
                self.add(line, "python", span, where, marker)
            elif marker:
                self.problems.append(f"README line {marker.line}: marker applies to `{span}`, which is not a command")
            marker = None
        if marker:
            self.problems.append(f"README line {marker.line}: marker applies to no code span")

    def fence(self, i: int, ticks: str, info: str) -> int:
        """Read the fenced block opening at line index ``i``; returns the index after its closing fence."""
        lang = (info.split() or [""])[0].lower()
        end = next((j for j in range(i + 1, len(self.lines)) if self.lines[j].strip().startswith(ticks)
                    and not self.lines[j].strip().strip(ticks[0])), None)
        if end is None:
            self.problems.append(f"README line {i + 1}: fenced block is never closed")
            return len(self.lines)
        body, marker, self.block_marker = self.lines[i + 1:end], self.block_marker, None
        if lang in PYTHON_LANGS:
            self.add(i + 2, "python", "\n".join(body) + "\n", "fenced", marker)
        elif lang in SHELL_LANGS:
            for start, command in _shell_commands(body, i + 2):
                self.add(start, "shell", command, "fenced", marker)
        elif lang not in TEXT_LANGS:
            self.problems.append(f"README line {i + 1}: fenced block language {lang!r} is not one of "
                                 f"{sorted(PYTHON_LANGS | SHELL_LANGS | TEXT_LANGS)}")
        elif marker:
            self.problems.append(f"README line {marker.line}: marker applies to a block that is not code")
        return end + 1

    def table(self, i: int) -> int:
        """Read the table starting at line index ``i``; returns the index after it."""
        j = i
        while j < len(self.lines) and self.lines[j].lstrip().startswith("|"):
            j += 1
        header = [c.strip().lower() for c in _split_cells(self.lines[i])]
        column = header.index(TABLE_RUN_COLUMN) if TABLE_RUN_COLUMN in header else None
        for k in range(i + 1, j):
            cells = _split_cells(self.lines[k])
            if set("".join(cells).strip()) <= set("-: "):
                continue  # the separator row
            for c, cell in enumerate(cells):
                self.inline(cell, k + 1, "table" if c == column else "prose")
        return j

    def read(self) -> None:
        i, paragraph, para_start = 0, [], 0
        while i < len(self.lines):
            line = self.lines[i]
            fence, standalone = FENCE.match(line), MARKER.fullmatch(line.strip())
            if paragraph and (fence or standalone or not line.strip() or line.lstrip().startswith("|")):
                self.inline("\n".join(paragraph), para_start, "prose")
                paragraph = []
            if self.block_marker and line.strip() and not fence:
                self.problems.append(f"README line {self.block_marker.line}: marker is not followed by a fenced block")
                self.block_marker = None
            if standalone:
                self.block_marker = _marker(standalone.group(1), i + 1, self.problems)
                i += 1
            elif fence:
                i = self.fence(i, fence.group(1), fence.group(2))
            elif line.lstrip().startswith("|"):
                i = self.table(i)
            else:
                if line.strip() and not paragraph:
                    para_start = i + 1
                if line.strip():
                    paragraph.append(line)
                i += 1
        if paragraph:
            self.inline("\n".join(paragraph), para_start, "prose")
        if self.block_marker:
            self.problems.append(f"README line {self.block_marker.line}: marker is not followed by a fenced block")


def parse_readme(text: str, root: Path = ROOT) -> tuple[list[Item], list[str]]:
    """Every runnable item of a README in order, and the problems found (bad markers, unknown languages)."""
    reader = _Reader(text, root)
    reader.read()
    return reader.items, reader.problems


ITEMS, PROBLEMS = parse_readme(README.read_text(encoding="utf-8"))
_RAN: set[int] = set()  # items that ran here, in this session
_PASSED: set[int] = set()


# ------------------------------------------------------------------------------------------------ running
def _segments(command: str) -> list[str]:
    return [s.strip() for s in re.split(r"\s&&\s", command)]


def _is_suite(segment: str, workdir: Path) -> bool:
    tokens = _tokens(segment) or []
    if tokens[:1] == ["pytest"]:
        args = tokens[1:]
    elif tokens[:3] in (["python", "-m", "pytest"], ["python3", "-m", "pytest"]):
        args = tokens[3:]
    else:
        return False
    paths = [a for a in args if not a.startswith("-") and (workdir / a).exists()]
    return all(Path(p).parts[:1] == ("tests",) for p in paths)


def _is_slow(item: Item) -> bool:
    if item.kind != "shell":
        return False
    for segment in _segments(item.code):
        tokens = _tokens(segment) or []
        if tokens[:2] in (["parasim", "sweep"], ["parasim", "train"]) and not LISTING_FLAGS & set(tokens):
            return True
        if "pytest" in tokens[:3] and not _is_suite(segment, ROOT):
            return True
    return False


def _plan(command: str, workdir: Path) -> tuple[list[str], list[str]]:
    """The segments to run (installs turned into dry runs) and the suite segments to find in ``.ci/run``."""
    if "&" in (_tokens(command) or []):
        pytest.fail(f"`{command}` runs in the background (a server): mark it '<!-- readme-test: skip (REASON) -->'")
    run, suite = [], []
    for segment in _segments(command):
        install = INSTALL.match(segment)
        if install:
            run.append(f"{shlex.quote(sys.executable)} -m pip install --dry-run --no-deps --ignore-installed "
                       f"{install.group(1)}")
        elif re.search(r"\bpip3?\s+install\b", segment):
            pytest.fail(f"`{command}`: an install that is not the head of an '&&' segment cannot be checked safely")
        elif _is_suite(segment, workdir):
            suite.append(segment)
        else:
            run.append(segment)
    return run, suite


def _ci_commands() -> set[str]:
    ci = ROOT / ".ci" / "run"
    if not ci.is_file():
        return set()
    joined = ci.read_text(encoding="utf-8").replace("\\\n", " ")
    return {s for line in joined.splitlines() if not line.lstrip().startswith("#") for s in _segments(line)}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _tail(text: str, n: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _skip_if_upstream_missing(item: Item, workdir: Path) -> None:
    for path in item.paths:
        if (workdir / path).exists():
            continue
        for earlier in ITEMS[:item.index]:
            if earlier.index not in _RAN and any(path == q or Path(path).is_relative_to(q) for q in earlier.paths):
                pytest.skip(f"README line {item.line} needs {path}, named by README line {earlier.line} "
                            f"(`{earlier.code.strip()[:80]}`), which did not run here")


def _run(argv: list[str], item: Item, workdir: Path) -> None:
    timeout = SLOW_TIMEOUT_S if _is_slow(item) else TIMEOUT_S
    try:
        proc = subprocess.run(argv, cwd=workdir, env=_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"README line {item.line} ({item.where} {item.kind}) ran past the {timeout} s guard:\n{item.code}")
    if proc.returncode != 0:
        earlier = [f"line {e.line}" for e in ITEMS[:item.index] if e.index in _RAN - _PASSED]
        pytest.fail(f"README line {item.line} ({item.where} {item.kind}) exited {proc.returncode}:\n{item.code}\n"
                    f"--- stdout (tail)\n{_tail(proc.stdout)}\n--- stderr (tail)\n{_tail(proc.stderr)}"
                    + (f"\n(earlier README items that failed: {', '.join(earlier)})" if earlier else ""))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh directory that looks like a checkout: top-level entries linked, gitignored outputs left out."""
    ignore = ROOT / ".gitignore"
    patterns = [p.strip().rstrip("/") for p in (ignore.read_text().splitlines() if ignore.exists() else [])
                if p.strip() and not p.startswith(("#", "!")) and "/" not in p.strip().rstrip("/")]
    work = tmp_path_factory.mktemp("readme")
    for entry in ROOT.iterdir():
        if entry.name != ".git" and not any(fnmatch.fnmatch(entry.name, p) for p in patterns):
            (work / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return work


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the python items are written, outside the work directory so that it holds only what users would see."""
    return tmp_path_factory.mktemp("readme_scripts")


@pytest.mark.parametrize("item", [pytest.param(i, id=i.label, marks=[pytest.mark.slow] if _is_slow(i) else [])
                                  for i in ITEMS])
def test_readme_item(item: Item, workdir: Path, scripts: Path) -> None:
    if item.skip:
        pytest.skip(f"README line {item.line}: {item.skip}")
    if _is_slow(item) and not os.environ.get("PARASIM_README_SLOW"):
        pytest.skip(f"README line {item.line}: minutes-long run; PARASIM_README_SLOW=1 runs it")
    if item.needs and shutil.which(item.needs[0]) is None:
        pytest.skip(f"README line {item.line}: {item.needs[0]} is not on PATH ({item.needs[1]})")
    _skip_if_upstream_missing(item, workdir)
    _RAN.add(item.index)
    code = item.code
    if item.kind == "python" and item.where == "table":
        if not any(isinstance(n, (ast.Call, ast.Import, ast.ImportFrom)) for n in ast.walk(ast.parse(code))):
            pytest.fail(f"README line {item.line}: `{code}` calls nothing: a fragment, not code that runs")
        code = TABLE_PREAMBLE + code + "\n"
    if item.kind == "python":
        script = scripts / f"readme_L{item.line}_{item.index}.py"
        script.write_text(code, encoding="utf-8")
        _run([sys.executable, str(script)], item, workdir)
    else:
        run, suite = _plan(item.code, workdir)
        missing = [s for s in suite if s not in _ci_commands()]
        assert not missing, (f"README line {item.line}: {missing} runs the test suite, which cannot run from inside "
                             "itself, and .ci/run does not run it verbatim")
        if run:
            _run(["bash", "-o", "pipefail", "-c", " && ".join(run)], item, workdir)
    _PASSED.add(item.index)


# ------------------------------------------------------------------------------------------------ the harness
def test_readme_is_read_whole_and_every_marker_names_its_reason() -> None:
    """A marker without a reason, or one that applies to nothing, is a problem, never a silent skip."""
    assert not PROBLEMS, "\n".join(PROBLEMS)
    kinds = {(i.where, i.kind) for i in ITEMS}
    assert ("fenced", "python") in kinds and ("fenced", "shell") in kinds, kinds
    for item in ITEMS:  # what the README marks as not run here, shown with -s (each skip also shows under -ra)
        if item.skip or item.needs:
            why = item.skip or f"needs {item.needs[0]} ({item.needs[1]})"
            print(f"README line {item.line}: `{item.code.strip()[:70]}` -- {why}")


def test_parser_on_a_small_readme(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "run.sh").write_text("#!/bin/sh\n")
    text = """# demo
Run `parasim sweep --seeds 1`; `parasim calibrate` only names a command, `python` is a tool.

| you want | you run |
| --- | --- |
| an env | `gym.make("X")` after `import parasim` |
| GPUs | <!-- readme-test: skip (needs GPUs) -->`torchrun --nproc_per_node 8 train.py` |

<!-- readme-test: skip (needs GPUs) -->
```bash
torchrun --nproc_per_node 3 \\
  -m x --out runs/a   # trailing comment
```

```python
print(1)
```

```
a tree
```

<!-- readme-test: skip () -->
```rust
fn main() {}
```
"""
    items, problems = parse_readme(text, root=tmp_path)
    assert [(i.line, i.where, i.kind, i.skip) for i in items] == [
        (2, "prose", "shell", None), (6, "table", "python", None), (6, "table", "python", None),
        (7, "table", "shell", "needs GPUs"), (11, "fenced", "shell", "needs GPUs"), (16, "fenced", "python", None)]
    assert items[4].code == "torchrun --nproc_per_node 3 -m x --out runs/a   # trailing comment"
    assert items[4].paths == ("runs/a",) and items[3].paths == ("train.py",)
    assert len(problems) == 2 and "line 23" in problems[0] and "non-empty reason" in problems[0]
    assert "'rust'" in problems[1]
    assert is_command("scripts/run.sh --dry-run", tmp_path) and not is_command("scripts/run.sh", tmp_path)
    assert not is_command("scripts/absent.sh --dry-run", tmp_path)
