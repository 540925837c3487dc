# kazoo as lockrun's rival (tests/integration/zk_cli.rs):
# `kazoo_rival.py HOSTS PATH DIR default|extra` takes kazoo's Lock at PATH
# (`extra`: with extra_lock_patterns=["-lock-"], so that it sees Curator's
# and lockrun's nodes), then writes the wall clock in ns to DIR/beat every
# 10 ms until DIR/go exists, and lets go.
import os
import sys
import time

from kazoo.client import KazooClient

hosts, path, work, mode = sys.argv[1:5]
zk = KazooClient(hosts=hosts, timeout=4.0)
zk.start(timeout=30)
if mode == "extra":
    lock = zk.Lock(path, "kazoo-rival", extra_lock_patterns=["-lock-"])
else:
    lock = zk.Lock(path, "kazoo-rival")


def beat():
    with open(os.path.join(work, "beat"), "a") as f:
        f.write("%d\n" % time.time_ns())


with lock:
    while not os.path.exists(os.path.join(work, "go")):
        beat()
        time.sleep(0.01)
    beat()
zk.stop()
zk.close()
