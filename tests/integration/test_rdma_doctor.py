"""The doctor's data-plane report: every pair probed for real, with its transport and why."""

from __future__ import annotations

from regency._dataplane import doctor_report


def test_doctor_report_probes_every_pair() -> None:
    text = doctor_report()
    lines = text.splitlines()
    assert lines[0].startswith("data plane: pid ")
    pairs = [ln for ln in lines if " -> " in ln and ("ok" in ln or "FAILED" in ln)]
    assert len(pairs) >= 6, text  # controller and 2 procs: 6 ordered pairs
    assert all(" vm " in ln and " ok " in ln for ln in pairs[:6]), text
    assert "tcp data connections (the path across hosts), proc 0 -> proc 1: ok" in text
    assert "gpu:" in text
