"""The strategy of a fleet rollout (pure: no Airflow, no I/O, no models): its arguments checked when the DAG is
parsed (``canary``, ``wave_size``, ``max_failures``, ``max_parallel_patches``), the failure allowance, and the
waves the targets are split into.

Apart from :mod:`airflow_provider.decisions.fleet_progress` (the rows, the progress and watching a wave, which only a
running task needs) so that constructing a :class:`~airflow_provider.operators.fleet.FleetRolloutOperator` in a DAG file
imports this small module only; :mod:`airflow_provider.decisions.fleet_progress` re-exports every name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "CANARY",
    "check_canary",
    "check_canary_fits",
    "check_max_failures",
    "check_max_parallel_patches",
    "check_wave_size",
    "failure_allowance",
    "plan_waves",
    "wave_count",
]

CANARY = "canary"
"""Name of the canary wave (the first, when a canary is given)."""

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


# -------------------------------------------------------------------------------------- arguments
def check_wave_size(value: Any) -> int | str:
    """``wave_size`` as given when valid: a whole number >= 1, or a percentage ``"25%"`` (0 < p <= 100).

    :param value: the argument.
    :raises ValueError: naming ``wave_size``.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str):
        found = _PERCENT.match(value)
        if found and 0 < float(found.group(1)) <= 100:
            return value.strip()
    raise ValueError(f"wave_size must be a whole number >= 1 or a percentage such as '25%', got {value!r}")


def wave_count(wave_size: int | str, fleet_size: int) -> int:
    """Deployments per wave for a fleet of ``fleet_size`` (a percentage of the fleet, rounded up, >= 1).

    :param wave_size: a checked ``wave_size``.
    :param fleet_size: deployments in the fleet (canary included).
    """
    if isinstance(wave_size, int):
        return wave_size
    found = _PERCENT.match(wave_size)
    assert found is not None
    return max(1, math.ceil(float(found.group(1)) * fleet_size / 100 - 1e-9))


def check_max_failures(value: Any) -> int | float:
    """``max_failures`` as given when valid: a whole number >= 0 (a count), or a fraction of the fleet
    given as a float from 0 to 1 (``0.1`` = 10 %).

    :param value: the argument.
    :raises ValueError: naming ``max_failures``.
    """
    count = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if count or (isinstance(value, float) and 0 <= value <= 1):
        return value
    raise ValueError(
        f"max_failures must be a whole number >= 0 (a count) or a fraction from 0.0 to 1.0 of the fleet, got {value!r}"
    )


def check_max_parallel_patches(value: Any) -> int:
    """``max_parallel_patches`` as given when valid: a whole number >= 1.

    :param value: the argument.
    :raises ValueError: naming ``max_parallel_patches``.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"max_parallel_patches must be a whole number >= 1, got {value!r}")


def failure_allowance(max_failures: int | float, fleet_size: int) -> int:
    """How many deployments may fail before the rollout stops (it stops when more fail than this).

    :param max_failures: a checked ``max_failures``: a count, or a fraction of the fleet (rounded down).
    :param fleet_size: deployments in the fleet.
    """
    if isinstance(max_failures, float):
        return math.floor(max_failures * fleet_size + 1e-9)
    return max_failures


def check_canary(value: Any) -> int | list[str] | None:
    """``canary`` as given when valid: ``None``, a whole number >= 0, or deployment names (a list, or a
    comma-separated string).

    :param value: the argument.
    :raises ValueError: naming ``canary``.
    """
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, (list, tuple)) and value and all(isinstance(item, str) and item.strip() for item in value):
        names = [item.strip() for item in value]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"canary names a deployment twice: {', '.join(repeated)}")
        return names
    raise ValueError(f"canary must be a whole number >= 0 or a list of deployment names, got {value!r}")


def check_canary_fits(canary: int | list[str] | None, fleet_size: int) -> None:
    """Refuse a canary of more deployments than the fleet has (it would silently make the whole fleet the canary).

    :param canary: a checked ``canary``.
    :param fleet_size: how many deployments the fleet has.
    :raises ValueError: naming ``canary``, its value and the fleet's size.
    """
    count = len(canary) if isinstance(canary, list) else canary or 0
    if count > fleet_size:
        raise ValueError(
            f"canary={canary!r} names {count} deployment(s) but the fleet has {fleet_size}: the whole fleet would be "
            f"the canary; give a canary of at most {max(fleet_size - 1, 1)} (fewer than the fleet, so that waves "
            "follow it), or no canary"
        )


# ------------------------------------------------------------------------------------------- plan
def plan_waves(
    targets: Sequence[tuple[str, str]], canary: int | list[str] | None, wave_size: int | str
) -> list[tuple[str, list[tuple[str, str]]]]:
    """Split the targets into waves: the canary (when given) first, then waves of ``wave_size``.

    :param targets: ``(deployment_id, name)`` of every deployment of the fleet, in rollout order.
    :param canary: a checked ``canary``: how many of the first targets, or which names.
    :param wave_size: a checked ``wave_size``.
    :returns: ``(wave name, [(deployment_id, name), ...])`` per wave: ``"canary"``, ``"wave 1"``, ...
    :raises ValueError: a canary name that is not among the targets.
    """
    rest = list(targets)
    waves: list[tuple[str, list[tuple[str, str]]]] = []
    if isinstance(canary, list):
        by_name = {name: (deployment_id, name) for deployment_id, name in targets}
        missing = [name for name in canary if name not in by_name]
        if missing:
            raise ValueError(
                f"canary names deployments that are not among the targets: {', '.join(missing)} "
                f"(targets: {', '.join(sorted(by_name)[:20])}{' ...' if len(by_name) > 20 else ''})"
            )
        chosen = {by_name[name][0] for name in canary}
        waves.append((CANARY, [by_name[name] for name in canary]))
        rest = [target for target in targets if target[0] not in chosen]
    elif canary:
        check_canary_fits(canary, len(targets))
        waves.append((CANARY, rest[:canary]))
        rest = rest[canary:]
    size = wave_count(wave_size, len(targets))
    for number, start in enumerate(range(0, len(rest), size), start=1):
        waves.append((f"wave {number}", rest[start : start + size]))
    return waves
