"""Records whose fields are declared once: the dataclass is also the row, the dict and the
column list.

A stored record used to be spelled five times (the dataclass, ``to_dict``, the SQL column
list, the row tuple, the row reader), and a field added to four of them was a silent bug in
the fifth. ``Record`` derives all of them from ``dataclasses.fields`` and each field's type:

- an enum is stored and shown as its value, and read back through the enum;
- a tuple is shown as a JSON list and read back as a tuple;
- a mapping is shown as a plain dict;
- a ``float`` is written to a row as a float, because a REAL / DOUBLE PRECISION column hands
  back ``2.0`` for the ``2`` it was given, and a row digest computed before writing must
  equal the one computed from the row read back. Dicts keep numbers as given: they are what
  JSON records (approvals' ``record_json``) and run digests were always made from.

Field order is column order, so it is also the order of the cells a row digest covers
(``tether.evidence.crosscheck``): reordering the fields of a stored record changes its digests. A
field annotated ``FIXED`` (``run_id: Annotated[str, FIXED]``) is written when the row is made and
never by an update.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any, Self


class _Fixed:
    def __repr__(self) -> str:
        return "FIXED"


# Marks a field set when the record is first stored and never rewritten by an update (an
# identity, a creation time): updates write only the other columns. An annotation rather than
# a ``field()`` default, so that type checkers still see a required field as required.
FIXED = _Fixed()


Convert = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class Shape:
    """How one record class maps to rows and dicts, worked out once per class."""

    cls: type[Any]
    names: tuple[str, ...]
    changing: tuple[str, ...]  # the columns an update writes
    to_row: tuple[tuple[int, Convert], ...]  # (position, conversion) for cells that need one
    to_json: tuple[tuple[str, Convert], ...]
    from_stored: tuple[tuple[str, Convert], ...]
    get: Callable[[Any], tuple[Any, ...]]
    defaults: Mapping[str, Any]  # what a field missing from a dict is
    required: frozenset[str]  # the fields without a default
    name_set: frozenset[str]
    # Some columns' positions in a row, by their names (``cells``), found once per list.
    picks: dict[tuple[str, ...], Callable[[Sequence[Any]], tuple[Any, ...]]] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )

    def row(self, record: Any) -> tuple[Any, ...]:
        cells = self.get(record)
        if not self.to_row:
            return cells
        out = list(cells)
        for i, convert in self.to_row:
            if out[i] is not None:
                out[i] = convert(out[i])
        return tuple(out)

    def cells(self, record: Any, names: Sequence[str]) -> tuple[Any, ...]:
        """The cells of some columns only (an index beside a JSON record)."""
        key = tuple(names)
        pick = self.picks.get(key)
        if pick is None:
            at = [self.names.index(n) for n in key]
            pick = self.picks[key] = lambda row: tuple(row[i] for i in at)
        return pick(self.row(record))

    def from_row(self, row: Sequence[Any]) -> Any:
        return self._make(dict(zip(self.names, row, strict=True)))

    def to_dict(self, record: Any) -> dict[str, Any]:
        data = dict(zip(self.names, self.get(record), strict=True))
        for name, convert in self.to_json:
            if data[name] is not None:
                data[name] = convert(data[name])
        return data

    def from_dict(self, data: Mapping[str, Any]) -> Any:
        if type(data) is dict and data.keys() == self.name_set:  # the common case: as stored
            return self._make(dict(data))
        return self._make({n: data[n] for n in self.names if n in data})

    def _make(self, values: dict[str, Any]) -> Any:
        for name, convert in self.from_stored:
            if values.get(name) is not None:
                values[name] = convert(values[name])
        missing = self.required - values.keys()
        if missing:
            raise TypeError(f"{self.cls.__name__} needs {', '.join(sorted(missing))}")
        # Built without ``__init__``: a frozen dataclass's sets each field through
        # ``object.__setattr__``, which costs more than the read it follows on the gate's path.
        # The record classes validate nothing in ``__init__`` (no ``__post_init__``).
        record = object.__new__(self.cls)
        record.__dict__.update(self.defaults, **values)
        return record


_SHAPES: dict[type[Any], Shape] = {}


def shape(cls: type[Any]) -> Shape:
    """``cls``'s shape, worked out on first use (its annotations name classes that may not
    exist yet when it is defined)."""
    found = _SHAPES.get(cls)
    if found is None:
        found = _SHAPES[cls] = _make_shape(cls)
    return found


def _make_shape(cls: type[Any]) -> Shape:
    fields = dataclasses.fields(cls)
    if hasattr(cls, "__post_init__"):
        raise TypeError(
            f"{cls.__name__} checks itself in __post_init__; records are built without it"
        )
    hints = typing.get_type_hints(cls, include_extras=True)
    fixed = {n for n, h in hints.items() if FIXED in getattr(h, "__metadata__", ())}
    names = tuple(f.name for f in fields)
    to_row: list[tuple[int, Convert]] = []
    to_json: list[tuple[str, Convert]] = []
    from_stored: list[tuple[str, Convert]] = []
    for i, name in enumerate(names):
        kind = _without_none(_without_metadata(hints[name]))
        origin = typing.get_origin(kind) or kind
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            to_row.append((i, _value))
            to_json.append((name, _value))
            from_stored.append((name, kind))
        elif origin is tuple:
            to_json.append((name, list))
            from_stored.append((name, tuple))
        elif origin in (Mapping, dict):
            to_json.append((name, dict))
        elif kind is float:
            to_row.append((i, float))
    return Shape(
        cls=cls,
        names=names,
        changing=tuple(n for n in names if n not in fixed),
        to_row=tuple(to_row),
        to_json=tuple(to_json),
        from_stored=tuple(from_stored),
        get=attrgetter(*names),
        defaults=dict(_defaults(fields)),
        required=frozenset(f.name for f in fields if not list(_defaults([f]))),
        name_set=frozenset(names),
    )


def _defaults(fields: Sequence[dataclasses.Field[Any]]) -> Iterator[tuple[str, Any]]:
    for f in fields:
        if f.default_factory is not dataclasses.MISSING:
            # One made default would be shared by every record built without __init__.
            raise TypeError(f"record field {f.name} needs a plain (immutable) default")
        if f.default is not dataclasses.MISSING:
            yield f.name, f.default


def _value(member: enum.Enum) -> Any:
    return member.value


def _without_metadata(kind: Any) -> Any:
    """``X`` for ``Annotated[X, ...]``."""
    return typing.get_args(kind)[0] if hasattr(kind, "__metadata__") else kind


def _without_none(kind: Any) -> Any:
    """``X`` for ``X | None``."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        rest = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return kind


class Record:
    """Rows, dicts and column lists for a frozen dataclass, from its fields alone."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values (enums as values, tuples as lists)."""
        return shape(type(self)).to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The record ``to_dict`` gave; keys it lacks take their defaults."""
        made: Self = shape(cls).from_dict(data)
        return made

    def row(self) -> tuple[Any, ...]:
        """The record as its row's cells, in field (column) order."""
        return shape(type(self)).row(self)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Self:
        made: Self = shape(cls).from_row(row)
        return made

    @classmethod
    def columns(cls, alias: str = "") -> str:
        """The column list, ``"a, b, c"`` (``"x.a, x.b, x.c"`` with an alias)."""
        prefix = f"{alias}." if alias else ""
        return ", ".join(prefix + n for n in shape(cls).names)

    @classmethod
    def changing_columns(cls) -> tuple[str, ...]:
        """The columns an update writes: every field not annotated ``FIXED``."""
        return shape(cls).changing

    def changing_cells(self) -> tuple[Any, ...]:
        return shape(type(self)).cells(self, shape(type(self)).changing)
