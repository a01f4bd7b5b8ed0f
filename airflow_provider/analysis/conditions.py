"""Thresholds and templates of an analysis: ``"< 0.05"`` (or ``"< 800ms"``) parsed once, ``{name}`` fields
checked once.

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
    "threshold_unit",
]

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
"""The comparisons a condition may use (longest first, so ``<=`` is not read as ``<``)."""

_CONDITION = re.compile(r"^\s*(<=|>=|<|>)\s*(\S+(?:\s+[A-Za-z]+)?)\s*$")
"""An operator, then a threshold: a number, with a unit after it or after a space (``800ms``, ``1.5 s``)."""
_UNIT_SUFFIX = re.compile(r"^(.*?[0-9.])\s*([A-Za-z]+)$")
_TEMPLATE_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""A template field: an identifier in braces. PromQL's own braces (``{name="x"}``, ``{}``) never match:
a label matcher always holds an operator."""


@dataclass(frozen=True)
class Condition:
    """A parsed threshold such as ``< 0.05`` or ``< 800ms``.

    :param operator: one of ``<``, ``<=``, ``>``, ``>=``.
    :param threshold: the number the measured value is compared with, in ``unit``.
    :param unit: the threshold's unit as written (``"ms"``, ``"s"``), ``""`` for a plain number.
    :param per_base_unit: how many ``unit`` make one of the measured metric's own unit (1000 for
        milliseconds of a metric measured in seconds): :meth:`in_unit` converts a measured value with it.
    """

    operator: str
    threshold: float
    unit: str = ""
    per_base_unit: float = 1.0

    def holds(self, value: float) -> bool:
        """Whether ``value`` (in this condition's unit, see :meth:`in_unit`) meets it (``NaN`` never does)."""
        return OPERATORS[self.operator](value, self.threshold)

    def in_unit(self, value: float) -> float:
        """``value``, measured in the metric's own unit (seconds for a latency), in this condition's unit.

        :param value: the measured value.
        """
        return value * self.per_base_unit

    def show(self, value: float) -> str:
        """``value`` (in this condition's unit) for people: ``0.270``, ``912ms``, ``0.4s``.

        :param value: a value in this condition's unit.
        """
        return f"{value:.4g}{self.unit}" if self.unit else f"{value:.3f}"

    def __str__(self) -> str:
        return f"{self.operator} {self.threshold:g}{self.unit}"


def parse_condition(
    text: object,
    field: str = "condition",
    *,
    units: Mapping[str, float] | None = None,
    default_unit: str = "",
) -> Condition:
    """Parse ``"< 0.05"`` (an operator, then a number; with ``units``, optionally a unit such as ``"< 800ms"``), or
    raise ``ValueError`` naming ``field``.

    :param text: the condition as written.
    :param field: the name to put in the error message.
    :param units: the units the threshold may carry, each with how many of it make one of the metric's own
        unit (``{"ms": 1000.0, "s": 1.0}`` for a metric in seconds); ``None``: a plain number only.
    :param default_unit: the unit of a bare number (one of ``units``), shown in the parsed condition.
    """
    expected = f"{field} must be an operator (<, <=, >, >=) then a number, e.g. '< 0.05'"
    if units:
        expected = (
            f"{field} must be an operator (<, <=, >, >=) then a number with an optional unit "
            f"({' or '.join(units)}; a bare number is {default_unit or 'the metric unit'}), e.g. '< 800ms'"
        )
    if not isinstance(text, str):
        raise ValueError(f"{expected}; got {type(text).__name__} {text!r}")
    match = _CONDITION.match(text)
    if match is None:
        raise ValueError(f"{expected}; got {text!r}")
    written, unit = match.group(2), ""
    for name in sorted(units or {}, key=len, reverse=True):  # "ms" before "s"
        if written.endswith(name) and _is_number(written[: -len(name)]):
            written, unit = written[: -len(name)].strip(), name
            break
    try:
        threshold = float(written)
    except ValueError:
        suffix = _UNIT_SUFFIX.match(written)
        if units and suffix is not None and _is_number(suffix.group(1)):
            raise ValueError(f"{expected}; the unit {suffix.group(2)!r} is not one of {' or '.join(units)}") from None
        raise ValueError(f"{expected}; the threshold {written!r} is not a number") from None
    if not math.isfinite(threshold):
        raise ValueError(f"{expected}; the threshold {written!r} is not a finite number")
    unit = unit or default_unit
    return Condition(match.group(1), threshold, unit, (units or {}).get(unit, 1.0))


def threshold_unit(text: str) -> str:
    """The unit written after the threshold of a condition (``"ms"`` of ``"< 800ms"``), ``""`` when none.

    :param text: the condition as written.
    """
    match = _CONDITION.match(text)
    suffix = _UNIT_SUFFIX.match(match.group(2)) if match is not None else None
    return suffix.group(2) if suffix is not None and _is_number(suffix.group(1)) else ""


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


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
