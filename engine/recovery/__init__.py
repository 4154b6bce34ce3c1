"""Recovery: everything that brings a looping session back, in one room.

- `targets`: where a rollback goes (the last healthy snapshot), what it would take off the live
  line (the preview), and the one definition of "nothing to roll back".
- `verbs`: the rollback and the notice, with the actor's role and the reason rule checked.
- `bulk`: rolling back every session that matches a filter, one audited batch.
- `notices`: the user-facing templates and the notice message.
- `policy`: what happens after a loop verdict (rollback, nudge, stop, flag).

The room sits below the session handle (`engine.sessions`) and the `Engine`: both call down into
it, and nothing here imports them. It takes the engine's `Runtime` and reaches the store through
it.
"""
