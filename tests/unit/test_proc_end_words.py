"""The words and kind of an actor lost with its proc (``_supervision/_reasons``)."""

from __future__ import annotations

import pytest

from regency._supervision._reasons import proc_failure_kind, proc_lost_cause, process_failed


@pytest.mark.parametrize(("cause", "said", "kind"), [
    ("exited with code 3", "exited with non-zero code 3", "exit"),
    ("exited with code 0", "exited with code 0", "exit"),  # an os._exit(0) in an endpoint
    ("killed by signal SIGKILL", "failed: Killed(sig=9)", "signal"),
    ("killed by signal SIGKILL (out of memory: the kernel's OOM killer ended it)",
     "failed: Killed(sig=9)", "oom"),
    ("was lost: the host h stopped answering for 3.0s",
     "was lost: the host h stopped answering for 3.0s", "lost"),
    ("lost with the fork server", "lost with the fork server", "lost"),
    ("stopped because its worker w received SIGTERM (the proc exited with code 0)",
     "stopped because its worker w received SIGTERM (the proc exited with code 0)", "signal"),
])
def test_a_procs_end_in_words_and_kind(cause: str, said: str, kind: str) -> None:
    assert process_failed(cause) == said
    assert proc_failure_kind(cause) == kind
    extra = "" if said == cause else f" (the proc {cause})"
    assert proc_lost_cause(cause) == f"the process this actor was running on {said}{extra}"
