"""Decoder-only language models from Hugging Face folders: one Relax module with ``prefill``
(symbolic prompt length) and ``decode`` (symbolic context length) sharing an explicit KV cache,
built once and run by :func:`tuner.llm.runtime.generate`.
"""
