"""``tunefarm dashboard``: a read-only web view of a schedule database.

:mod:`tuner.dashboard.db` opens the database read-only, :mod:`tuner.dashboard.queries` holds
one read per page, :mod:`tuner.dashboard.app` serves the pages and their ``/api/...`` JSON
twins; templates and the chart script are package data (nothing is fetched from a CDN).
"""
