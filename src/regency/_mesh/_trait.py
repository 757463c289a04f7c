"""``MeshTrait``: the slicing and sizing API shared by every mesh-like user object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from regency._mesh._checks import unknown_dimension
from regency._mesh._extent import Extent
from regency._mesh._select import Selector, empty_selection
from regency._mesh._shape import Shape

_M = TypeVar("_M", bound="MeshTrait")


class MeshTrait:
    """Mixin giving a mesh-like object (ActorMesh, ProcMesh, HostMesh, ValueMesh) its algebra.

    A subclass provides two things:

    * ``_shape``: the `Shape` of this object, as a property or a plain attribute (for an
      attribute, declare ``_shape: Shape`` in the class body so type checkers accept
      ``self._shape = ...``; the base declares a read-only property);
    * ``_new_with_shape(shape)``: a copy of this object restricted or regrouped to ``shape``,
      which is always a subset of (or a relabelling of) the current shape's ranks.

    It then gets ``slice``, ``flatten``, ``split``, ``rename``, ``extent``, ``sizes``,
    ``size``, ``ndim`` and ``len()``. There is deliberately no ``__getitem__``: use
    ``slice(**coords)``.

    Example:
        >>> mesh.slice(gpus=slice(0, 4, 2)).flatten("even").sizes  # doctest: +SKIP
        {'even': 2}
    """

    __slots__ = ()

    if TYPE_CHECKING:

        @property
        def _shape(self) -> Shape:
            """The shape of this mesh; subclasses define it as an attribute or property."""
            raise NotImplementedError

    def _new_with_shape(self: _M, shape: Shape) -> _M:
        """Return a mesh of the same kind covering ``shape``; subclasses must override it."""
        raise NotImplementedError(f"{type(self).__name__} must implement _new_with_shape()")

    def slice(self: _M, **selections: Selector) -> _M:
        """Select along named dimensions; see `Shape.select`.

        Example: ``mesh.slice(host=0, gpus=slice(2, 6))`` keeps ``gpus`` and drops ``host``.
        """
        shape = self._shape
        selected = shape.select(**selections)
        empty = empty_selection(shape.labels, shape.slice.sizes, selections)
        if empty is not None:
            raise empty
        return self._new_with_shape(selected)

    def flatten(self: _M, name: str) -> _M:
        """Merge all dimensions into one called ``name``; see `Shape.flatten`."""
        return self._new_with_shape(self._shape.flatten(name))

    def split(self: _M, **arguments: Sequence[str] | int) -> _M:
        """Split dimensions, e.g. ``mesh.split(host=("dp", "pp"), pp=4)``; see `Shape.split`."""
        return self._new_with_shape(self._shape.split(**arguments))

    def rename(self: _M, **names: str) -> _M:
        """Rename dimensions, e.g. ``mesh.rename(host="node")``."""
        return self._new_with_shape(self._shape.rename(**names))

    @property
    def extent(self) -> Extent:
        """The labelled sizes of this mesh."""
        return self._shape.extent

    @property
    def sizes(self) -> dict[str, int]:
        """The sizes of this mesh as a plain ``{label: size}`` dict."""
        return dict(self._shape.extent)

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return self._shape.ndim

    def size(self, dim: str | Sequence[str] | None = None) -> int:
        """Return the number of elements along ``dim`` (one label or several), or in total.

        Raises:
            KeyError: a label is not a dimension of this mesh.
        """
        extent = self._shape.extent
        dims = extent.labels if dim is None else (dim,) if isinstance(dim, str) else dim
        total = 1
        for label in dims:
            if label not in extent:
                raise KeyError(str(unknown_dimension(label, tuple(extent.labels))))
            total *= extent[label]
        return total

    def __len__(self) -> int:
        return len(self._shape)
