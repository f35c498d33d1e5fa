"""Generated protobuf and gRPC modules. Do not edit by hand.

Regenerate with ``python proto/generate.py``.
"""
