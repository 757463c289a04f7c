"""Controller scripts of the signal chaos tests (SIGTERM, SIGSTOP): each prints one JSON line
per stage and waits on its stdin where the test must act between stages.

Actors of these scripts leave a file ``cleanup-<pid>`` in the directory given as the first
argument when their ``__cleanup__`` runs.
"""

from __future__ import annotations

PRELUDE = r"""
import atexit, json, os, signal, sys, threading, time
from regency.actor import Actor, endpoint, this_host
import regency.actor as ra

OUT = sys.argv[1]
failures = []
failed = threading.Event()

def hook(failure):
    failures.append((time.time(), failure.report()))
    failed.set()

ra.unhandled_fault_hook = hook

def mark(name):
    with open(os.path.join(OUT, name), "w") as f:
        f.write("x")

def say(**kw):
    print(json.dumps(kw), flush=True)

class Marker(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def echo(self, x):
        return x

    def __cleanup__(self, exc):
        mark(f"cleanup-{os.getpid()}")

def pids(mesh):
    return sorted(mesh.pid.call().get(timeout=60).values())
"""

# SIGTERM of the controller: finally, atexit and the actors' __cleanup__ must run.
CONTROLLER_TERM = PRELUDE + r"""
atexit.register(mark, "atexit")
procs = this_host().spawn_procs(per_host={"gpus": 2})
m = procs.spawn("m", Marker)
try:  # "ready" from inside the try: the test's SIGTERM cannot come before it
    say(stage="ready", pids=pids(m))
    sys.stdin.readline()  # blocked here when SIGTERM comes
finally:
    mark("finally")
"""

# A handler the script installed itself is left alone.
USER_HANDLER = r"""
import signal, sys
def mine(sig, frame):
    print("user handler ran", flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, mine)
from regency.actor import this_host
procs = this_host().spawn_procs(per_host={"gpus": 1})
print("ready", signal.getsignal(signal.SIGTERM) is mine, flush=True)
sys.stdin.readline()
"""

# SIGTERM of one proc: its __cleanup__ runs and supervision names SIGTERM.
PROC_TERM = PRELUDE + r"""
procs = this_host().spawn_procs(per_host={"gpus": 2})
m = procs.spawn("m", Marker)
victim = m.slice(gpus=0).pid.call_one().get(timeout=60)
sent = time.time()
os.kill(victim, signal.SIGTERM)
failed.wait(60)
try:
    m.slice(gpus=0).pid.call_one().get(timeout=60)
    outcome = "answered"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"
say(victim=victim, outcome=outcome, detect_s=failures[0][0] - sent if failures else None,
    report=failures[0][1] if failures else "")
"""

# A worker is SIGTERMed (by the test) while this controller uses it.
WORKER_TERM = PRELUDE + r"""
from regency.actor import attach_to_workers
hosts = attach_to_workers([sys.argv[2]])
procs = hosts.spawn_procs(per_host={"gpus": 2})
m = procs.spawn("m", Marker)
say(stage="ready", pids=pids(m))
failed.wait(60)
say(stage="failed", at=failures[0][0] if failures else None,
    report=failures[0][1] if failures else "")
"""

# A proc is frozen (SIGSTOP) by the test during a call, then resumed (SIGCONT).
PROC_FROZEN = PRELUDE + r"""
procs = this_host().spawn_procs(per_host={"gpus": 2})
m = procs.spawn("m", Marker)
victim = m.slice(gpus=0).pid.call_one().get(timeout=60)
say(stage="ready", victim=victim)
sys.stdin.readline()  # the test froze it
pending = m.slice(gpus=0).echo.call_one("during")
others = m.slice(gpus=1).echo.call_one("other").get(timeout=60)
try:
    pending.get(timeout=1.0)
    frozen_outcome = "answered"
except TimeoutError:
    frozen_outcome = "TimeoutError"
say(stage="frozen", outcome=frozen_outcome, others=others)
sys.stdin.readline()  # the test resumed it
t0 = time.monotonic()
late = pending.get(timeout=60)
resumed_s = time.monotonic() - t0
after = sorted(m.echo.call("after").get(timeout=60).values())
say(stage="resumed", late=late, after=after, resumed_s=resumed_s, failures=len(failures))
"""

# A worker is frozen (SIGSTOP) by the test, then maybe resumed; then hosts.shutdown().
WORKER_FROZEN = PRELUDE + r"""
from regency.actor import attach_to_workers
hosts = attach_to_workers([sys.argv[2]])
procs = hosts.spawn_procs(per_host={"gpus": 1})
m = procs.spawn("m", Marker)
say(stage="ready", pids=pids(m))
sys.stdin.readline()  # the test froze the worker
sent = time.time()
failed.wait(60)
say(stage="lost", detect_s=failures[0][0] - sent if failures else None,
    report=failures[0][1] if failures else "")
sys.stdin.readline()  # the test resumed it (or not)
t0 = time.monotonic()
try:
    hosts.shutdown().get(timeout=60)
    outcome = "ok"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"
say(stage="shutdown", outcome=outcome, shutdown_s=time.monotonic() - t0)
"""
