"""The import graph of warppipe's own modules: no circle, and the layers the tree promises (actors/ and learner/ talk
only through shared/; shared/ imports none of the roles; nothing imports launch/ but launch/ itself; nothing imports
the tools of launch/tools/ but the tools).

Every ``import`` and ``from ... import`` counts, also inside functions and under ``TYPE_CHECKING``: a lazy import
that closes a circle is still a circle to whoever reads the code."""

import ast
import os

from tests.support.paths import ROOT

PACKAGES = ("actors", "learner", "shared", "launch")


def _modules() -> dict[str, str]:
    """Module name -> file, for every .py file of the packages."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
                    found[rel.removesuffix(".__init__")] = os.path.join(folder, name)
    return found


def _graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a ``from package import name`` of a submodule counts as it)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolved against this module's package
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != module}
        graph[module] = edges
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of the graph (its modules in order), or [] when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_module_imports_itself_back_through_others():
    graph = _graph()
    assert len(graph) > 50 and "shared.config" in graph and "shared.envs" in graph["shared.envs.mario"]
    assert _circle(graph) == [], " -> ".join(_circle(graph))


def test_a_circle_is_found_when_there_is_one():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) == []


def test_roles_talk_only_through_shared_and_nothing_imports_the_launchers():
    allowed = {
        "actors": {"actors", "shared"},
        "learner": {"learner", "shared"},
        "shared": {"shared"},
        "launch": set(PACKAGES),
    }
    wrong = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if target.split(".")[0] not in allowed[module.split(".")[0]]
    ]
    assert wrong == []


def test_every_module_says_in_its_docstring_what_it_holds():
    from launch.tools.gendocs import module_summaries

    summaries = module_summaries()  # what docs/architecture.md's layout table lists
    assert len(summaries) == len(_modules())  # every module and package of the four
    missing = [path for path, summary in summaries if not summary]
    assert missing == [], f"no docstring (its first paragraph is the layout table's entry): {missing}"


def test_no_program_that_trains_or_plays_imports_the_analysis_tools():
    wrong = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if target.startswith("launch.tools") and not module.startswith("launch.tools")
    ]
    assert wrong == []
    assert {"launch.tools.report", "launch.tools.plot", "launch.tools.gendocs"} <= set(_graph())


def _reaches_into_learner(source: str) -> list[str]:
    """Each ``learner.part.x`` (or ``self.learner.part.x``) in ``source``: an attribute of one of a Learner's parts."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            root = node.value.value  # learner in learner.part.x; self.learner in self.learner.part.x
            if (isinstance(root, ast.Name) and root.id == "learner") or (
                isinstance(root, ast.Attribute) and root.attr == "learner" and ast.unparse(root.value) == "self"
            ):
                found.append(ast.unparse(node))
    return found


def test_the_launcher_asks_the_learner_and_never_reaches_into_its_parts():
    with open(os.path.join(ROOT, "launch", "local.py"), encoding="utf-8") as fh:
        assert _reaches_into_learner(fh.read()) == []  # learner/loop.py's Learner answers: add a method there instead


def test_a_reach_into_a_learner_part_is_found():
    source = """
def run(learner):
    learner.plane.drain(timeout=0.05)
    c = learner.counters
    print(learner.summary().epoch, learner.slots.incarnations()[0], c.epoch, other.learner.plane)

class Supervisor:
    def tick(self):
        self.learner.release_slot(0)
        return self.learner.server.current(), self.learner.plane.replay.stream_capacity
"""
    found = ["learner.plane.drain", "learner.slots.incarnations", "self.learner.server.current", "self.learner.plane.replay"]
    assert _reaches_into_learner(source) == found
