"""Write the documentation pages that are generated from the code, so they cannot drift from it.

    python -m launch.tools.gendocs            # rewrite them (make docs)
    python -m launch.tools.gendocs --check    # exit 1 when one is not current (what tests/unit/test_config.py checks)

- docs/configuration.md, "Configuration reference": one table per section of shared/config.py (an env's options: its
  module in shared/envs/), each field with the string under it, which ``--help`` prints.
- docs/protocol.md: the wire's contract, the docstring of shared/wire/protocol.py.
- docs/architecture.md, "Layout": every module of actors/, learner/, shared/ and launch/ (a package as its folder) with
  its docstring's first paragraph, between the two ``LAYOUT_*`` marker comments.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import re
import sys
import textwrap
from collections.abc import Callable
from typing import Any, cast

from launch.cli import UsageError, parse
from shared.config import EnvConfig, RunConfig
from shared.envs import BUILTIN, options_types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
PAGE = os.path.join(DOCS, "configuration.md")
PROTOCOL_PAGE = os.path.join(DOCS, "protocol.md")
LAYOUT_PAGE = os.path.join(DOCS, "architecture.md")
HEADING = "## Configuration reference"
PACKAGES = ("actors", "learner", "shared", "launch")  # the production code, in the table's order
LAYOUT_BEGIN = "<!-- layout: written by python -m launch.tools.gendocs from the module docstrings -->"
LAYOUT_END = "<!-- end of layout -->"


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the string literal written under it in the class body (what tyro prints for --help)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = cast(ast.ClassDef, tree.body[0]).body  # getsource(cls) parses to the one class statement
    docs = {}
    for node, after in zip(body, body[1:]):
        text = after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) else None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(text, str):
            docs[node.target.id] = " ".join(text.split()).replace("``", "`")
    return docs


def _default(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _rows(cls: type, prefix: str, tables: list[tuple[str, str, list[str]]]) -> None:
    docs, rows = field_docs(cls), []
    nested: list[tuple[Any, str]] = []  # (a nested dataclass, its flags' prefix)
    for f in dataclasses.fields(cls):
        if cls is EnvConfig and f.name == "options":  # each env's options: a table of its own, under its name
            nested += [(kind, f"{prefix}{name}.") for name, kind in options_types().items() if name in BUILTIN]  # no plug-in
            continue
        factory = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        if factory is not None and dataclasses.is_dataclass(factory):
            nested.append((factory, prefix + f.name + "."))
            continue
        flag = "--" + prefix + f.name.replace("_", "-")
        # every field has a default or a factory (RunConfig() builds with no arguments)
        default = f.default if f.default is not dataclasses.MISSING else cast(Callable[[], Any], factory)()
        if isinstance(default, bool):
            flag += f"` / `--{prefix}no-{f.name.replace('_', '-')}"
        text = docs.get(f.name, "").replace("|", "\\|")
        rows.append(f"| `{flag}` | {_default(default)} | {text} |")
    if rows:
        title = prefix.rstrip(".") or "run"
        tables.append((title, " ".join((cls.__doc__ or "").split()).replace("``", "`"), rows))
    for factory, sub in nested:
        _rows(factory, sub, tables)


def reference() -> str:
    """The section's body: one table per section of RunConfig (the run, then env, env.mario, ..., actor, ...)."""
    tables: list[tuple[str, str, list[str]]] = []
    _rows(RunConfig, "", tables)
    out = [
        "",
        "Every option is a dataclass field (shared/config.py; an env's own options in its module under",
        "shared/envs/); `--help` prints the same text. This section is written by `python -m launch.tools.gendocs`.",
        "",
    ]
    for title, doc, rows in tables:
        out += [f"### {title}", "", doc, "", "| option | default | meaning |", "|---|---|---|", *rows, ""]
    return "\n".join(out) + "\n"


def render(page: str) -> str:
    """``page`` with its configuration reference section replaced by :func:`reference`."""
    head, sep, rest = page.partition(HEADING)
    if not sep:
        raise ValueError(f"{PAGE} has no {HEADING!r} heading")
    tail = rest.split("\n## ", 1)
    return head + HEADING + "\n" + reference() + ("\n## " + tail[1] if len(tail) == 2 else "")


def protocol_page() -> str:
    """docs/protocol.md: shared/wire/protocol.py's docstring under a title, as Markdown."""
    from shared.wire import protocol

    return (
        "# Wire protocol\n\n*Written by `python -m launch.tools.gendocs` from the docstring of `shared/wire/protocol.py`; the "
        "versions are in [CHANGELOG.md](CHANGELOG.md).*\n\n" + textwrap.dedent(protocol.__doc__).strip() + "\n"
    )


def module_summaries() -> list[tuple[str, str]]:
    """(path, its docstring's first paragraph in one line) of every module of PACKAGES, a package as its folder."""
    rows: list[tuple[str, str]] = []
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in (f for f in files if f.endswith(".py")):
                with open(os.path.join(folder, name), encoding="utf-8") as fh:
                    doc = ast.get_docstring(ast.parse(fh.read())) or ""
                path = os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/").removesuffix("__init__.py")
                rows.append((path, " ".join(doc.split("\n\n")[0].split())))
    return sorted(rows, key=lambda row: (PACKAGES.index(row[0].split("/")[0]), row[0]))


def _markdown(text: str) -> str:
    """A docstring's reST roles and double backticks as Markdown code, its pipes escaped for a table cell."""
    return re.sub(r":[a-z]+:`~?", "`", text).replace("``", "`").replace("|", "\\|")


def render_layout(page: str) -> str:
    """``page`` with the table between LAYOUT_BEGIN and LAYOUT_END written anew from :func:`module_summaries`."""
    head, begin, rest = page.partition(LAYOUT_BEGIN)
    _, end, tail = rest.partition(LAYOUT_END)
    if not (begin and end):
        raise ValueError(f"{LAYOUT_PAGE} lacks the layout markers {LAYOUT_BEGIN!r} ... {LAYOUT_END!r}")
    rows = [f"| `{path}` | {_markdown(text)} |" for path, text in module_summaries()]
    return head + LAYOUT_BEGIN + "\n\n| module | what it holds |\n|---|---|\n" + "\n".join(rows) + "\n\n" + LAYOUT_END + tail


@dataclasses.dataclass
class GendocsArgs:
    check: bool = False
    """Write nothing; exit 1 when a generated page is not current (what tests/unit/test_config.py checks)."""


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(GendocsArgs, argv, "python -m launch.tools.gendocs", __doc__.split("\n\n")[0])
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    pages: dict[str, tuple[str, str]] = {}
    for path, rewrite in ((PAGE, render), (LAYOUT_PAGE, render_layout)):
        with open(path, encoding="utf-8") as fh:
            page = fh.read()
        pages[path] = (page, rewrite(page))
    old = open(PROTOCOL_PAGE, encoding="utf-8").read() if os.path.exists(PROTOCOL_PAGE) else ""
    pages[PROTOCOL_PAGE] = (old, protocol_page())
    stale = [path for path, (old, new) in pages.items() if old != new]
    if args.check:
        for path in stale:
            print(f"{path} is not current: run python -m launch.tools.gendocs (make docs)", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(pages[path][1])
    for path in pages:
        print(f"{path}: {'rewritten' if path in stale else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
