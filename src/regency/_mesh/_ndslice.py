"""``NDSlice`` and ``Selection``: the ndslice types Monarch exports at its top level.

`NDSlice` is Monarch's view of a strided slice, where ``coordinates``/``index`` take a *value*
(a global rank) and ``get`` a logical index; regency's `Slice` counts from local ranks. An
`NDSlice` wraps a `Slice`, and `Shape` accepts either.

`Selection` is the part of Monarch's selection expressions that names ranks dimension by
dimension: ``*`` (all), ``?`` (any one), ``i`` and ``a:b`` / ``a:b:step`` per dimension, comma
separated. Monarch's ``&`` and ``|`` combinators are refused with a message.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from typing import Any

from regency._mesh._checks import as_ints
from regency._mesh._rowmajor import check_index, ravel, unravel
from regency._mesh._slice import Slice

__all__ = ["NDSlice", "Selection"]


class NDSlice:
    """Offset, sizes and strides over global ranks, with Monarch's methods.

    Example:
        >>> s = NDSlice(offset=1, sizes=[2, 3], strides=[6, 2])
        >>> list(s), s.get(4), s.index(9), s.coordinates(9), s.nditem([1, 2])
        ([1, 3, 5, 7, 9, 11], 9, 4, [1, 1], 11)
    """

    __slots__ = ("_slice",)
    _slice: Slice

    def __init__(self, *, offset: int, sizes: Sequence[int], strides: Sequence[int]) -> None:
        self._slice = Slice(offset, tuple(sizes), tuple(strides))

    @classmethod
    def of(cls, view: Slice) -> NDSlice:
        """The NDSlice of a regency `Slice`."""
        return cls(offset=view.offset, sizes=view.sizes, strides=view.strides)

    def to_slice(self) -> Slice:
        """The regency `Slice` this wraps."""
        return self._slice

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return self._slice.ndim

    @property
    def offset(self) -> int:
        """The first global rank."""
        return self._slice.offset

    @property
    def sizes(self) -> list[int]:
        """The size of each dimension."""
        return list(self._slice.sizes)

    @property
    def strides(self) -> list[int]:
        """The stride of each dimension, in ranks."""
        return list(self._slice.strides)

    def get(self, index: int) -> int:
        """The value (global rank) at a row-major logical ``index``; inverse of `index`."""
        check_index(index, len(self), "index")
        return self._slice.global_rank(index)

    def index(self, value: int) -> int:
        """The row-major logical index of ``value``; ValueError if it is not in the slice."""
        try:
            return self._slice.local_rank(value)
        except ValueError:
            raise ValueError(f"value {value} not in slice") from None

    def coordinates(self, value: int) -> list[int]:
        """The coordinates of ``value``; ValueError if it is not in the slice."""
        return list(unravel(self.index(value), self._slice.sizes))

    def nditem(self, coordinates: Sequence[int]) -> int:
        """The value at ``coordinates``; IndexError if they are out of bounds."""
        coords = as_ints(coordinates, "coordinates", minimum=0)
        if len(coords) != self.ndim or any(c >= s for c, s in zip(coords, self._slice.sizes)):
            raise IndexError(f"coordinates {list(coords)} out of bounds for sizes {self.sizes}")
        return self._slice.global_rank(ravel(coords, self._slice.sizes))

    @staticmethod
    def from_list(ranks: Sequence[int]) -> list[NDSlice]:
        """One-dimensional slices covering ``ranks``: one per run of consecutive ranks."""
        runs: list[list[int]] = []
        for rank in ranks:
            if runs and rank == runs[-1][0] + runs[-1][1]:
                runs[-1][1] += 1
            else:
                runs.append([rank, 1])
        return [NDSlice(offset=start, sizes=[n], strides=[1]) for start, n in runs]

    @staticmethod
    def new_row_major(sizes: Sequence[int]) -> NDSlice:
        """The dense row-major slice of the given sizes, from rank 0."""
        return NDSlice.of(Slice.new_row_major(sizes))

    def __len__(self) -> int:
        return len(self._slice)

    def __iter__(self) -> Iterator[int]:
        return iter(self._slice.ranks())

    def __getitem__(self, i: int | slice) -> Any:
        ranks = self._slice.ranks()
        return tuple(ranks[i]) if isinstance(i, slice) else ranks[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NDSlice):
            return NotImplemented
        return self._slice == other._slice

    def __hash__(self) -> int:
        return hash(self._slice)

    def __repr__(self) -> str:
        return f"NDSlice(offset={self.offset}, sizes={self.sizes}, strides={self.strides})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (NDSlice.of, (self._slice,))


_TERM = re.compile(r"^(\*|\?|-?\d+|-?\d*:-?\d*(?::\d+)?)$")


class Selection:
    """A per-dimension selection of ranks: ``*``, ``?``, ``i`` or ``a:b[:step]`` per dimension.

    ``Selection.all()`` and ``Selection.any()`` cover every dimension; ``from_string("*, 0:4")``
    names them one by one (missing trailing dimensions mean ``*``). ``ranks(shape)`` gives the
    global ranks selected in a `Shape` (``?`` picks one at random).
    """

    __slots__ = ("_terms",)
    _terms: tuple[str, ...]

    def __init__(self) -> None:
        raise TypeError("make a Selection with Selection.all(), Selection.any() or "
                        "Selection.from_string(...)")

    @classmethod
    def _of(cls, terms: Sequence[str]) -> Selection:
        self = object.__new__(cls)
        self._terms = tuple(terms)
        return self

    @classmethod
    def all(cls) -> Selection:
        """Every rank."""
        return cls._of(["*"])

    @classmethod
    def any(cls) -> Selection:
        """One rank, chosen at random."""
        return cls._of(["?"])

    @classmethod
    def from_string(cls, input: str) -> Selection:  # noqa: A002 (Monarch's parameter name)
        """Parse ``"*, 0:4"`` style text (parentheses optional).

        Raises:
            ValueError: the text is not such a selection (``&`` and ``|`` are not supported).
        """
        text = input.strip()
        if text.startswith("(") and text.endswith(")"):
            text = text[1:-1]
        terms = [t.strip() for t in text.split(",")]
        for term in terms:
            if not _TERM.match(term):
                raise ValueError(
                    f"invalid selection {input!r}: term {term!r}; regency reads '*', '?', an "
                    "index or 'start:stop[:step]' per dimension, comma separated ('&' and '|' "
                    "are not supported: use mesh.slice(...) for the ranks you mean)")
        return cls._of(terms)

    def ranks(self, shape: Any) -> list[int]:
        """The global ranks of ``shape`` (a regency `Shape`) this selection names."""
        terms = list(self._terms)
        if len(terms) == 1 and terms[0] in ("*", "?"):
            terms = terms * max(shape.ndim, 1)
        if len(terms) > max(shape.ndim, 1) or (shape.ndim == 0 and terms not in (["*"], ["?"])):
            raise ValueError(f"selection {self} has more terms than {shape.extent} has "
                             "dimensions")
        picks: dict[str, int | slice] = {}
        for label, term, size in zip(shape.labels, terms, shape.extent.sizes):
            picks[label] = _term(term, size)
        return list(shape.select(**picks).ranks())

    def __repr__(self) -> str:
        return f"Selection({', '.join(self._terms)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selection):
            return NotImplemented
        return self._terms == other._terms

    def __hash__(self) -> int:
        return hash(self._terms)


def _term(term: str, size: int) -> int | slice:
    if term == "*":
        return slice(None)
    if term == "?":
        return random.randrange(size) if size else slice(0, 0)
    if ":" not in term:
        return int(term)
    parts = [int(p) if p else None for p in term.split(":")]
    return slice(*parts)
