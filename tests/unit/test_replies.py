"""Replies at the caller: tracebacks of classes from ``__main__`` name the script again."""

from __future__ import annotations


def test_tracebacks_of_main_classes_get_the_script_path_back(tmp_path, monkeypatch) -> None:
    import sys
    import types

    from regency._api._replies import with_sources

    script = tmp_path / "job.py"
    script.write_text("x = 1\n\ndef step():\n    raise ValueError('boom')\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    tb = ('Traceback (most recent call last):\n'
          '  File "<dynamic-code>", line 4, in step\n'
          'ValueError: boom\n')
    out = with_sources(tb)
    assert f'File "{script}", line 4, in step' in out
    assert "    raise ValueError('boom')" in out
    assert with_sources("no dynamic frames\n") == "no dynamic frames\n"
