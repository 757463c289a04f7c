"""How each Monarch name differs in regency, where it does: the hand-written half of
docs/porting.md (tools/porting_table.py adds the names themselves from the surface data).

Key: ``"module:Name"`` or ``"module:Class.member"``. Value: (status, how). Status is one of
``same`` (the default for a name that is present and compatible, so it needs no entry),
``better``, ``different`` or ``not here``.
"""

from __future__ import annotations

NOTES: dict[str, tuple[str, str]] = {
    "monarch:mast_reserve": (
        "not here", "raises: MAST is Meta's internal scheduler; use `regency.job`"),
    "monarch:configure": (
        "better", "unknown keys raise naming the nearest key; durations also as seconds"),
    "monarch:get_global_config": (
        "different", "durations are seconds (floats), not `'30s'` strings; regency's own "
        "keys are listed too"),
    "monarch:Future": (
        "different", "regency's actor `Future`; the tensor engine's lands with issue 13"),
    "monarch.actor:Context": (
        "better", "the same, and `cancelled` tells an endpoint its caller cancelled the "
        "call, `time_remaining()` how long its deadline leaves it (ADR 0041)"),
    "monarch.actor:Future": (
        "better", "the same, and `cancel()`/`cancelled()` take a call back; a task "
        "cancelled while it awaits one cancels the call (ADR 0036); the futures of calls sent "
        "in a `deadline(seconds)` block fail with `DeadlineExceeded` at its deadline "
        "(ADR 0041)"),
    "monarch:Shape": (
        "better", "regency's `Shape` (labels over a `Slice`), with Monarch's members too; "
        "`select` takes Monarch's `(label, slice)` or several dimensions as keywords"),
    "monarch:Selection": (
        "different", "per-dimension expressions only (`*`, `?`, `i`, `a:b[:step]`); `&` and "
        "`|` raise; `ranks(shape)` evaluates one"),
    "monarch:Shape.from_bytes": (
        "different", "reads `bytes(shape)` of regency, not Monarch's bincode"),
    "monarch:Shape.region": ("different", "the shape itself (a `Region` is labels + slice)"),
    "monarch:Extent": ("same", "`regency.Extent`; `region` is a `Shape`"),
    "monarch.actor:attach": (
        "not here", "raises: regency has no client gateway; the controller connects to "
        "workers directly (`attach_to_workers`)"),
    "monarch.actor:attach_to_workers": (
        "different", "TLS comes from the `tls_*` configuration keys; `ca`/`private_key` "
        "must be `'trust_all_connections'`/None or name the configured files; a job secret "
        "authenticates every peer"),
    "monarch.actor:run_worker_loop_forever": (
        "different", "as `attach_to_workers` for `ca`/`private_key`; also `regency worker` "
        "on the command line"),
    "monarch.actor:ChannelTransport": (
        "different", "`Unix`, `TcpWithLocalhost`, `TcpWithHostname` select regency's unix/tcp "
        "transports; `Tls` is the `tls_*` keys; `Local`, `Quic` and the Meta ones raise"),
    "monarch.config:ChannelTransport": (
        "different", "see `monarch.actor:ChannelTransport`"),
    "monarch.actor:enable_transport": (
        "same", "accepts `'unix'`/`'ipc'`, `'tcp'`, `'tcp://...'` or a `ChannelTransport`"),
    "monarch.actor:ValueMesh": (
        "better", "also subscriptable: `vm[i]`, `vm[point]`, `vm[{'gpus': 1}]`"),
    "monarch.actor:Actor": (
        "better", "its mesh members (`slice`, `stop`, `extent`...) raise on an actor, as "
        "Monarch's do, and say what to call instead; a class can bound its mailbox "
        "(`__mailbox_limit__ = MailboxLimit(...)`, ADR 0042)"),
    "monarch.actor:Extent.region": (
        "different", "a `Shape` (labels over a strided `Slice`): the pair Monarch's `Region` is"),
    "monarch.actor:HostMesh.region": ("different", "a `Shape`, as `Extent.region`"),
    "monarch.actor:Extent.from_bytes": (
        "different", "reads `bytes(extent)` of regency, not Monarch's bincode"),
    "monarch.actor:Point.from_bytes": (
        "different", "reads `bytes(point)` of regency, not Monarch's bincode"),
    "monarch.actor:HostMesh.is_fake_in_process": (
        "different", "always False: every regency proc is a real process"),
    "monarch.actor:Instance.set_system": (
        "different", "sets `is_system`; regency has no admin view to hide it from"),
    "monarch.actor:ProcMesh.from_host_mesh": (
        "not here", "raises: Monarch's internal constructor over a Rust handle; use "
        "`host_mesh.spawn_procs(per_host=..., bootstrap=setup)`"),
    "monarch.actor:Port.return_undeliverable": (
        "same", "always true: a send to a dead receiver is reported by supervision"),
    "monarch.config:Encoding": (
        "different", "accepted for `default_encoding`, without effect (one wire format)"),
    "monarch.config:configure": (
        "better", "every Monarch key accepted (see docs/configuration.md); unknown keys "
        "suggest the nearest; durations as numbers too"),
    "monarch.config:get_global_config": (
        "different", "durations are seconds (floats), not `'30s'` strings"),
    "monarch.config:get_runtime_config": (
        "different", "only the keys set with `configure()` (Monarch lists every key); "
        "`get_global_config()` has them all"),
    "monarch:get_runtime_config": (
        "different", "only the keys set with `configure()` (Monarch lists every key); "
        "`get_global_config()` has them all"),
    "monarch:get_active_mesh": (
        "same", "Monarch's `DeviceMesh` surface: `names`, `sizes`, `size()`, `rank()`, "
        "`process_group()`, `slice()`/`mesh(dim=i)`, `flatten()`, `extent`, "
        "`activate()`/`deactivate()`; a slice or flattening has workers of its own"),
    "monarch.rdma:is_ibverbs_available": (
        "different", "always False: bytes move over shared memory and sockets"),
    "monarch.rdma:RDMAAction.fetch_add": (
        "same", "raises `NotImplementedError`, as Monarch 0.7.0's does"),
    "monarch.job:JobTrait.enable_telemetry": (
        "different", "records into regency's event store (SQLite) and serves its dashboard "
        "(`include_dashboard`); must come before the process's first regency call"),
    "monarch.job:JobTrait.enable_admin": (
        "different", "serves regency's JSON HTTP API and dashboard (`job.admin_url`, "
        "`job.admin_token`); there is no mesh admin agent"),
    "monarch.job:JobTrait.telemetry_query_client": (
        "different", "`.query(sql)` runs SQLite SQL over the job's store (Monarch: DataFusion "
        "over its sidecar); rows are dicts"),
    "monarch.job:JobTrait.profile": (
        "different", "a context manager: the calls and spans every proc recorded inside it, "
        "as a Chrome trace (`prof.trace`, `export_chrome_trace`); not torch's profiler"),
    "monarch.job:TelemetryConfig": (
        "different", "`snapshot_interval_secs` is how often procs and actors are sampled; "
        "`dashboard_port` falls back to a free port when taken"),
    "monarch.job:MeshAdminConfig": (
        "different", "`admin_addr` is where regency's JSON API listens (`host:port`)"),
    "monarch.job:SlurmJob": (
        "better", "Monarch's signature, and regency's older one (`nodes=`, `python=`, "
        "`port=`); `attach_to` raises (no gateway); `out_of_cluster` advertises worker IPs; "
        "`exclusive` defaults to False (regency's default before)"),
    "monarch.job:SlurmJob.share_node": (
        "different", "reads the partition's nodes with `sinfo` (no clusterscope)"),
    "monarch.job:PortForwarder": (
        "same", "bytes travel as actor messages over the job's authenticated connections"),
    "monarch.job:SERVICE_PROC_IDS_ENV": (
        "different", "`REGENCY_SERVICE_PROC_IDS`; ids only label addresses (regency names "
        "hosts by address)"),
    "monarch.job:SERVICE_PROC_RANK_ENV": ("different", "`REGENCY_SERVICE_PROC_RANK`"),
    "monarch.job:new_service_proc_id": (
        "different", "a `service<...>` string, not a Rust `ProcId`"),
    "monarch.job:hosts_from_config": (
        "better", "the mesh of the current context's job (`regency apply`), reattached; "
        "Monarch's starts two local workers"),
    "monarch.job:shell": (
        "same", "a pty on the remote host: Ctrl-C, resize and full-screen programs work"),
    "monarch.job:LocalJob.process": (
        "same", "the batch client started by `apply(client_script=...)`"),
    "monarch.rdma:RDMAAction.compare_and_swap": (
        "same", "raises `NotImplementedError`, as Monarch 0.7.0's does"),
}
