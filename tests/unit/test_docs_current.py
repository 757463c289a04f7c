"""docs/porting.md and docs/configuration.md are what tools/porting_table.py writes today, and
every porting note names a Monarch name that exists in the surface data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import porting_table as pt  # noqa: E402
import surface_compare as sc  # noqa: E402
from porting_notes import NOTES  # noqa: E402


@pytest.fixture(autouse=True)
def _default_fault_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    """conftest records failures with a hook of its own; the page describes the default."""
    import regency.actor as ra

    monkeypatch.setattr(ra, "unhandled_fault_hook", ra._default_hook)


def test_porting_page_is_current() -> None:
    assert pt.PORTING.read_text() == pt.porting_page(), "run tools/porting_table.py"


def test_configuration_page_is_current() -> None:
    assert pt.CONFIGURATION.read_text() == pt.configuration_page(), \
        "run tools/porting_table.py"


def test_every_note_names_a_listed_name() -> None:
    idents = {e.ident for e in sc.entries(sc.load_surface())}
    assert not sorted(set(NOTES) - idents)
    assert {status for status, _how in NOTES.values()} <= {"same", "better", "different",
                                                          "not here"}


def test_nothing_of_issue_18_is_missing() -> None:
    page = pt.porting_page()
    assert "| missing |" not in page
