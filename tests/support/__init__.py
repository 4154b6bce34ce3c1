"""What the tests share, imported the normal way (`from support.fleet import seed_fleet`).

pytest puts `tests/` on the import path (`pythonpath = ["tests"]` in pyproject.toml), so this
package and the trace corpus (`traces`) import like any installed package: no test edits the
import path at run time, and no test module imports another test module. The benchmarks in
`bench/` put `tests/` on their path and use the same helpers.

- `agents`: stand-in agent processes (`tests/workers/agent.py`), kill rounds, the invariants a
  reader relies on after concurrent rollbacks and crashes.
- `console`: the real console under `streamlit run` on a free port, its accounts and Chromium.
- `fleet`: a small, realistic fleet written through the engine API (the console's fixtures).
- `ids`: session ids that stress key layouts.
- `ports`: free loopback ports.
- `redis_servers`: real redis-server processes and a real Redis Cluster, started on first use.

Fixtures stay in the `conftest.py` files, where pytest finds them.
"""
