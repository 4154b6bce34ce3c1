"""Integrations of Rewind with agent frameworks.

Each integration lives in its own subpackage and needs its optional extra, e.g.
``pip install 'agent-rewind[langgraph]'`` for `engine.integrations.langgraph`. Nothing here is
imported by `engine` itself.
"""
