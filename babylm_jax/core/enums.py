"""The base of the package's enums (`Scoring`, `TaskRunner`, `FileFormat`): a member compared with a string raises.

    Scoring.CAUSAL == "causal"   # TypeError: compare members (`variant is Scoring.CAUSAL`) or `.value`

A plain `enum.Enum` member is never equal to its value, so a comparison left over from when the
field was a string is silently False: a benchmark compared `Scoring` with "causal", scored a causal
model as PLL and printed figures that were not true. Here that comparison fails where it runs.
"""
from __future__ import annotations

import enum
from typing import Any


class StrictEnum(enum.Enum):
    """An Enum whose members refuse `==`, `!=` and `in` against a str (they are never equal to one)."""

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, str):
            raise TypeError(f"{self!r} compared with the string {other!r}: a {type(self).__name__} is never equal to "
                            f"a string; compare members ({type(self).__name__}.{self.name}) or `.value`")
        return self is other

    def __ne__(self, other: Any) -> bool:
        return not self == other

    __hash__ = enum.Enum.__hash__  # defining __eq__ would otherwise make the members unhashable
