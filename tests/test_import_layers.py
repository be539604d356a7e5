"""The package is layers that import only downward: no import cycle, no import of a higher room.

Every import counts: module level, under `if TYPE_CHECKING:` and inside functions. A room may hold
sub-rooms (sub-packages, `babylm_jax.<room>.<sub-room>.<module>`): they keep their room's rank, import
each other one way, and each says its job in the one-line docstring that is its whole __init__.py.
The package stays small enough to read: at most MAX_FOLDERS folders, no module over MAX_LINES lines.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "babylm_jax"
# The rooms from the bottom up (README "Layout"); modules directly in babylm_jax/ are the command lines.
ROOMS = ("core", "tasks", "config", "corpus", "model", "eval", "training", "hf", "tools")
COMMANDS = len(ROOMS)
MAX_FOLDERS = 15  # the package folder, its rooms and their sub-rooms
MAX_LINES = 400  # lines of one module


def module_names() -> dict[str, pathlib.Path]:
    """Dotted name -> file of every module of the package."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The package's modules that module `name` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    names = module_names()
    return {name: imported(name, path, set(names)) for name, path in names.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def rank(module: str) -> int:
    parts = module.split(".")
    if len(parts) < 3 and (len(parts) == 1 or parts[1] not in ROOMS):
        return COMMANDS
    return ROOMS.index(parts[1])


def test_find_cycle_finds_a_cycle_through_three_modules():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_imports_count_type_checking_and_function_local_ones(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import X\n"
                      "def f():\n    from pkg import b\n    import pkg.c\n")
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.m"}
    assert imported("pkg.m", source, known) == {"pkg.a", "pkg.b", "pkg.c"}


def test_the_package_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_every_module_lives_in_a_room_or_is_a_command():
    for name in module_names():
        parts = name.split(".")
        assert len(parts) <= 2 or parts[1] in ROOMS, f"{name} is in no room of {ROOMS}"


@pytest.mark.parametrize("room", [*ROOMS, "commands"])
def test_a_room_imports_only_its_own_and_lower_rooms(room):
    graph = import_graph()
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if rank(b) > rank(a) and (ROOMS[rank(a)] if rank(a) < COMMANDS else "commands") == room)
    assert not upward, f"imports of higher rooms: {upward}"


def test_the_model_reads_no_run_config():
    """The model code takes plain settings (`objectives.LossSettings`, `config.model.ModelConfig`); the
    training code builds them from the run's config, which never goes down into model/."""
    readers = sorted(name for name, targets in import_graph().items()
                     if name.startswith("babylm_jax.model.") and "babylm_jax.config.schema" in targets)
    assert not readers, f"model modules that import the run config (babylm_jax.config.schema): {readers}"


def folders() -> list[pathlib.Path]:
    """The package's folder (the command modules), every room's and every sub-room's."""
    return sorted({PACKAGE, *(init.parent for init in PACKAGE.rglob("__init__.py"))})


def sub_rooms() -> list[pathlib.Path]:
    return [folder for folder in folders() if len(folder.relative_to(PACKAGE).parts) >= 2]


def test_the_package_has_few_folders():
    assert len(folders()) <= MAX_FOLDERS, [folder.relative_to(PACKAGE.parent).as_posix() for folder in folders()]


def test_no_module_is_over_max_lines():
    over = sorted(f"{name} ({lines} lines)" for name, path in module_names().items()
                  if (lines := len(path.read_text().splitlines())) > MAX_LINES)
    assert not over, f"modules over {MAX_LINES} lines (split each by job): {over}"


@pytest.mark.parametrize("folder", sub_rooms(), ids=lambda folder: folder.relative_to(PACKAGE).as_posix())
def test_a_sub_room_is_its_one_line_docstring(folder):
    tree = ast.parse((folder / "__init__.py").read_text())
    docstring = ast.get_docstring(tree, clean=False)
    assert docstring and "\n" not in docstring.strip(), "a sub-room's __init__.py says its job in one line"
    assert len(tree.body) == 1, "a sub-room's __init__.py holds its docstring only (no imports, no names)"


def sub_room_graph(room: str) -> dict[str, set[str]]:
    """Sub-room -> the other sub-rooms of `room` its modules import."""
    def sub_room(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 3 and parts[1] == room else None

    graph: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        if (here := sub_room(module)) is not None:
            graph.setdefault(here, set()).update(s for s in map(sub_room, targets) if s is not None and s != here)
    return graph


@pytest.mark.parametrize("room", ROOMS)
def test_the_sub_rooms_of_a_room_import_one_way(room):
    graph = sub_room_graph(room)
    for targets in list(graph.values()):
        for target in targets:
            graph.setdefault(target, set())
    assert find_cycle(graph) is None, f"sub-rooms of {room}/ that import each other: {find_cycle(graph)}"
