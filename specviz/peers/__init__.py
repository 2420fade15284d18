"""Peers: other inference servers (vLLM) that specviz starts, attaches to and measures against."""
