"""The Ray driver: W actors, each owning the states whose packed key hashes to it, exploring level by level.

Every actor (:class:`PartitionActor`) builds its own model, kernel and policy replica from the run's
:class:`~distmc.pipeline.Job`. Ownership: ``owner = mix(key) mod W`` (:func:`owner_of`, a splitmix64 mix of the key's
words, so that the packed keys' regular low bits do not decide it).

Termination and numbering: level-synchronous breadth-first search with a barrier per level. One level is:

1. ``expand``: every actor expands its frontier (its states of the current level, in global-id order) in batches,
   keeps the rows, and sends each owner the distinct successor keys it found for it, as an Arrow record batch
   (``key``, and ``occ`` = position of the key's first occurrence: source global id x 2^20 + branch index);
2. ``lookup``: every owner looks the keys up in its visited set, takes the unknown ones in (the new states) and
   reports each new state's first occurrence to the driver;
3. the driver sorts all new states of the level by first occurrence and hands out global ids in that order: this
   is exactly the order in which the in-process driver numbers them (by first occurrence in the sequence of
   successors, sources in id order), so any W gives the identical model, state for state;
4. ``answer``: every owner sends each source the global ids of the keys it asked about; ``store``: the sources
   turn their rows' successor keys into global ids and keep the rows.

When the next level surely runs (:meth:`~distmc.distributed.stops.LevelStops.goes_on`: states to expand, within the
horizon, no memory or time limit waiting on the counts), ``store`` and the next level's ``expand`` are one call
(``store_expand``): a round trip and a barrier less a level; a Ctrl-C stop takes that expansion back (``unexpand``).

The fixpoint is the first level that finds no new state anywhere (the driver sums the counts of step 2). States
and transitions never cross as Python objects: keys travel as Arrow arrays, ids and rows as numpy arrays through
Ray's object store. A lone actor (W = 1) owns every successor: it runs a level in one call
(:meth:`PartitionActor.level_solo`), its visited set numbering the new states as steps 1-4 would. Every actor merges
its rows as it keeps them (branches sorted by target, duplicates added up: the reducer's routine, spread over the
workers). The reducer then takes the partitions' rows in global order (:func:`gather`: as they are, read-only in
Ray's object store, when they are in that order already, else placed row by row) and uses them without a merge.

A finished run's actors are kept, emptied, for the next run of the same shape in this process (:func:`explore_ray`'s
``keep_workers``, :func:`release_workers`).
"""

from distmc.distributed.exchange import owner_of
from distmc.distributed.pool import gpu_share, release_workers
from distmc.distributed.rows import explore_ray

__all__ = ["explore_ray", "gpu_share", "owner_of", "release_workers"]
