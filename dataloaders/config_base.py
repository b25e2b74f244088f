"""The strict base model every part of the run config uses, the base of the `data:` models, and
rules shared by the `data:` models of several families (`dataloaders/<family>/config.py`, joined
in dataloaders/data_sections.py)."""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator


def printable_name(value: str | None) -> str | None:
    """A name that lands in file names, YAML, report lines and shell lines: control characters
    (a newline, a tab, an escape) would inject lines or rewrite the terminal, so they are
    refused in the config."""
    if value is None:
        return value
    bad = [c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    if bad:
        raise ValueError(
            f"name {value!r} holds a control character ({bad[0]!r}): use printable characters"
        )
    return value


PrintableName = Annotated[str, AfterValidator(printable_name)]


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


class DataSection(StrictModel):
    """The base of every loader family's `data:` model: the rules of the whole config that
    depend on the family are answered by its model, so the run config asks instead of naming
    families."""

    # The trainer that reads a run of this family when training.trainer is not given (None:
    # the run config's default).
    default_trainer: ClassVar[str | None] = None
    # Fields left out of the config's hashes while at these defaults: a config that does not
    # use them hashes the same whether it spells them out or not (skip files record the hashes).
    unhashed_defaults: ClassVar[dict[str, Any]] = {}

    def check_run(self, run: Any) -> None:
        """The rules between this `data:` section and the rest of the run config `run`
        (training, tokenizer): a ValueError naming the fields, checked when the config is read.
        A family whose data loader fixes the batch, the restarts or the trainer says so here."""
        return None
