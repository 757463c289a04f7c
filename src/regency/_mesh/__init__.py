"""The pure mesh algebra: extents, points, strided slices, shapes and the MeshTrait mixin.

Nothing here does I/O or imports asyncio, socket, threading, subprocess or selectors (a unit
test checks it), so the runtime, the wire layer and user code can all share it.

* `Extent`: label -> size, in dimension order.
* `Point`: one position in an extent, by local row-major rank and by coordinates.
* `Slice`: offset, sizes and strides over the flat space of global ranks.
* `Shape`: labels over a slice, with ``select``, ``flatten``, ``split`` and ``rename``.
* `MeshTrait`: the ``slice``/``flatten``/``split``/``rename``/``size`` API of meshes.
"""

from __future__ import annotations

from regency._mesh._extent import Extent
from regency._mesh._ndslice import NDSlice, Selection
from regency._mesh._point import Point
from regency._mesh._select import Selector
from regency._mesh._shape import Shape
from regency._mesh._slice import Slice
from regency._mesh._trait import MeshTrait

__all__ = ["Extent", "MeshTrait", "NDSlice", "Point", "Selection", "Selector", "Shape", "Slice"]
