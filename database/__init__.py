"""TuneFarm's schedule database: SQLAlchemy storage behind MetaSchedule's Database interface."""

from database.errors import DatabaseError
from database.ms_database import LOOKUP_LEVELS, Measurement, TuneFarmDatabase, shash_of
from database.storage import DEFAULT_URL, Storage, default_url, redact
from database.targets import TargetKey

__all__ = [
    "DEFAULT_URL",
    "LOOKUP_LEVELS",
    "DatabaseError",
    "Measurement",
    "Storage",
    "TargetKey",
    "TuneFarmDatabase",
    "default_url",
    "redact",
    "shash_of",
]
