"""The WebSocket's fast path for binary steps (:class:`rnnkit.serve._ws.StepPool`): the steps of
many sockets received in one turn of the event loop are computed in one batched call, and every
answer equals, bit for bit, the general path's answer to the same step (``Server.step``, one
stream at a time) and, within the rounding of float32, ``model.predict`` over the stream's
prefix. Steps that are not the stream's next one still take the general path (a retry is
answered again, a gap refused), and a step whose stream is busy waits for it."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

pytest.importorskip("starlette")
pytest.importorskip("orjson")

from rnnkit.serve import Servable, ServeConfig  # noqa: E402
from rnnkit.serve._server import Server  # noqa: E402
from rnnkit.serve._ws import StepPool, StreamSocket  # noqa: E402

F, N, STEPS = 4, 9, 4


def model_of() -> rk.Sequential:
    """Two recurrent layers and a head: the state of both is kept, the head maps each output."""
    return rk.Sequential([rk.LSTM(8, "tanh", seed=1, return_sequences=True), rk.GRU(5, "tanh", seed=2),
                          rk.Dense(3, "tanh", seed=3)], input_shape=(None, None, F))


class Socket:
    """One WebSocket as the ASGI app sees it: ``inbox`` feeds ``receive``, ``sent`` holds what it sent."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.inbox.put_nowait({"type": "websocket.connect"})

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def send(self, msg: dict[str, Any]) -> None:
        self.sent.put_nowait(msg)

    def step(self, seq: int, x: np.ndarray) -> None:
        self.inbox.put_nowait({"type": "websocket.receive", "bytes": struct.pack("<Q", seq) + x.tobytes()})

    async def answer(self) -> tuple[int, int, np.ndarray]:
        msg = await asyncio.wait_for(self.sent.get(), 30)
        b = msg["bytes"]
        seq, replayed = struct.unpack_from("<QB", b)
        return seq, replayed, np.frombuffer(b, np.float32, offset=9).copy()


def test_steps_received_together_are_one_call_and_equal_the_general_path_and_predict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_of()
    sv = Servable(model)
    assert sv.streams is not None and sv.streams.batched
    xs = np.random.default_rng(7).standard_normal((N, STEPS, 1, F)).astype(np.float32)
    calls: list[int] = []
    plain_call = StepPool._call

    def spy(self: StepPool, group: list[Any]) -> None:
        calls.append(len(group))
        plain_call(self, group)

    monkeypatch.setattr(StepPool, "_call", spy)

    async def run() -> tuple[np.ndarray, np.ndarray, list[Any]]:
        server = Server(sv, ServeConfig())
        async with server.lifespan():
            app = StreamSocket(server)
            fast_ids = [(await server.create()).id for _ in range(N)]
            plain_ids = [(await server.create()).id for _ in range(N)]
            socks = [Socket() for _ in range(N)]
            tasks = [asyncio.create_task(app({"path": f"/v1/streams/{sid}/ws"}, s.receive, s.send))
                     for sid, s in zip(fast_ids, socks, strict=True)]
            await asyncio.sleep(0)  # every socket accepted
            for s in socks:
                assert (await s.sent.get())["type"] == "websocket.accept"
            fast = np.zeros((N, STEPS, 3), np.float32)
            plain = np.zeros((N, STEPS, 3), np.float32)
            for t in range(STEPS):
                for i, s in enumerate(socks):  # all N steps are there before the loop's next turn
                    s.step(t + 1, xs[i, t])
                for i, s in enumerate(socks):
                    seq, replayed, y = await s.answer()
                    assert (seq, replayed) == (t + 1, 0)
                    fast[i, t] = y
                for i, sid in enumerate(plain_ids):  # the general path, one stream at a time
                    y, replayed = await server.step(sid, t + 1, xs[i, t])
                    assert not replayed
                    plain[i, t] = y[0]
            # not the next step: the general path answers (a retry again, a gap refused)
            socks[0].step(STEPS, xs[0, STEPS - 1])
            retry = await socks[0].answer()
            socks[1].step(STEPS + 2, xs[1, 0])
            gap = await asyncio.wait_for(socks[1].sent.get(), 30)
            for s in socks:
                s.inbox.put_nowait({"type": "websocket.disconnect"})
            await asyncio.gather(*tasks)
        return fast, plain, [retry, gap]

    fast, plain, (retry, gap) = asyncio.run(run())
    assert calls == [N] * STEPS  # each turn's N steps: one call
    assert fast.tobytes() == plain.tobytes()
    assert retry[:2] == (STEPS, 1) and retry[2].tobytes() == fast[0, -1].tobytes()
    assert '"seq_gap"' in gap["text"]
    # model.predict over each prefix: the same products summed in another order (a whole
    # sequence's input projection in one product, against one timestep's); each sum has at most
    # F + 8 = 12 terms of magnitude < 3, so its rounding differs by < 12 * 3 * 2**-24 = 2.2e-6,
    # and tanh / sigmoid (slope <= 1) and the state's convex updates carry at most that per
    # layer and timestep: < 3 layers * 4 timesteps * 2.2e-6 = 2.6e-5
    for t in range(STEPS):
        want = model.predict(xs[:, :t + 1, 0])
        np.testing.assert_allclose(fast[:, t], want, rtol=0, atol=2.6e-5)


def test_a_step_whose_stream_is_busy_waits_for_it_on_the_general_path() -> None:
    model = model_of()
    sv = Servable(model)
    x = np.random.default_rng(3).standard_normal((2, 1, F)).astype(np.float32)

    async def run() -> tuple[list[Any], int]:
        server = Server(sv, ServeConfig())
        async with server.lifespan():
            app = StreamSocket(server)
            sid = (await server.create()).id
            lock = server.locks.setdefault(sid, asyncio.Lock())
            await lock.acquire()  # another step of this stream is in flight
            sock = Socket()
            task = asyncio.create_task(app({"path": f"/v1/streams/{sid}/ws"}, sock.receive, sock.send))
            await sock.sent.get()
            sock.step(1, x[0])
            await asyncio.sleep(0.05)
            waited = sock.sent.qsize()  # nothing answered while the stream is busy
            lock.release()
            first = await sock.answer()
            sock.step(2, x[1])
            second = await sock.answer()
            sock.inbox.put_nowait({"type": "websocket.disconnect"})
            await task
        return [first, second], waited

    (first, second), waited = asyncio.run(run())
    assert waited == 0
    want = model.predict(x[None, :, 0])[0]
    assert first[:2] == (1, 0) and second[:2] == (2, 0)
    ref = Servable(model_of())
    assert ref.streams is not None
    y1, st = ref.streams.step(x[0][None], ref.streams.stack([ref.streams.zero()]))
    y2, _ = ref.streams.step(x[1][None], st)
    assert first[2].tobytes() == y1[0, 0].tobytes() and second[2].tobytes() == y2[0, 0].tobytes()
    np.testing.assert_allclose(second[2], want, rtol=0, atol=2.6e-5)  # the bound of the test above
