"""Ray clusters seen from the driver: ``address`` (what ``--address`` names), ``client`` (the
dashboard's Jobs and state APIs) and ``bench`` (one model timed on each device kind)."""
