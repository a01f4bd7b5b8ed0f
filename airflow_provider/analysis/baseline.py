"""Conditions that refer to the baseline: ``"<= baseline * 1.5 + 0.01"``, the same metric measured on the revision
that served before (the preflight's measurement, :mod:`~airflow_provider.analysis.measuring.preflight`), so that one
analysis serves applications with very different normal values.

Pure: no I/O, no Airflow, no ``eval``. The grammar is small and fixed: an operator, the word ``baseline``, an
optional factor (``* 1.5``) and an optional offset (``+ 0.01``, ``- 0.02``; for a latency a unit: ``+ 50ms``).
Parsed when the DAG is parsed; anything else is refused naming what was expected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from airflow_provider.analysis.conditions import Condition

__all__ = ["BaselineCondition", "is_baseline_condition", "parse_baseline_condition"]

_START = re.compile(r"^\s*(<=|>=|<|>)\s*baseline\b(.*)$", re.IGNORECASE)
_NUMBER = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+)"
_FACTOR = re.compile(r"^\s*\*\s*" + _NUMBER + r"(.*)$")
_OFFSET = re.compile(r"^\s*([+-])\s*" + _NUMBER + r"\s*([A-Za-z]*)\s*$")
_EXAMPLE = "'<= baseline * 1.5 + 0.01'"


def is_baseline_condition(text: object) -> bool:
    """Whether ``text`` is written as a condition on the baseline (an operator, then ``baseline``).

    :param text: a condition as written.
    """
    return isinstance(text, str) and _START.match(text) is not None


@dataclass(frozen=True)
class BaselineCondition:
    """A threshold made from the baseline: ``baseline * factor + offset``, in the condition's unit.

    :param operator: one of ``<``, ``<=``, ``>``, ``>=``.
    :param factor: what the baseline is multiplied by (> 0).
    :param offset: what is added after (may be negative), in ``unit``.
    :param unit: the offset's unit (``"ms"``, ``"s"``; ``""`` for a plain number).
    :param per_base_unit: how many ``unit`` make one of the metric's own unit (see
        :class:`~airflow_provider.analysis.conditions.Condition`).
    """

    operator: str
    factor: float = 1.0
    offset: float = 0.0
    unit: str = ""
    per_base_unit: float = 1.0

    def resolve(self, baseline: float) -> Condition:
        """The fixed condition this one is for a baseline measured as ``baseline`` (in this condition's unit).

        :param baseline: the baseline's value.
        """
        return Condition(self.operator, baseline * self.factor + self.offset, self.unit, self.per_base_unit)

    def measuring(self) -> Condition:
        """A condition any finite value passes, in this condition's unit: what the preflight measures the baseline
        itself with."""
        return Condition(">=", -math.inf, self.unit, self.per_base_unit)

    def __str__(self) -> str:
        text = f"{self.operator} baseline"
        if self.factor != 1.0:
            text += f" * {self.factor:g}"
        if self.offset:
            text += f" {'+' if self.offset > 0 else '-'} {abs(self.offset):g}{self.unit}"
        return text


def parse_baseline_condition(
    text: object,
    field: str = "condition",
    *,
    units: Mapping[str, float] | None = None,
    default_unit: str = "",
) -> BaselineCondition:
    """Parse ``"<= baseline * 1.5 + 0.01"``, or raise ``ValueError`` naming ``field`` and what was expected.

    :param text: the condition as written.
    :param field: the name to put in the error message.
    :param units: the units the offset may carry (a latency's ``{"ms": 1000.0, "s": 1.0}``); ``None``: none.
    :param default_unit: the unit of a bare offset (one of ``units``).
    """
    expected = (
        f"{field}: a condition on the baseline is an operator (<, <=, >, >=), 'baseline', an optional factor "
        f"('* 1.5', > 0) and an optional offset ('+ 0.01'{', with a unit: + 50ms' if units else ''}), e.g. {_EXAMPLE}"
    )
    match = _START.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{expected}; got {text!r}")
    operator, rest = match.group(1), match.group(2)
    factor = 1.0
    factor_match = _FACTOR.match(rest)
    if factor_match is not None:
        factor = _number(factor_match.group(1), expected, "the factor")
        if factor <= 0:
            raise ValueError(f"{expected}; the factor {factor_match.group(1)!r} is not above 0")
        rest = factor_match.group(2)
    offset, unit = 0.0, default_unit
    if rest.strip():
        offset_match = _OFFSET.match(rest)
        if offset_match is None:
            raise ValueError(f"{expected}; could not read {rest.strip()!r} of {text!r}")
        sign, written, given_unit = offset_match.groups()
        offset = _number(written, expected, "the offset") * (-1.0 if sign == "-" else 1.0)
        if given_unit:
            if not units or given_unit not in units:
                allowed = f"one of {' or '.join(units)}" if units else "none (the metric takes no unit)"
                raise ValueError(f"{expected}; the unit {given_unit!r} is not {allowed}")
            unit = given_unit
    return BaselineCondition(operator, factor, offset, unit, (units or {}).get(unit, 1.0))


def _number(written: str, expected: str, what: str) -> float:
    try:
        value = float(written)
    except ValueError:
        raise ValueError(f"{expected}; {what} {written!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{expected}; {what} {written!r} is not a finite number")
    return value
