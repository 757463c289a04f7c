"""The table of configuration keys: regency's own, and every one of Monarch 0.7.0's.

Pure data. Each key has a kind (how a value is read), a default and a line saying what it does
here. A Monarch key is one of three things:

* the same key as regency's (``cleanup_timeout``, ``max_cast_fanout``, ...);
* another name for a regency key (``ALIASES``): setting either sets both, and it takes effect;
* accepted without effect (``MONARCH_ONLY``): its value is kept and shown by
  ``get_global_config()``, and the reason it has no effect here is in ``NO_EFFECT``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._config_types import ChannelTransport, Encoding

KINDS = ("bool", "int", "float", "duration", "str", "transport", "encoding", "optional_int")


@dataclass(frozen=True)
class Key:
    """One configuration key: how its values are read, its default, what it does."""

    name: str
    kind: str
    default: Any
    doc: str


def _key(name: str, kind: str, default: Any, doc: str) -> Key:
    assert kind in KINDS, kind
    return Key(name, kind, default, doc)


MIB = 1024 * 1024

REGENCY_KEYS: dict[str, Key] = {k.name: k for k in (
    _key("default_transport", "transport", "unix",
         "how procs listen: 'unix' (one machine) or 'tcp'; a ChannelTransport is accepted"),
    _key("enable_log_forwarding", "bool", True,
         "forward procs' stdout/stderr to the controller (Monarch's default is False)"),
    _key("prefix_with_rank", "bool", True, "prefix forwarded lines with the proc's rank"),
    _key("output_json", "bool", False,
         "show forwarded lines as JSON objects, one per line: mesh, coords, stream, line, "
         "ts (alike lines aggregated by logging_option: count and procs, a list of "
         "{mesh, coords}, instead of mesh and coords)"),
    _key("order_output", "bool", True,
         "what a proc printed shows before the result of the call it answered: a "
         "this_host() proc's reply waits until its lines are read; a worker's proc sends "
         "a mark before it and the controller's get() waits for the lines (costs a "
         "printing call a wake-up of the controller, or the worker agent's hop)"),
    _key("hang_notice_after", "duration", 120.0,
         "when the controller's main thread has waited this long for one result (get(), "
         "or an await of its asyncio code), print once what it waits for and the "
         "callees' stacks (the wait goes on); 0: never"),
    _key("kill_proc_descendants", "bool", True,
         "when a proc ends, end the processes it started (SIGTERM, SIGKILL 2 s later); "
         "off, they live on until the job's host agent ends (the controller exits, the "
         "worker is released)"),
    _key("tail_log_lines", "int", 20,
         "lines of each proc's output kept for failure reports (Monarch's default is 0)"),
    _key("spawn_timeout", "duration", 30.0, "how long a worker may take to spawn a proc"),
    _key("connect_timeout", "duration", 30.0, "how long to keep trying to reach a peer"),
    _key("cleanup_timeout", "duration", 3.0, "grace before leftover procs are killed"),
    _key("stop_actor_timeout", "duration", 10.0, "how long an actor may take to stop"),
    _key("pending_message_timeout", "duration", 30.0,
         "how long a message waits for an actor that is not spawned yet"),
    _key("max_cast_fanout", "int", 16, "children per relay in a multicast tree"),
    _key("socket_buffer_bytes", "int", 4 * MIB, "kernel socket buffer size"),
    _key("send_high_water_bytes", "int", 4 * MIB, "bytes queued per connection before "
         "senders wait (flow control)"),
    _key("mailbox_high_water_bytes", "int", 4 * MIB, "bytes queued per mailbox before the "
         "connection is throttled"),
    _key("loop_send_block_limit", "duration", 1.0,
         "longest a send on an event loop may block before it queues instead"),
    _key("shm_min_bytes", "int", MIB, "arguments at least this big travel in shared memory"),
    _key("shm_pool_bytes", "int", 1024 * MIB, "size of the shared-memory pool"),
    _key("fail_fast_exit_deadline", "duration", 5.0,
         "how long fail-fast waits for procs to stop before exiting"),
    _key("debug_post_mortem", "bool", False,
         "pause a rank in the debugger at any uncaught endpoint exception (regency debug)"),
    _key("deadlock_probe_after", "duration", 1.0,
         "an endpoint's wait on a call that lasts this long is checked for a cycle of calls "
         "(0: never)"),
    _key("timeout_stack_dump", "bool", True,
         "a Future.get(timeout>=1s) that expires shows where the callee is stuck"),
    _key("log_dir", "str", "", "where every proc's whole output is kept (default: "
         "/tmp/regency-<uid>/logs)"),
    _key("observe", "bool", False,
         "record the job's events into observe_dir/<job>.db (docs/observability.md)"),
    _key("observe_dir", "str", "", "where job databases go (default: .regency/jobs)"),
    _key("observe_call_rate", "int", 2000,
         "calls each process records one by one per second (all are counted)"),
    _key("observe_retention_secs", "duration", 3600.0,
         "while the job runs, rows of calls, call counts, logs, spans and metrics older "
         "than this are deleted (0: keep all; as Monarch's TelemetryConfig.retention_secs)"),
    _key("observe_max_rows", "int", 0,
         "most rows kept in each of those tables, the oldest deleted first (0: no limit)"),
    _key("observe_sample_interval", "duration", 1.0,
         "how often each process samples its procs and actors (CPU, memory, queues); 0: "
         "only when it ends"),
    _key("dashboard", "bool", False,
         "serve the JSON HTTP API and the web dashboard from the controller"),
    _key("dashboard_addr", "str", "127.0.0.1:0", "where the dashboard listens"),
    _key("sigterm_grace", "duration", 20.0,
         "after SIGTERM, how long the controller's cleanup may take before it exits with 143"),
    _key("malloc_reuse", "bool", True, "reuse receive buffers"),
    _key("gc_freeze", "bool", True,
         "when the controller's runtime starts, move the objects alive then out of the "
         "garbage collector's passes (gc.freeze): cheaper bursts of calls; an object frozen "
         "then that later dies in a reference cycle is not reclaimed"),
    _key("borrow_reads", "bool", True, "borrow receive buffers for unpickling"),
    _key("borrow_spin", "duration", 0.0001, "how long a borrowed read spins before sleeping"),
    _key("borrow_spin_busy", "bool", False, "spin even when the machine is busy"),
    _key("loop_spin", "duration", 0.0001,
         "how long a proc's event loop keeps polling after it handled a message before it "
         "sleeps: a faster next call to its async actors (0: never; never on a busy machine "
         "unless borrow_spin_busy)"),
    _key("borrow_linger", "duration", 0.01,
         "how long a connection a borrowed read just read stays off the event loop, for the "
         "next borrowed read (0: back at once)"),
    _key("heartbeat_interval", "duration", 0.5, "how often host agents report they live"),
    _key("tls_cert", "str", "", "certificate file for TLS between machines"),
    _key("tls_key", "str", "", "private key file for TLS between machines"),
    _key("tls_ca", "str", "", "CA file that peers' certificates must chain to"),
    _key("host_lost_timeout", "duration", 3.0,
         "silence after which a host counts as lost"),
    _key("handshake_timeout", "duration", 10.0, "how long a peer may take to authenticate"),
    _key("handshake_max_pending", "int", 512, "handshakes in progress per listener, at most"),
    _key("handshake_max_per_source", "int", 64, "handshakes in progress per source, at most"),
    _key("collective_timeout", "duration", 600.0,
         "how long a rank of a tensor-engine collective (reduce, process_group) waits for "
         "the others before the op fails; set when a mesh's first collective starts"),
    _key("codec_max_frame_length", "int", 1 << 40,
         "largest message (header and buffers together) a connection accepts, in bytes "
         "(Monarch's default is 10 GiB; regency's is 1 TiB, in effect no ceiling)"),
)}

# Monarch key -> the regency key it sets and reads.
ALIASES: dict[str, str] = {
    "pending_actor_delivery_timeout": "pending_message_timeout",
    "server_heartbeat_interval": "heartbeat_interval",
    "supervision_watchdog_timeout": "host_lost_timeout",
    "channel_reconnect_timeout": "connect_timeout",
    "mesh_attach_config_timeout": "connect_timeout",
    "host_spawn_ready_timeout": "spawn_timeout",
}

_TELEMETRY = "regency's events and metrics are configured by its own introspection API"
_ADMIN = "regency has no mesh admin HTTP server (`regency top` and `regency debug` talk to " \
         "the job directly)"
_IBVERBS = "regency moves RDMABuffer bytes over shared memory and sockets (no ibverbs)"
_RUST = "a detail of Monarch's Rust runtime that regency does not have"
_ORDER = "regency always delivers one sender's messages in order"

# Monarch key -> (kind, Monarch's default, why it has no effect here).
MONARCH_ONLY: dict[str, tuple[str, Any, str]] = {
    "actor_spawn_max_idle": ("duration", 30.0, _RUST),
    "channel_net_rx_buffer_full_check_interval": ("duration", 5.0, _RUST),
    "channel_tcp_congestion": ("str", "", "regency leaves TCP congestion control to the host"),
    "channel_tcp_keepalive_idle": ("duration", 60.0, "regency detects dead peers with "
                                   "heartbeats (heartbeat_interval, host_lost_timeout)"),
    "default_encoding": ("encoding", Encoding.Multipart, "regency has one wire format"),
    "enable_dest_actor_reordering_buffer": ("bool", True, _ORDER),
    "enable_file_capture": ("bool", False, "procs' output is forwarded, not written to files"),
    "enable_otel_metrics": ("bool", True, _TELEMETRY),
    "enable_otel_tracing": ("bool", True, _TELEMETRY),
    "enable_recorder_tracing": ("bool", True, _TELEMETRY),
    "enable_sqlite_tracing": ("bool", False, _TELEMETRY),
    "enable_unawaited_python_task_traceback": ("bool", False, _RUST),
    "file_log_level": ("str", "", "procs' output is forwarded, not written to files"),
    "force_file_log": ("bool", False, "procs' output is forwarded, not written to files"),
    "forwarder_flush_timeout": ("duration", 5.0, "every line a proc printed is forwarded "
                                "before its mesh stops; there is no flush timer"),
    "get_actor_state_max_idle": ("duration", 30.0, _RUST),
    "get_proc_state_max_idle": ("duration", 60.0, _RUST),
    "max_cast_dimension_size": ("int", 16, "regency's relay trees are shaped by "
                                "max_cast_fanout alone"),
    "mesh_admin_addr": ("str", "[::]:1729", _ADMIN),
    "mesh_admin_config_dump_bridge_timeout": ("duration", 5.0, _ADMIN),
    "mesh_admin_max_concurrent_resolves": ("int", 2, _ADMIN),
    "mesh_admin_pyspy_bridge_timeout": ("duration", 13.0, _ADMIN),
    "mesh_admin_pyspy_client_timeout": ("duration", 20.0, _ADMIN),
    "mesh_admin_pyspy_max_profile_duration": ("duration", 300.0, _ADMIN),
    "mesh_admin_pyspy_timeout": ("duration", 10.0, _ADMIN),
    "mesh_admin_query_child_timeout": ("duration", 0.1, _ADMIN),
    "mesh_admin_resolve_actor_timeout": ("duration", 0.2, _ADMIN),
    "mesh_admin_single_host_timeout": ("duration", 3.0, _ADMIN),
    "mesh_admin_tree_timeout": ("duration", 10.0, _ADMIN),
    "mesh_bootstrap_enable_pdeathsig": ("bool", True, "regency's procs always exit when "
                                        "their host agent or controller is gone"),
    "mesh_orphan_timeout": ("duration", 60.0, "orphaned procs are found by their "
                            "controller's lease (host_lost_timeout)"),
    "mesh_proc_spawn_max_idle": ("duration", 30.0, "spawning is bounded by spawn_timeout"),
    "mesh_terminate_concurrency": ("int", 16, "regency stops every proc of a mesh at once"),
    "mesh_terminate_timeout": ("duration", 10.0, "stopping is bounded by stop_actor_timeout "
                               "and cleanup_timeout"),
    "message_ack_every_n_messages": ("int", 1000, _RUST),
    "message_ack_time_interval": ("duration", 0.5, _RUST),
    "message_delivery_timeout": ("duration", 30.0, "a message to a dead actor fails at once "
                                 "through supervision, not after a timeout"),
    "message_latency_sampling_rate": ("float", 0.01, _TELEMETRY),
    "message_ttl_default": ("int", 64, _RUST),
    "monarch_log_suffix": ("str", "", "procs' output is forwarded, not written to files"),
    "otel_metric_export_interval": ("duration", 1.0, _TELEMETRY),
    "proc_launcher_kind": ("str", "", "regency's host agent forks procs from a preloaded "
                           "fork server"),
    "proc_stop_max_idle": ("duration", 30.0, "stopping is bounded by stop_actor_timeout"),
    "process_exit_timeout": ("duration", 10.0, "stopping is bounded by cleanup_timeout"),
    "process_memory_metric_interval": ("duration", 300.0, _TELEMETRY),
    "pyspy_bin": ("str", "", "stack dumps come from each proc's own runtime, not py-spy"),
    "rdma_allow_tcp_fallback": ("bool", True, _IBVERBS + "; sockets are always allowed"),
    "rdma_cq_poller_per_device": ("bool", True, _IBVERBS),
    "rdma_disable_ibverbs": ("bool", False, _IBVERBS),
    "rdma_host_odp": ("bool", False, _IBVERBS),
    "rdma_ibverbs_target": ("str", "", _IBVERBS),
    "rdma_max_chunk_size_mb": ("int", 64, _IBVERBS),
    "rdma_max_nics_per_buffer": ("optional_int", None, _IBVERBS),
    "rdma_min_stripe_size_kb": ("int", 512, _IBVERBS),
    "rdma_peer_device_affinity": ("str", "", _IBVERBS),
    "rdma_qp_init_timeout": ("duration", 30.0, _IBVERBS),
    "rdma_qps_per_cq": ("int", 64, _IBVERBS),
    "rdma_qps_per_peer": ("int", 4, _IBVERBS),
    "rdma_runtime_worker_threads": ("int", 4, _IBVERBS),
    "rdma_tcp_fallback_parallelism": ("int", 1, _IBVERBS),
    "read_log_buffer": ("int", 100, _RUST),
    "scuba_log_enter_exit": ("bool", False, "Scuba is Meta-internal"),
    "sequencer_max_locked_keys": ("int", 128, _RUST),
    "small_write_threshold": ("int", 256, "regency coalesces small writes per loop iteration"),
    "split_max_buffer_age": ("duration", 0.05, _RUST),
    "split_max_buffer_size": ("int", 5, _RUST),
    "stop_grace_period": ("duration", 10.0, "stopping is bounded by stop_actor_timeout"),
    "terminated_snapshot_retention": ("int", 100, _ADMIN),
    "tokio_worker_threads": ("optional_int", None, "regency runs one asyncio loop per proc, "
                             "not tokio"),
    "use_direct_spawn": ("bool", False, "regency's host agent forks procs from a preloaded "
                         "fork server"),
}


def all_keys() -> dict[str, Key]:
    """Every key: regency's, Monarch's aliases (the target's kind and default) and the rest."""
    keys = dict(REGENCY_KEYS)
    for alias, target in ALIASES.items():
        base = REGENCY_KEYS[target]
        keys[alias] = Key(alias, base.kind, base.default, f"the same as {target}: {base.doc}")
    for name, (kind, default, why) in MONARCH_ONLY.items():
        keys[name] = _key(name, kind, default, f"accepted without effect: {why}")
    return keys


KEYS = all_keys()

__all__ = ["ALIASES", "KEYS", "MONARCH_ONLY", "REGENCY_KEYS", "ChannelTransport", "Key"]
