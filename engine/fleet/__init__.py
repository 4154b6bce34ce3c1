"""Fleet controls: what an operator does to many sessions at once, and what they read about them.

`quarantine` (tools refused fleet-wide), `actions` (operator verbs on sessions, compensations,
freezes and the declared detector), `alerts` (pages to webhooks, the durable outbox), `queries`
(the fleet view's figures and loop episodes), `incidents` (loops grouped by cause, and the
remedies for a whole group). The freeze window itself is `engine.freeze`: every
process reads it below the runtime, so it cannot live in this room, which sits above it.
"""
