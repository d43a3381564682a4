#!/usr/bin/env python3
"""Delegations through etcd (`make bench-cluster`): a 3-member etcd cluster and a host, each in
a network namespace of its own (Tests/Scripts/cluster.py), and the cluster benchmark run as
that host; with --fsbench, then the metadata jobs of fsbench.py as that host, on a mount with
--cluster (alone in the cluster) paired with the same build's mount without it. Everything is
torn down afterwards, even on failure."""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "Scripts"))
import cluster  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("binary", help="the CoordFSClusterBench executable")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--fsbench", metavar="COORDFS", help="a coordfs build: also run fsbench.py's metadata jobs")
    parser.add_argument("--repeats", type=int, default=3, help="fsbench.py's rounds")
    arguments = parser.parse_args()
    binary = os.path.abspath(arguments.binary)
    if not os.access(binary, os.X_OK):
        parser.error(f"{binary}: not an executable file")
    with tempfile.TemporaryDirectory(prefix="coordfs-clusterbench-") as state:
        try:
            info = cluster.up(state, members=3, hosts=1)
            status = cluster.exec_in(state, "h1", [binary, str(arguments.rounds)])
            if status == 0 and arguments.fsbench:
                urls = ",".join(url.removeprefix("http://") for url in info["client_urls"])
                here = os.path.dirname(os.path.abspath(__file__))
                status = cluster.exec_in(state, "h1", [
                    sys.executable, os.path.join(here, "fsbench.py"), os.path.abspath(arguments.fsbench),
                    "--baseline", os.path.abspath(arguments.fsbench), "--coordfs-only", "--repeats", str(arguments.repeats),
                    "--jobs", "create+close,stat,unlink",
                    "--column-options", f"--cluster etcd://{urls} --cluster-store bench --host-name h1"])
        finally:
            cluster.down(state, quiet=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
