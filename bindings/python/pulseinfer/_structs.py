"""Between the SWIG structs and the package's dataclasses, which name their fields as the C
structs do."""
from __future__ import annotations

import dataclasses
from typing import Any, Collection, TypeVar

T = TypeVar("T")


def to_struct(values: Any, struct: T, skip: Collection[str] = ()) -> T:
    """Sets each field of the dataclass `values` (but those in `skip`) on `struct`."""
    for field in dataclasses.fields(values):
        if field.name not in skip:
            setattr(struct, field.name, getattr(values, field.name))
    return struct


def from_struct(cls: type[T], struct: Any, **converted: Any) -> T:
    """The dataclass `cls` with the struct's fields, and `converted` in place of some."""
    fields = {field.name: getattr(struct, field.name) for field in dataclasses.fields(cls)}
    return cls(**{**fields, **converted})
