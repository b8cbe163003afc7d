"""TuneFarm's schedule database: SQLAlchemy storage behind MetaSchedule's Database interface.

The names below are imported on first use, so a light module of this package
(:mod:`database.errors`) can be imported by any layer without loading TVM or SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from database.errors import DatabaseError, error_summary
    from database.ms_database import TuneFarmDatabase
    from database.records import LOOKUP_LEVELS, BestRecord, Measurement, shash_of
    from database.storage import DEFAULT_URL, Storage, default_url, redact
    from database.targets import TargetKey

_HOME = {
    "BestRecord": "database.records",
    "DEFAULT_URL": "database.storage",
    "LOOKUP_LEVELS": "database.records",
    "DatabaseError": "database.errors",
    "Measurement": "database.records",
    "Storage": "database.storage",
    "TargetKey": "database.targets",
    "TuneFarmDatabase": "database.ms_database",
    "default_url": "database.storage",
    "error_summary": "database.errors",
    "redact": "database.storage",
    "shash_of": "database.records",
}

__all__ = [
    "DEFAULT_URL",
    "LOOKUP_LEVELS",
    "BestRecord",
    "DatabaseError",
    "Measurement",
    "Storage",
    "TargetKey",
    "TuneFarmDatabase",
    "default_url",
    "error_summary",
    "redact",
    "shash_of",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'database' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
