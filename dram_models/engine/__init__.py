"""The DRAM controller engine: Numba-compiled, event-driven, exact to the tick.

Two controllers model the same DRAM controller and give identical results where both
apply:

* :mod:`.general` -- the general controller: request streams with descriptors, gates,
  tile groups, outstanding caps and address translation feeding any number of channels
  with read and write queues, in one event loop (``general._loop``);
* :mod:`.reads` -- the lean controller: open-loop trace runs of reads, one channel at a
  time, written for speed (``reads.out_of_scope`` names what it does not cover).

What they share or stand on:

* :mod:`.inputs` -- what a run hands the engine, as NamedTuples of arrays (Numba
  passes each as one struct);
* :mod:`.layout` -- the index constants of the flat arrays both controllers use;
* :mod:`.timing` -- the helpers both inline: a command's rank- and bank-level bounds,
  the raising of next-allowed ticks when it issues, the command log, the refresh
  schedule;
* :mod:`.address` -- the address decode, bursts per descriptor, a trace's partition by
  channel;
* :mod:`.candidates`, :mod:`.tree` -- the general controller's dense candidates and
  their passes, and its event queue;
* :mod:`.state`, :mod:`.run` -- a general run's state, and the drivers that run its
  channels and collect its results (:class:`.run.Results`, the form both controllers'
  runs return).

The long loops (``general._loop``, ``reads.run_channel``) call helpers compiled with
``inline="always"``, so each still compiles to one function.

Numba's disk cache checks only the source file of the function it compiled: a cached
``general._loop`` does not notice an edit of :mod:`.timing`, whose helpers it inlines.
After editing a helper module, remove the engine's folders from Numba's cache directory
(:mod:`dram_models.jit_cache`: ``~/.cache/h2m2sim/numba`` unless ``NUMBA_CACHE_DIR``
says otherwise).
"""
