"""Debugging across the mesh: ``breakpoint()`` in any actor, the ``regency debug`` console.

* :mod:`._rank` (procs): the breakpoint hook and the pdb whose terminal is the controller.
* :mod:`._service` (controller): the paused sessions, and the console's commands.
* :mod:`._console` (``regency debug``): the person's side, with readline.
* :mod:`._link`: a blocking authenticated connection, used by a paused rank and a console.
* :mod:`._discovery`: the per-user files by which a console finds its controller.
"""
