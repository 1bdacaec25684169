"""pbd.low_latency: a client's message batching turned off on both sides of its connection, nothing
else changed (the scheduler's connections to workers keep Dask's), no message lost when many go at
once, and bad arguments refused with a message naming them."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import dask_and_futhark_or_skip, library_or_source  # noqa: E402

da, distributed = dask_and_futhark_or_skip()

import pybridge.dask as pbd  # noqa: E402

SAXPY = library_or_source("saxpy")


def _intervals(client_id, dask_scheduler=None):
    return (dask_scheduler.client_comms[client_id].interval,
            sorted({b.interval for b in dask_scheduler.stream_comms.values()}))


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


def test_both_sides_of_the_clients_connection_send_at_once_and_only_those(client):
    workers_before = client.run_on_scheduler(_intervals, client.id)[1]
    pbd.low_latency(client)
    assert client.scheduler_comm.interval == 0
    mine, workers = client.run_on_scheduler(_intervals, client.id)
    assert mine == 0 and workers == workers_before and workers != [0]  # Dask's own for workers
    with distributed.Client(client.scheduler.address) as other:  # another client keeps Dask's
        assert other.scheduler_comm.interval > 0 and other.run_on_scheduler(_intervals, other.id)[0] > 0
    pbd.low_latency(client, 0.001)
    assert client.scheduler_comm.interval == 0.001 and client.run_on_scheduler(_intervals, client.id)[0] == 0.001
    pbd.low_latency(client)


def test_many_results_at_once_all_arrive_and_are_right(client):
    pbd.low_latency(client)
    futures = client.map(lambda i: i * i, range(500), pure=False)  # 500 reports, no batching delay
    assert client.gather(futures) == [i * i for i in range(500)]
    x = da.arange(4096, chunks=64, dtype=np.float32)
    saxpy = pbd.entry(SAXPY, "saxpy")
    got = pbd.map_blocks(saxpy, np.float32(2), x, x).compute()
    np.testing.assert_array_equal(got, 3 * np.arange(4096, dtype=np.float32))
    # released results and a new graph right after (a loop's step): nothing held back or lost
    for step in range(20):
        f = client.submit(np.add, step, 1, pure=False)
        assert f.result(timeout=30) == step + 1
        del f


@pytest.mark.parametrize("bad", [-1, 2, "0", None, True, float("nan")])
def test_a_bad_interval_is_refused_naming_it(client, bad):
    with pytest.raises(ValueError, match="interval must be a number of seconds from 0 to 1"):
        pbd.low_latency(client, bad)


@pytest.mark.parametrize("bad", [None, object(), "tcp://127.0.0.1:8786"])
def test_something_else_than_a_client_is_refused_naming_it(bad):
    with pytest.raises(TypeError, match="client must be a connected distributed.Client"):
        pbd.low_latency(bad)
