"""The two bases every model stands on, and the rules for fields the models do not declare: a model read
from the service keeps them (the service adds fields without notice), a request refuses them (a typo fails
before anything is sent), naming the field's full path."""

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class ServiceModel(BaseModel):
    """Base of every model: keeps unknown fields, so newer service responses still parse."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    def unknown_fields(self, prefix: str = "") -> Iterator[tuple[str, list[str]]]:
        """Yield ``(dotted path, known field names)`` for every unknown field, nested models included."""
        known = sorted(type(self).model_fields)
        for name in self.model_extra or {}:
            yield f"{prefix}{name}", known
        for name in type(self).model_fields:
            yield from _unknown_in(getattr(self, name), f"{prefix}{name}")


def _unknown_in(value: Any, path: str) -> Iterator[tuple[str, list[str]]]:
    if isinstance(value, ServiceModel):
        yield from value.unknown_fields(f"{path}.")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unknown_in(item, f"{path}[{index}]")


class RequestModel(ServiceModel):
    """Base of request roots: unknown fields anywhere below are refused with their full path."""

    @model_validator(mode="after")
    def _refuse_unknown_fields(self) -> "RequestModel":
        problems = []
        for path, known in self.unknown_fields():
            leaf = path.rsplit(".", 1)[-1]
            import difflib  # only on a misspelt field: importing it costs every DAG file's parse

            close = difflib.get_close_matches(leaf, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of: {', '.join(known)}"
            problems.append(f"unknown field {path!r}{hint}")
        if problems:
            raise ValueError("; ".join(problems))
        return self
