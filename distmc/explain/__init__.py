"""Why a property holds with the value it has: most probable paths, per-state values, a picture.

* :mod:`distmc.explain.traces`: the K most probable paths of the induced DTMC to the property's target;
* :mod:`distmc.explain.values`: the property's value in every explored state, BFS depths, Parquet output;
* :mod:`distmc.explain.plot`: a heatmap of the values over two variables with the most probable path on it.
"""
