"""No enum member is compared with a string: `Scoring`, `TaskRunner` and `FileFormat` are `StrictEnum`s,
whose `==`, `!=` and `in` against a str raise, and a static scan of the package, experiments/ and tests/
finds such comparisons in code no test runs (a benchmark's main).

The scan knows which names hold members: fields, parameters and variables annotated with one of the
package's enums, and variables assigned from such a field (`variant = family_spec(f).scoring`). It flags a
comparison of one of those names with a string literal that is a value of that enum (`variant == "causal"`).
"""
import ast
import pathlib

import pytest

from babylm_jax.core.enums import StrictEnum
from babylm_jax.core.families import Scoring
from babylm_jax.tasks.formats import FileFormat
from babylm_jax.tasks.registry import TaskRunner

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENUMS = {cls.__name__: {member.value for member in cls} for cls in (Scoring, TaskRunner, FileFormat)}
SCANNED = ("babylm_jax", "experiments", "tests")


def test_every_enum_of_the_package_is_strict():
    found = set()
    for path in (ROOT / "babylm_jax").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(base).endswith("Enum") for base in node.bases):
                found.add(node.name)
    assert found - {"StrictEnum"} == set(ENUMS), "a new enum: make it a StrictEnum and add it to ENUMS"


@pytest.mark.parametrize("member", [Scoring.CAUSAL, TaskRunner.FMRI, FileFormat.ROWS], ids=str)
def test_a_member_compared_with_a_string_raises(member):
    assert isinstance(member, StrictEnum) and member == member and {member: 1}[member] == 1
    for compare in (lambda: member == member.value, lambda: member.value != member, lambda: member in ("x", member.value)):
        with pytest.raises(TypeError, match="never equal to a string"):
            compare()


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def enum_typed_names(trees: list[ast.AST]) -> dict[str, set[str]]:
    """Identifier -> the enums it is annotated with, or assigned from a field annotated with."""
    typed: dict[str, set[str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            target, annotation = None, None
            if isinstance(node, ast.AnnAssign):
                target, annotation = _name(node.target), node.annotation
            elif isinstance(node, ast.arg):
                target, annotation = node.arg, node.annotation
            if target and annotation is not None:
                named = {_name(n) for n in ast.walk(annotation)} | {  # `x: "Scoring | None"` too
                    n.value for n in ast.walk(annotation) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
                for enum_name in ENUMS:
                    if enum_name in named or any(enum_name in str(n).replace("|", " ").split() for n in named if n):
                        typed.setdefault(target, set()).add(enum_name)
    for tree in trees:  # `variant = spec.scoring`: the variable holds what the field holds
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and (source := _name(node.value)) in typed:
                for target in node.targets:
                    if (name := _name(target)) is not None:
                        typed.setdefault(name, set()).update(typed[source])
    return typed


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def string_comparisons(trees: dict[str, ast.AST], typed: dict[str, set[str]]) -> list[str]:
    found = []
    for where, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:]):
                if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                    continue
                for held, literal in ((left, right), (right, left)):
                    values = {v for enum_name in typed.get(_name(held) or "", ()) for v in ENUMS[enum_name]}
                    if values & set(_strings(literal)):
                        found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return sorted(found)


def test_the_scan_finds_the_old_benchmark_bug():
    source = ("settings: ScoringSettings = s\n"  # another class whose name starts with an enum's
              "variant = family_spec(family).scoring\n"
              "units = a if variant == 'causal' else b\n"
              "if spec.runner in ('fmri', 'word_fmri'): pass\n"
              "if family == 'causal': pass\n")  # a family's name is a string: not flagged
    tree = ast.parse(source)
    typed = enum_typed_names([tree, ast.parse("class TaskSpec:\n    runner: TaskRunner\n"),
                              ast.parse("class FamilySpec:\n    scoring: Scoring\n")])
    assert "settings" not in typed and typed["variant"] == {"Scoring"}
    assert string_comparisons({"x.py": tree}, typed) == [
        "x.py:3: variant == 'causal'", "x.py:4: spec.runner in ('fmri', 'word_fmri')"]


def test_no_enum_member_is_compared_with_a_string():
    paths = [p for folder in SCANNED for p in sorted((ROOT / folder).rglob("*.py"))]
    trees = {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text(), str(p)) for p in paths}
    found = string_comparisons(trees, enum_typed_names(list(trees.values())))
    assert not found, f"enum members compared with strings (compare members, or `.value`): {found}"
