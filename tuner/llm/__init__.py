"""Decoder-only language models from Hugging Face folders: one Relax step function ``main``
(``prompt`` new tokens after ``context`` cached ones, both symbolic; prefill and decode are its
two ends) with an explicit KV cache, built once and run by
:class:`tuner.llm.runtime.DecoderSession`.
"""
