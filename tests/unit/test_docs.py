"""The docs against the code, so that the next contradiction a new user would meet fails a test instead:

- every ``launch.X`` module README.md and the guides in docs/ name exists (a renamed program leaves no stale command);
- every ``--section.option`` flag they name is an option of a run (a renamed or retired option leaves no stale flag);
- every relative link and anchor in README.md and docs/ (the lab included) leads somewhere;
- the guides carry no dates: dated results belong in docs/lab/ (docs/lab/README.md);
- every program's ``--help`` names the command to type (``usage: python -m launch.local ...``), not its file's path,
  and launch.actor's lists the two options it parses itself.

The option defaults in docs/configuration.md are written from the dataclasses by launch.tools.gendocs and checked by
tests/unit/test_config.py::test_generated_pages_are_current_and_list_every_option.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import signal
from pathlib import Path

import pytest

from launch.cli import run_config_type
from shared.envs import BUILTIN

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GUIDES = [ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md") if p.name != "CHANGELOG.md"), *sorted(DOCS.glob("envs/*.md"))]
"""The pages that describe the current state (the changelog names old names on purpose; docs/lab/ is dated)."""
MARIO_LOG = DOCS / "lab" / "experiments" / "mario.md"


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def current_texts() -> dict[str, str]:
    """The text a reader takes as today's instructions: the guides, the lab's README and the Mario log's protocol part
    (before its dated results, whose commands are as they ran at their commit)."""
    texts = {rel(p): p.read_text(encoding="utf-8") for p in [*GUIDES, DOCS / "lab" / "README.md"]}
    texts[rel(MARIO_LOG)] = MARIO_LOG.read_text(encoding="utf-8").split("\n## Results", 1)[0]
    return texts


MODULE = re.compile(r"(?<![\w./-])launch(?:\.[a-z_][a-z0-9_]*)+")


def module_exists(dotted: str) -> bool:
    """Whether ``dotted`` (``launch.tools.report``, ``launch.local.resumed_config``) starts with a module of this tree."""
    parts = dotted.split(".")
    path = ROOT / parts[0]
    for part in parts[1:]:
        if (path / f"{part}.py").is_file():
            return True  # a module: what follows it is an attribute
        if not (path / part / "__init__.py").is_file():
            return False
        path = path / part
    return True  # a package


def test_module_exists_tells_modules_packages_and_attributes_from_stale_names():
    assert module_exists("launch.tools.report") and module_exists("launch.benchmark") and module_exists("launch.local.main")
    assert not module_exists("launch.report") and not module_exists("launch.tools.nothing")
    assert MODULE.findall("run `python -m launch.tools.report runs/` or launch.local. Not test_launch.py") == [
        "launch.tools.report",
        "launch.local",
    ]


def test_every_launch_module_the_docs_name_exists():
    stale = [
        f"{name}:{text[: m.start()].count(chr(10)) + 1}: {m.group(0)}"
        for name, text in current_texts().items()
        for m in MODULE.finditer(text)
        if not module_exists(m.group(0))
    ]
    assert not stale, f"modules that do not exist (renamed? launch.report is launch.tools.report): {stale}"


def run_flags() -> set[str]:
    """Every flag of a run (launch.local's), booleans with their --no- form, without the leading dashes."""

    def walk(kind: type, prefix: str = ""):
        for f in dataclasses.fields(kind):
            if f.name == "options":  # each env's options: the fields beside it
                continue
            factory = f.default_factory if f.default_factory is not dataclasses.MISSING else None
            if factory is not None and dataclasses.is_dataclass(factory):
                yield from walk(factory, prefix + f.name + ".")
                continue
            yield prefix + f.name.replace("_", "-")
            if isinstance(f.default, bool):
                yield prefix + "no-" + f.name.replace("_", "-")

    return set(walk(run_config_type()))


DOTTED_FLAG = re.compile(r"(?<![\w-])--(?:run\.)?([a-z][a-z0-9_-]*(?:\.[a-z0-9_-]+)+)")


def test_every_dotted_flag_the_docs_name_is_an_option():
    known = run_flags()
    sections = {name.split(".")[0] for name in known if "." in name}
    assert {"actor", "learner", "transport", "env"} <= sections and "env.mario.stage" in known
    unknown = []
    for page in [*GUIDES, DOCS / "lab" / "README.md"]:  # the Mario log's head lists the retired options on purpose
        name, text = rel(page), page.read_text(encoding="utf-8")
        for m in DOTTED_FLAG.finditer(text):
            flag, after = m.group(1), text[m.end() : m.end() + 2]
            owner, *rest = flag.split(".")
            if after[:1] in ("*", "<") or after in (".*", ".<") or flag.endswith("-"):
                continue  # a family of options: --env.mario.*, --transport.curve-*
            if owner not in sections or (owner == "env" and len(rest) > 1 and rest[0] not in BUILTIN):
                continue  # another program's option, or a plug-in env's in an example
            if flag not in known:
                unknown.append(f"{name}:{text[: m.start()].count(chr(10)) + 1}: --{flag}")
    assert not unknown, f"options that do not exist (renamed or retired?): {unknown}"


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"#{1,6} (.*)", line)
        if heading:
            anchor = github_anchor(heading.group(1))
            found.add(anchor if anchor not in seen else f"{anchor}-{seen[anchor]}")
            seen[anchor] = seen.get(anchor, 0) + 1
    return found


LINK = re.compile(r"\]\(([^)\s]+)\)|<img src=\"([^\"]+)\"")


def test_every_relative_link_and_anchor_in_the_docs_leads_somewhere():
    assert github_anchor("Measured (2026-11-21, Intel Xeon, 2 cores)") == "measured-2026-11-21-intel-xeon-2-cores"
    broken = []
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for m in LINK.finditer(page.read_text(encoding="utf-8")):
            target = m.group(1) or m.group(2)
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            goal = (page.parent / path).resolve() if path else page
            if not goal.exists():
                broken.append(f"{rel(page)}: {target} (no such file)")
            elif anchor and goal.suffix == ".md" and anchor not in anchors(goal):
                broken.append(f"{rel(page)}: {target} (no such heading)")
    assert not broken, broken


DATE = re.compile(
    r"\b20\d\d-[01]\d-[0-3]\d\b|\b(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December) (?:\d{1,2}, )?20\d\d\b"
)


def test_the_guides_carry_no_dates():
    dated = []
    for page in GUIDES:
        text = re.sub(r"\]\([^)]*\)", "]()", page.read_text(encoding="utf-8"))  # a link may point at a dated heading
        dated += [f"{rel(page)}: {m.group(0)}" for m in DATE.finditer(text)]
    assert not dated, f"dated text belongs in docs/lab/ (link to it from the guide): {dated}"


def programs() -> list[str]:
    """Every program in launch/: a module with a ``__main__`` guard (``launch.benchmark.__main__`` is launch.benchmark)."""
    found = []
    for path in sorted((ROOT / "launch").rglob("*.py")):
        if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"):
            found.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


def test_the_programs_are_found():
    found = programs()
    assert {"launch.local", "launch.actor", "launch.tools.report", "launch.benchmark.__main__"} <= set(found), found


@pytest.mark.parametrize("module", programs())
def test_every_programs_help_names_its_command(module, monkeypatch, capsys):
    """``--help``'s usage line is the command to type: tyro left alone would print the path of the file run."""
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # the launchers take SIGINT and SIGTERM first thing
    monkeypatch.delenv("WARPPIPE_ARGS", raising=False)  # launch.learner and launch.actor read more flags from it
    program = importlib.import_module(module)
    entry = program.parse if module.endswith(".__main__") else program.main  # the benchmark parses, then runs main(bench)
    with pytest.raises(SystemExit) as stopped:
        entry(["--help"])
    assert stopped.value.code in (0, None)
    out = capsys.readouterr()
    usage = next((line for line in (out.out + out.err).splitlines() if line.startswith("usage:")), "")
    command = module.removesuffix(".__main__")
    assert usage.split()[:4] == ["usage:", "python", "-m", command], usage or out.out[:500]
    if command == "launch.actor":  # its own options, taken out before tyro parses the rest
        assert "--learner HOST:PORT" in out.out and "--actor-id INT" in out.out, out.out[:3000]
