"""Building blocks of the run generator (``bench.generator``).

One module per kind of text a real job leaves behind, so that each line kind has one place
that knows its format per version:

* ``base``     - the clock, the simulated processes and the cluster identity (hosts, pids, GPUs).
* ``eras``     - what changes between PyTorch releases (glog header, PG prefix, wordings).
* ``c10d``     - ProcessGroupNCCL / watchdog lines, per era.
* ``nccl``     - NCCL_DEBUG=INFO init output and WARN lines, per NCCL version.
* ``megatron`` - Megatron-LM stdout (startup chatter, iteration lines, memory report).
* ``elastic``  - torchrun agent output, the ChildFailedError summary, Slurm's own lines.
* ``pyspy``    - ``py-spy dump`` output.
* ``story``    - the timeline of one run: who prints what, when, and how each process ends.
* ``layout``   - where the lines land on disk for each launcher.

Nothing here is a parser: these modules only write text.
"""
