"""The search's start-up made in a thread while Ray starts: its cost model, its errors."""

from __future__ import annotations

import threading

import pytest

from database import Storage
from tests.conftest import matmul_mod
from tuner.errors import TuneFarmError
from tuner.startup import SearchPrep


def _prep_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tunefarm-prep")]


def test_the_prepared_cost_model_is_the_jobs_own(sqlite_url, llvm_target) -> None:
    storage = Storage(sqlite_url)
    prep = SearchPrep(llvm_target, storage, [matmul_mod()], "tunefarm", 0, True)
    model = prep.cost_model()
    assert type(model).__name__ == "TunefarmModel"
    assert prep.cost_model() is model  # made once
    prep.close()
    assert not _prep_threads()
    storage.dispose()


def test_what_making_it_raised_is_raised_where_the_search_asks_for_it(
    sqlite_url, llvm_target
) -> None:
    storage = Storage(sqlite_url)
    prep = SearchPrep(llvm_target, storage, [matmul_mod()], "no-such-model", 0, True)
    prep.close()  # a job that failed before its search: nothing to report, no thread left
    assert not _prep_threads()
    with pytest.raises(TuneFarmError, match="unknown cost model 'no-such-model'; valid:"):
        prep.cost_model()
    storage.dispose()
