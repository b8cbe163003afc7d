"""TuneFarm benchmarks: `python -m benchmarks` (or `make bench`)."""
