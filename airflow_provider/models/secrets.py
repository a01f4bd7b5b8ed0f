"""Secret values and references: a value is hidden in every ``repr``, ``str`` and dump, and revealed only in
a request's wire body."""

from typing import Annotated, Any, cast

from pydantic import Field, GetCoreSchemaHandler, SecretStr, field_validator
from pydantic_core import core_schema

from airflow_provider.models.base import ServiceModel

REDACTED = "**********"
"""What a secret value looks like wherever it is shown (logs, XCom, reprs)."""


def _dumped_value(value: SecretStr | None, info: core_schema.SerializationInfo) -> str | None:
    """A secret value as every dump shows it: redacted, or revealed for the wire (``{"reveal_secrets": True}``
    as the serialization context)."""
    if value is None:
        return None
    if isinstance(info.context, dict) and info.context.get("reveal_secrets"):
        return value.get_secret_value()
    return REDACTED


class _RedactedOnDump:
    """Dump the annotated secret value with :func:`_dumped_value`, in Python and JSON mode alike.

    What ``@field_serializer(..., when_used="always")`` does, without importing
    ``pydantic.functional_serializers``, which nothing else a DAG file imports needs (1.2 ms, a tenth of the
    schema's import time, ``bench/import_cost.py``).
    """

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        schema: dict[str, Any] = {**handler(source)}
        schema["serialization"] = core_schema.plain_serializer_function_ser_schema(
            _dumped_value,
            info_arg=True,
            return_schema=core_schema.nullable_schema(core_schema.str_schema()),
            when_used="always",
        )
        return cast(core_schema.CoreSchema, schema)


class Secret(ServiceModel):
    """A named secret value. The value is hidden in every repr and dump except the wire body.

    A request must carry the value; a response may omit it (the service need not echo secrets).
    """

    name: str = Field(min_length=1)
    value: Annotated[SecretStr | None, _RedactedOnDump()] = None

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, name: str) -> str:
        if not name.strip():
            raise ValueError("secret name must not be blank")
        return name

    @property
    def revealed(self) -> str:
        """The value itself (``""`` when the service did not send one). Never log it."""
        return "" if self.value is None else self.value.get_secret_value()


class SecretReference(ServiceModel):
    """Reference to an existing Kubernetes secret (``external_docker`` deployments only)."""

    name: str
    secret_name: str
    secret_key: str
