"""Job launchers: start ``regency worker`` hosts with a scheduler's own tools and attach.

* ``_base``  — :class:`Job` (spec, cached state, reattach, secret) and :class:`JobState`;
* ``_cache`` — the JSON state files under ``~/.cache/regency/jobs``;
* ``_local`` — :class:`LocalJob`: worker subprocesses on this machine;
* ``_ssh``   — :class:`SSHJob`: workers started over ``ssh``;
* ``_slurm`` — :class:`SlurmJob`: one ``sbatch`` whose ``srun`` starts the workers;
* ``_k8s``   — manifests for a headless Service and a StatefulSet of workers;
* ``_boot``  — the worker bootstrap run by ``srun`` (writes a rendezvous file, then serves).

The public names are re-exported by :mod:`regency.job`.
"""
