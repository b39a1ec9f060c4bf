"""A real multi-node Ray cluster on one host: a head and N worker nodes, each its own raylet, on loopback.

For trying ``distmc run --workers N --address ...`` without a cluster, and for the test that makes batches cross
between raylets (``tests/test_multinode.py``). It uses Ray's own ``ray.cluster_utils.Cluster``.

Usage::

    python cluster/local_cluster.py --nodes 3          # prints the address, keeps the cluster up until Ctrl-C
    distmc run example --const N=6 --prop 'P=? [F "crash"]' --workers 3 --address <printed address>
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any


def start(nodes: int, cpus_per_node: int = 1) -> Any:
    """Start a head and ``nodes - 1`` worker nodes; returns the ``Cluster`` (``.address``, ``.shutdown()``)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus_per_node, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=cpus_per_node)
    cluster.wait_for_nodes()
    return cluster


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=3, help="Ray nodes in all, the head included")
    ap.add_argument("--cpus-per-node", type=int, default=1)
    a = ap.parse_args(argv)
    cluster = start(a.nodes, a.cpus_per_node)
    print(f"Ray cluster of {a.nodes} nodes at {cluster.address}; Ctrl-C stops it", flush=True)
    stop = False

    def on_signal(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop:
        time.sleep(0.5)
    cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
