"""A compiled XLA program's text (`compiled.as_text()`) as computations of parsed instructions.

    module = parse_module(executable.as_text())
    for instruction in module.entry.instructions:
        print(instruction.name, instruction.opcode, instruction.result_bytes)

Only what a cost model needs: each instruction's name, result type, opcode, operand names, the
computations it calls, and its attributes as text (backend_config, dimensions, ...).
"""
from __future__ import annotations

import dataclasses
import math
import re

DTYPE_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s16": 2, "u16": 2,
               "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_ARRAY = re.compile(r"\b(" + "|".join(DTYPE_BYTES) + r")\[([\d,]*)\]")
_HEADER = re.compile(r"^(ENTRY )?%(\S+) .*\{$")
_INSTRUCTION = re.compile(r"^\s*(ROOT )?%(\S+) = ")
_CALLS = re.compile(r"\b(calls|to_apply|body|condition|branch_computations|true_computation|false_computation)=(\{[^}]*\}|%[\w.\-]+)")


@dataclasses.dataclass(frozen=True)
class Array:
    """One array of a (possibly tuple) type: dtype and dimensions."""

    dtype: str
    dims: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.dims)

    @property
    def bytes(self) -> float:
        return self.elements * DTYPE_BYTES[self.dtype]


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One HLO instruction: `%name = type opcode(operands), attributes`."""

    name: str
    result: tuple[Array, ...]
    opcode: str
    operands: tuple[str, ...]
    attributes: str
    is_root: bool = False
    parameter_number: int | None = None  # a `parameter(N)`'s N

    @property
    def result_bytes(self) -> float:
        return sum(a.bytes for a in self.result)

    @property
    def called(self) -> tuple[str, ...]:
        """Names of the computations this instruction calls (fusion body, loop body and condition, ...)."""
        return tuple(name for _, group in _CALLS.findall(self.attributes)
                     for name in re.findall(r"%([\w.\-]+)", group))

    def calls(self, key: str) -> str | None:
        """The computation named by `key=%name` (calls, body, condition, to_apply), or None."""
        found = re.search(rf"\b{key}=%([\w.\-]+)", self.attributes)
        return found.group(1) if found else None

    def attribute(self, key: str) -> str | None:
        """The text of attribute `key=...` (up to the next top-level comma), or None."""
        found = re.search(rf"(?:^|, ){re.escape(key)}=", self.attributes)
        if not found:
            return None
        return _until_top_level_comma(self.attributes[found.end():])


@dataclasses.dataclass(frozen=True)
class Computation:
    name: str
    instructions: tuple[Instruction, ...]

    def by_name(self) -> dict[str, Instruction]:
        return {i.name: i for i in self.instructions}

    @property
    def root(self) -> Instruction:
        return next((i for i in self.instructions if i.is_root), self.instructions[-1])


@dataclasses.dataclass(frozen=True)
class Module:
    computations: dict[str, Computation]
    entry_name: str

    @property
    def entry(self) -> Computation:
        return self.computations[self.entry_name]


def arrays(type_text: str) -> tuple[Array, ...]:
    """The arrays of an HLO type (`f32[2,3]{1,0}` or a tuple of them), in order."""
    return tuple(Array(dtype, tuple(int(d) for d in dims.split(",") if d)) for dtype, dims in _ARRAY.findall(type_text))


def _matching(text: str, start: int) -> int:
    """Index just past the bracket closing the one at `start`."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    depth, opening = 0, text[start]
    for i in range(start, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == pairs[opening]:
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unbalanced {opening!r} in HLO text: {text[start:start + 80]!r}")


def _until_top_level_comma(text: str) -> str:
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            return text[:i]
    return text


def parse_instruction(line: str) -> Instruction | None:
    """One instruction line, or None for a line that is not one."""
    head = _INSTRUCTION.match(line)
    if not head:
        return None
    rest = line[head.end():]
    if rest.startswith("("):
        end = _matching(rest, 0)
    else:
        end = rest.index(" ")
    type_text, rest = rest[:end], rest[end:].lstrip()
    opcode_end = rest.index("(")
    opcode = rest[:opcode_end]
    close = _matching(rest, opcode_end)
    operand_text = re.sub(r"/\*.*?\*/", "", rest[opcode_end + 1:close - 1])
    operands = tuple(m.group(1) for m in re.finditer(r"%([\w.\-]+)", operand_text))
    attributes = rest[close:].lstrip(", ")
    number = int(operand_text) if opcode == "parameter" else None
    return Instruction(head.group(2), arrays(type_text), opcode, operands, attributes, bool(head.group(1)), number)


def parse_module(text: str) -> Module:
    """All computations of an HLO module's text; ValueError when it has no ENTRY computation."""
    computations: dict[str, Computation] = {}
    entry, name, body = None, None, []
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header and name is None:
            name, body = header.group(2), []
            entry = name if header.group(1) else entry
        elif line.startswith("}") and name is not None:
            computations[name] = Computation(name, tuple(body))
            name = None
        elif name is not None:
            instruction = parse_instruction(line)
            if instruction is not None:
                body.append(instruction)
    if entry is None:
        raise ValueError("no ENTRY computation in the HLO text (expected a compiled module's as_text())")
    return Module(computations, entry)
