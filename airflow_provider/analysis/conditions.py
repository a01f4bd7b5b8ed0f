"""Thresholds and templates of an analysis: ``"< 0.05"`` parsed once, ``{name}`` fields checked once.

Pure: no I/O, no Airflow. Both parse at construction, so a bad threshold or an unknown template field fails
when the DAG is parsed, naming the field.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "OPERATORS",
    "Condition",
    "parse_condition",
    "render_template",
    "template_fields",
]

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
"""The comparisons a condition may use (longest first, so ``<=`` is not read as ``<``)."""

_CONDITION = re.compile(r"^\s*(<=|>=|<|>)\s*(\S+)\s*$")
_TEMPLATE_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""A template field: an identifier in braces. PromQL's own braces (``{name="x"}``, ``{}``) never match:
a label matcher always holds an operator."""


@dataclass(frozen=True)
class Condition:
    """A parsed threshold such as ``< 0.05``.

    :param operator: one of ``<``, ``<=``, ``>``, ``>=``.
    :param threshold: the number the measured value is compared with.
    """

    operator: str
    threshold: float

    def holds(self, value: float) -> bool:
        """Whether ``value`` meets the condition (``NaN`` never does)."""
        return OPERATORS[self.operator](value, self.threshold)

    def __str__(self) -> str:
        return f"{self.operator} {self.threshold:g}"


def parse_condition(text: object, field: str = "condition") -> Condition:
    """Parse ``"< 0.05"`` (an operator, then a number), or raise ``ValueError`` naming ``field``.

    :param text: the condition as written.
    :param field: the name to put in the error message.
    """
    expected = f"{field} must be an operator (<, <=, >, >=) then a number, e.g. '< 0.05'"
    if not isinstance(text, str):
        raise ValueError(f"{expected}; got {type(text).__name__} {text!r}")
    match = _CONDITION.match(text)
    if match is None:
        raise ValueError(f"{expected}; got {text!r}")
    try:
        threshold = float(match.group(2))
    except ValueError:
        raise ValueError(f"{expected}; the threshold {match.group(2)!r} is not a number") from None
    if not math.isfinite(threshold):
        raise ValueError(f"{expected}; the threshold {match.group(2)!r} is not a finite number")
    return Condition(match.group(1), threshold)


def template_fields(template: str, allowed: tuple[str, ...], field: str) -> tuple[str, ...]:
    """The template fields ``template`` uses, or ``ValueError`` naming ``field`` when one is not ``allowed``.

    :param template: text with ``{field}`` placeholders.
    :param allowed: the field names this template may use.
    :param field: the name to put in the error message.
    """
    used = tuple(dict.fromkeys(_TEMPLATE_FIELD.findall(template)))
    unknown = [name for name in used if name not in allowed]
    if unknown:
        known = ", ".join("{" + name + "}" for name in allowed)
        raise ValueError(
            f"{field} uses the unknown template field(s) {', '.join('{' + n + '}' for n in unknown)}; "
            f"the known fields are {known}"
        )
    return used


def render_template(template: str, values: Mapping[str, object]) -> str:
    """``template`` with each ``{field}`` named in ``values`` replaced; any other text (PromQL braces) kept.

    :param template: text with ``{field}`` placeholders, checked by :func:`template_fields` beforehand.
    :param values: the value of each field.
    """

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        return str(values[name]) if name in values else match.group(0)

    return _TEMPLATE_FIELD.sub(replace, template)
