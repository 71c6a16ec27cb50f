"""The README and docs/ stay true to the code: every relative link and anchor resolves, and every command line
they show parses as the CLI would parse it (keys, recipes, values), so the docs cannot drift from the CLI."""

import os
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a usage line's placeholders, given a value the CLI accepts, so that usage lines are parsed too
PLACEHOLDERS = {
    "NAME": "quickstart",
    "R": "quickstart",
    "PATH": "x.ckpt",
    "DIR": "x",
    "N": "2",
    "K": "8",
    "B": "32",
    "S": "8",
}
TEMPLATE = re.compile(r"\.\.\.|key=value|--lightning|\[fit\|")


def concrete(line: str) -> str:
    """A usage line as one concrete command: [optional] parts kept, the first of a|b, placeholders filled."""
    line = re.sub(r"\[([^\[\]]*=[^\[\]]*)\]", r"\1", line)  # [key=value] -> key=value
    line = re.sub(r"\[(--[\w-]+)\]", r"\1", line)  # [--probs] -> --probs
    line = re.sub(r"\[([a-z]+)\|[^\]]*\]", r"\1", line)  # [sweep|replicas|...] -> sweep
    line = re.sub(r"=([\w.,/-]+)(\|[\w.,/-]+)+", r"=\1", line)  # format=onnx|pt2 -> format=onnx
    return re.sub(r"=([A-Z]+)\b", lambda m: "=" + PLACEHOLDERS.get(m[1], m[1]), line)


def outside_fences(text: str):
    """(line, in a fenced code block) for each line."""
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        yield line, fence


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {
        slug(m[2])
        for line, fenced in outside_fences(path.read_text())
        if not fenced
        for m in [re.match(r"^(#+)\s+(.*)", line)]
        if m
    }


def links(path: Path):
    for line, fenced in outside_fences(path.read_text()):
        if not fenced:
            yield from LINK.findall(line)


def commands(path: Path) -> list[list[str]]:
    """Every `python -m xla_train ...` the page shows, as argv after `xla_train` (up to a shell operator)."""
    return commands_in(path.read_text())


def commands_in(text: str) -> list[list[str]]:
    found = []
    text = text.replace("\\\n", " ")
    for m in re.finditer(r"-m xla_train ([^`\"\n]*)", text):
        line = m.group(1).split("#", 1)[0]
        line = re.split(r"\s(?:&&|\||;|>)\s", line)[0].strip()
        if line and not TEMPLATE.search(line):
            found.append(shlex.split(concrete(line)))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    bad = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            bad.append(f"{target}: no {os.path.relpath(dest, ROOT)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {os.path.relpath(dest, ROOT)}")
    assert not bad, bad


def parse(argv: list[str]) -> None:
    """What the CLI does with argv before it runs anything: the subcommand, keys, recipe and values."""
    from xla_train.cli.main import split_argv

    if argv[0] == "bench":
        from xla_train.cli.bench import parse as parse_bench

        parse_bench(argv[1:])
        return
    command, pairs, flags = split_argv(argv)
    if command in ("fit", "validate", "test"):
        from xla_train.config.run_spec import RunSpec

        RunSpec.parse(command, pairs, flags).config()
    elif command in ("predict", "export", "devices"):
        import importlib

        importlib.import_module(f"xla_train.cli.{command}").parse(pairs, flags)  # keys and their types


def test_every_command_line_in_the_docs_parses(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # ckpt= paths and runs_dir= are only parsed, never opened
    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # the docs' PYTHONPATH=examples: my_nets.py
    shown = [(page.name, argv) for page in PAGES for argv in commands(page) if argv and argv[0] != "import"]
    shown = [(p, a) for p, a in shown if not a[0].startswith("-")]
    assert len(shown) >= 20, shown  # the docs show that many concrete commands; a broken extractor finds none
    failed = []
    for page, argv in shown:
        try:
            parse(argv)
        except Exception as e:  # noqa: BLE001 - every failure is reported with its line
            failed.append(f"{page}: python -m xla_train {shlex.join(argv)}: {type(e).__name__}: {e}")
    assert not failed, "\n".join(failed)


def test_a_bad_key_or_a_broken_link_would_fail(tmp_path):
    """The checks above can fail: a misspelt key does not parse, and a link to a missing heading is caught."""
    with pytest.raises(Exception, match="unknown key"):
        parse(["recipe=quickstart", "epochz=1"])
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[there](#nowhere) [here](#title)\n")
    assert [t for t in links(page) if t[1:] not in anchors(page)] == ["#nowhere"]


RESULTS = ROOT / "docs" / "results"
WHERE_ONLY = ("runs_dir=", "timeout=")  # where a run wrote and how long a cell could take: not what it measured
SAME_CELLS = ("recipe", "accelerators", "accelerator", "runtimes")  # what a bench measured


def recorded(name: str) -> str:
    lines = (RESULTS / name).read_text().splitlines()
    return next((line[11:] for line in lines if line.startswith("# command: ")), "")


def shown_as(argv: list[str]) -> tuple[tuple, dict[str, str]]:
    """(what a command runs: its words and the cells it measures, with the keys it sets; its settings)."""
    settings = dict(a.split("=", 1) for a in argv if "=" in a and not a.startswith(WHERE_ONLY))
    words = tuple(a for a in argv if "=" not in a)
    return (words, tuple(settings.get(k) for k in SAME_CELLS), frozenset(settings)), settings


def test_a_command_shown_for_a_csvs_cells_is_the_command_that_csv_records():
    """A page that shows a command of the cells a CSV measured, with the keys its command set, shows the values
    that command set: results.md's runtimes section once showed rounds=2 beside figures of a run of 3. Settings that only
    say where a run wrote (runs_dir=, timeout=) are left out on both sides."""
    csvs = {p.name: shown_as(argv) for p in sorted(RESULTS.glob("*.csv")) for argv in commands_in(recorded(p.name))}
    assert len(csvs) >= 20, csvs  # the CSVs record that many bench commands; a broken reader finds none
    differ = []
    for page in PAGES:
        for argv in commands(page):
            what, settings = shown_as(argv)
            same = {name: s for name, (w, s) in csvs.items() if w == what}
            if same and settings not in same.values():
                differ += [f"{page.name}: {shlex.join(argv)} where {name} records {s}" for name, s in same.items()]
    assert not differ, "\n".join(differ)


# A clause that says JAX has not run on a GPU: a negation, JAX and "on a GPU" within one clause, in either order.
NO_JAX_GPU = re.compile(
    r"\b(?:never|not|nor|no)\b[^.;:()]*?\bJAX\b[^.;:()]*?\bon (?:an? |the )?GPUs?\b"
    r"|\bJAX\b[^.;:()]*?\b(?:never|not|nor|no)\b[^.;:()]*?\bon (?:an? |the )?GPUs?\b"
)


def test_no_page_says_jax_has_not_run_on_a_gpu_where_a_csv_measured_it_there():
    """docs/hardware.md once said "nor JAX on a GPU" beside results.md's H200 runs. While a CSV's hardware line says
    JAX was measured on a GPU (`measured on: JAX GPU (NAME)`), no page says otherwise."""
    gpus = {
        m[1] for p in RESULTS.glob("*.csv") for m in re.finditer(r"measured on: JAX GPU \(([^)]+)\)", p.read_text())
    }
    assert gpus, "no CSV records JAX on a GPU"
    assert NO_JAX_GPU.search("Neither runtime has been run on a TPU here, nor JAX on a GPU")  # the check can fail
    said = [f"{p.name}: {m[0]}" for p in PAGES for m in NO_JAX_GPU.finditer(" ".join(p.read_text().split()))]
    assert not said, f"JAX was measured on {sorted(gpus)}, but: {said}"
