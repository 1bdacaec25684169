"""pbd.low_latency: a client's message batching turned off on both sides of its connection and only
there (another client, and the scheduler's connections to workers, keep Dask's), over TCP as over
in-process connections, on synchronous and asynchronous clients; no message lost when many go at
once; bad arguments and closed clients refused with a message naming them."""

from __future__ import annotations

import asyncio
from fractions import Fraction

import numpy as np
import pytest

from conftest import dask_and_futhark_or_skip, library_or_source  # noqa: E402

da, distributed = dask_and_futhark_or_skip()

import pybridge.dask as pbd  # noqa: E402

SAXPY = library_or_source("saxpy")


def _intervals(client_id, dask_scheduler=None):
    return (dask_scheduler.client_comms[client_id].interval,
            sorted({b.interval for b in dask_scheduler.stream_comms.values()}))


@pytest.fixture(scope="module", params=["tcp://", "inproc://"])
def cluster(request):
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False, protocol=request.param,
                                  dashboard_address=":0") as c:
        yield c


@pytest.fixture
def client(cluster):
    with distributed.Client(cluster) as c:
        yield c


def test_both_sides_of_the_clients_connection_and_only_those(cluster, client):
    with distributed.Client(cluster) as other:  # connected first: it must keep Dask's intervals
        mine0, workers0 = client.run_on_scheduler(_intervals, client.id)
        assert mine0 > 0 and client.scheduler_comm.interval > 0  # Dask's own, before
        assert pbd.low_latency(client) is None
        assert client.scheduler_comm.interval == 0
        mine, workers = client.run_on_scheduler(_intervals, client.id)
        assert mine == 0 and workers == workers0 and 0 not in workers
        assert other.scheduler_comm.interval > 0 and other.run_on_scheduler(_intervals, other.id)[0] == mine0
    for value in (0.001, np.float32(0.002), np.int64(0), Fraction(1, 1000)):
        pbd.low_latency(client, value)
        assert client.scheduler_comm.interval == float(value) == client.run_on_scheduler(_intervals, client.id)[0]


def test_many_results_at_once_all_arrive_and_are_right(client):
    pbd.low_latency(client)
    futures = client.map(lambda i: i * i, range(500), pure=False)  # 500 reports, no batching delay
    assert client.gather(futures) == [i * i for i in range(500)]
    x = da.arange(4096, chunks=64, dtype=np.float32)
    got = pbd.map_blocks(pbd.entry(SAXPY, "saxpy"), np.float32(2), x, x).compute()
    np.testing.assert_array_equal(got, 3 * np.arange(4096, dtype=np.float32))
    # released results and a new graph right after (a loop's step): nothing held back or lost
    for step in range(50):
        f = client.submit(np.add, step, 1, pure=False)
        assert f.result(timeout=30) == step + 1
        del f


def test_an_asynchronous_client_is_set_on_both_sides_when_awaited(cluster):
    async def main():
        async with distributed.Client(cluster.scheduler_address, asynchronous=True) as c:
            await pbd.low_latency(c)
            mine, _ = await c.run_on_scheduler(_intervals, c.id)
            assert mine == 0 and c.scheduler_comm.interval == 0
            assert await c.submit(np.add, 2, 3, pure=False) == 5

    asyncio.run(main())


def test_a_closed_client_is_refused_naming_its_state(cluster):
    c = distributed.Client(cluster)
    c.close()
    with pytest.raises(TypeError, match="client must be a connected distributed.Client; this one is closed"):
        pbd.low_latency(c)


@pytest.mark.parametrize("bad", [-1, 2, float("nan"), float("inf")])
def test_an_interval_out_of_range_is_refused_naming_it(client, bad):
    with pytest.raises(ValueError, match="interval must be from 0 to 1 seconds"):
        pbd.low_latency(client, bad)


@pytest.mark.parametrize("bad", ["0", None, True, 1j])
def test_an_interval_that_is_not_a_number_is_refused_naming_it(client, bad):
    with pytest.raises(TypeError, match="interval must be a number of seconds"):
        pbd.low_latency(client, bad)


@pytest.mark.parametrize("bad", [None, object(), "tcp://127.0.0.1:8786"])
def test_something_else_than_a_client_is_refused_naming_it(bad):
    with pytest.raises(TypeError, match="client must be a distributed.Client"):
        pbd.low_latency(bad)
