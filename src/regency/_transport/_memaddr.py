"""Addresses of Python buffers, and a copy between them that lets other threads run.

``ctypes.c_char.from_buffer`` refuses read-only memory; the buffer protocol itself does not,
so :func:`address_of` asks it directly. :func:`copy` is ``memmove`` through ctypes, which
releases the GIL while it copies (a slice assignment between memoryviews does not).
"""

from __future__ import annotations

import ctypes

__all__ = ["address_of", "copy"]


class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None
_CHUNK = 1 << 28


def address_of(mv: memoryview) -> int:
    """Start address of a C-contiguous memoryview (read-only ones too)."""
    pb = _PyBuffer()
    if _get_buffer(mv, ctypes.byref(pb), 0) != 0:  # PyBUF_SIMPLE: contiguous, raises otherwise
        raise ValueError("memory is not contiguous")
    try:
        return int(pb.buf or 0)
    finally:
        _release_buffer(ctypes.byref(pb))


def copy(dst: int, src: memoryview) -> None:
    """Copy the C-contiguous ``src`` to address ``dst``, without holding the GIL."""
    base = address_of(src)
    size = src.nbytes
    for offset in range(0, size, _CHUNK):
        ctypes.memmove(dst + offset, base + offset, min(_CHUNK, size - offset))
