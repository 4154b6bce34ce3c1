"""Sessions and snapshots: the handle an agent runtime holds (`Session`), guarded steps
(`StepCall`), session ids, snapshot helpers (suggested rollback target, preview) and notices."""
