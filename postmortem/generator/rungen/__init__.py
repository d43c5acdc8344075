"""Building blocks of the run generator (``postmortem.generator``).

One module per kind of text a real job leaves behind, so that each line kind has one place
that knows its format per version:

* ``base``     - the clock, the simulated processes and the cluster identity (hosts, pids, GPUs).
* ``eras``     - what changes between PyTorch releases (glog header, PG prefix, wordings).
* ``c10d``     - ProcessGroupNCCL / watchdog lines, per era.
* ``nccl``     - NCCL_DEBUG=INFO init output and WARN lines, per NCCL version.
* ``megatron`` - Megatron-LM stdout (startup chatter, iteration lines, memory report).
* ``elastic``  - torchrun agent output, the ChildFailedError summary, Slurm's own lines.
* ``pyspy``    - ``py-spy dump`` output.
* ``envdump``  - the per-node ``env`` dump.
* ``run``      - the data model of a generated run (attempts, waiting ranks).
* ``story``    - the timeline of one run: startup, training, the scenario (who prints what, when).
* ``endings``  - how the processes end, per launcher (agent polls, srun kill, Slurm cancel).
* ``layout``   - where the lines land on disk for each launcher.

Nothing here is a parser: these modules only write text.
"""
