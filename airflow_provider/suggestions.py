"""The names closest to one a user misspelt (``image`` -> ``image_uri``), for a message that suggests them.

``difflib`` is imported only when a suggestion is made (a misspelt argument), never when the provider is
imported: the import cost of the operators counts (``bench/import_cost.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pydantic

__all__ = ["closest_names", "did_you_mean", "unknown_argument_hint", "with_suggestions"]


def closest_names(name: str, known: Iterable[str], *, limit: int = 3) -> list[str]:
    """The known names closest to ``name``, closest first: those ``difflib`` finds similar, then those that
    begin with it or that it begins with (``interval`` -> ``interval_seconds``); none when nothing is close.

    :param name: the name as the user wrote it.
    :param known: the valid names.
    :param limit: at most this many.
    """
    import difflib  # lazily: only a misspelt name pays for it

    candidates = sorted(set(known))
    found = difflib.get_close_matches(name, candidates, n=limit, cutoff=0.6)
    prefixed = [c for c in candidates if c not in found and (c.startswith(name) or name.startswith(c))]
    return [*found, *prefixed][:limit]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"did you mean image_uri?"`` (or ``"did you mean a, b or c?"``), or ``""`` when nothing is close.

    :param name: the name as the user wrote it.
    :param known: the valid names.
    """
    close = closest_names(name, known)
    if not close:
        return ""
    return "did you mean " + (close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}") + "?"


def unknown_argument_hint(name: str, known: Iterable[str], hints: Mapping[str, str] | None = None) -> str:
    """What to say about an argument nobody knows: the closest valid names, else a hint for a name users
    reach for (``threshold`` -> where a threshold goes), else the valid names.

    :param name: the argument as the user wrote it.
    :param known: the valid names.
    :param hints: words users reach for, each with what to say instead.
    """
    names = sorted(set(known))
    if hints and name in hints:
        return hints[name]
    return did_you_mean(name, names) or f"expected one of: {', '.join(names)}"


def with_suggestions(
    err: pydantic.ValidationError,
    known: Callable[[tuple[int | str, ...]], Iterable[str]],
    hints: Mapping[str, str] | None = None,
) -> pydantic.ValidationError:
    """``err`` with each ``extra_forbidden`` error (an argument the model does not take) saying the closest
    valid names (:func:`unknown_argument_hint`), at the same place; the other errors unchanged; inputs hidden.

    :param err: what pydantic raised.
    :param known: the valid names at an error's location (its ``loc`` without the unknown name).
    :param hints: as for :func:`unknown_argument_hint`.
    """
    import pydantic
    import pydantic_core

    if not any(item["type"] == "extra_forbidden" for item in err.errors()):
        return err
    line_errors: list[Any] = []
    for item in err.errors(include_url=False):
        if item["type"] == "extra_forbidden":
            loc = tuple(item["loc"])
            hint = unknown_argument_hint(str(loc[-1]), known(loc[:-1]), hints)
            kind = pydantic_core.PydanticCustomError("extra_forbidden", "unknown argument: {hint}", {"hint": hint})
            line_errors.append({"type": kind, "loc": loc, "input": None})
        else:
            same = pydantic_core.PydanticCustomError(item["type"], "{msg}", {"msg": item["msg"]})
            line_errors.append({"type": same, "loc": tuple(item["loc"]), "input": None})
    return pydantic.ValidationError.from_exception_data(err.title, line_errors, hide_input=True)
