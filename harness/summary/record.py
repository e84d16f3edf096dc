"""The base of every summary record (harness.summary.model): typed fields, key order kept, the by-key shim.

pydantic v2 rather than dataclasses: a summary is read back from disk by validate, report, compare
and fleet merge, so every reader needs its shape checked with an error that names the key
(`points[3].verdict.flagged`); pydantic does that from the annotations, where dataclasses would need a
hand-written walker of the same types, and its field descriptions feed docs/summary.md
(tests/helpers/summary_doc.py). Three choices keep the written JSON exactly what summarize wrote before
the types (tests/summary/test_model.py round-trips docs/sample/cpu-sim.json):
- numbers are `Num` (StrictInt | StrictFloat): an int stays an int, nothing is coerced from a string;
- a key never written stays absent (dumped with exclude_unset) and keys keep the order they came in;
- a writer may set only declared keys: building a record from keys it does not declare is an error
  naming the key (a misspelt figure fails at once). The one exception is the reader of summary files
  (harness.summary.io validates with READ_FILE as context): a file written by another version, or
  with bench-real's own `real_server` block, keeps the keys it does not declare and writes them back.
A record also answers by key (`record.get("k")`, `record["k"]`, `"k" in record`, `{**record}`), for
what reads it as the JSON it is: scripts and tests that build or walk summaries, figures named at run
time, and `"k" in record`, which asks whether a writer set the key (absent and null differ).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    JsonValue,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    StrictFloat,
    StrictInt,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

Num = StrictInt | StrictFloat
JsonObject = dict[str, JsonValue]
READ_FILE = {"keep_undeclared": True}  # validation context of harness.summary.io: keep what a file holds


class Record(BaseModel):
    """A level of the summary: typed fields, undeclared keys refused (kept when read from a file), key
    order kept, unset keys not written."""

    # "allow" so that the file reader can keep undeclared keys; every other build is refused them below
    model_config = ConfigDict(extra="allow", validate_assignment=False)
    _order: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and not (info.context or {}).get("keep_undeclared"):
            fields = cls.model_fields
            undeclared = [k for k in data if k not in fields]
            if undeclared:
                raise ValueError(f"undeclared key {undeclared[0]!r} for {cls.__name__}")
        rec = handler(data)
        if isinstance(data, dict) and isinstance(rec, Record):
            rec._order = list(data)
        return rec

    @model_serializer(mode="wrap")
    def _in_order(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if not isinstance(out, dict) or not self._order:
            return out
        first = {k: out[k] for k in self._order if k in out}
        return {**first, **{k: v for k, v in out.items() if k not in first}}

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON object as written: declared keys that were set, then the rest, in their order."""
        return self.model_dump(exclude_unset=True)

    # ------------------------------------------------ the by-key shim for readers not yet migrated

    def _has(self, key: str) -> bool:
        return key in self.model_fields_set or key in (self.__pydantic_extra__ or {})

    def __getitem__(self, key: str) -> Any:
        if not self._has(key):
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._has(key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if self._has(key) else default

    def keys(self) -> list[str]:
        return [k for k in self.to_json()]

    def items(self) -> Iterator[tuple[str, Any]]:
        return ((k, getattr(self, k)) for k in self.keys())

    def values(self) -> Iterator[Any]:
        return (getattr(self, k) for k in self.keys())
