"""The strict base model every part of the run config uses, and rules shared by the `data:`
models of several families (dataloaders/config_data.py, dataloaders/config_mosaic.py)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, model_validator


def _is_number_type(annotation: Any) -> bool:
    """int, float, or an optional one of them (not a Literal, a str, a list of numbers)."""
    import types
    import typing

    if annotation in (int, float):
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _is_number_type(args[0])
    if origin in (typing.Union, types.UnionType):
        real = [a for a in args if a is not type(None)]
        return bool(real) and all(a in (int, float) for a in real)
    return False


def check_resume_order(resumes: list[Any]) -> None:
    """A family's data.resumes name distinct iterations in increasing order (each restart's
    state is read in turn, from the one before it)."""
    iters = [r.iteration for r in resumes]
    if iters != sorted(set(iters)):
        raise ValueError(f"data.resumes must be in increasing iteration order, got {iters}")


class StrictModel(BaseModel):
    """Unknown keys are errors; values are not silently coerced across types (`seed: true` is
    not seed 1, `seed: "7"` not 7)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        for name, value in raw.items():
            field = cls.model_fields.get(name)
            numeric = field is not None and _is_number_type(field.annotation)
            if numeric and isinstance(value, bool | str):
                raise ValueError(f"{name}: expected a number, got {value!r}")
        return raw
