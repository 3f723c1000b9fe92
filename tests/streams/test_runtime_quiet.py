"""The worker's loop drops asyncio's ERROR only for what a producer that failed for good leaves
inside aiokafka; every other unretrieved exception is still logged (asyncio builds the contexts
here itself: a task or future whose exception nobody retrieved, then collected)."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest
from aiokafka.errors import ProducerFenced

from gpuwarden.streams import runtime


class Sender:
    """Stands in for aiokafka's sender: only its coroutine's qualified name matters here."""

    async def _send_produce_req(self) -> None:
        raise KeyError("batch")  # what reenqueue raises once the batch was failed and forgotten


async def _other() -> None:
    raise KeyError("a defect of ours")


async def _unretrieved(make) -> None:
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(runtime._fenced_quietly)
    made = make(loop)
    await asyncio.sleep(0.01)  # the task runs to its exception
    del made
    gc.collect()  # asyncio reports the exception nobody retrieved when the object is collected


def _fenced_future(loop: asyncio.AbstractEventLoop) -> asyncio.Future:
    fut = loop.create_future()
    fut.set_exception(ProducerFenced())
    return fut


@pytest.mark.parametrize("make", [lambda loop: loop.create_task(Sender()._send_produce_req()), _fenced_future],
                         ids=["sender-retry-keyerror", "fenced-send"])
async def test_what_a_failed_producer_leaves_behind_is_not_an_error(make, caplog) -> None:
    assert runtime.SENDER_RETRY == Sender._send_produce_req.__qualname__
    with caplog.at_level(logging.DEBUG):
        await _unretrieved(make)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("failed for good" in r.getMessage() for r in caplog.records)


async def test_any_other_unretrieved_exception_is_still_an_error(caplog) -> None:
    with caplog.at_level(logging.DEBUG):
        await _unretrieved(lambda loop: loop.create_task(_other()))
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors and "Task exception was never retrieved" in errors[0].getMessage()
