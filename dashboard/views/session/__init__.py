"""View models of the session page, one module per part of the page (pure, no Streamlit, no I/O):

- `header`: above the tabs: what the loop cost, the watch-only wording, the operator's "was this
  a loop?" label, the tab row's CSS.
- `timeline`: the step timeline's lanes, loop windows, rollback markers and clock ticks.
- `why_flagged`: the "Why flagged" tab: the evidence steps and the argument differences of
  near-duplicates, what each rule saw and the smallest setting change (`Engine.fleet.why_flagged`
  in on-call's words), which task used a hard step budget.
- `snapshots`: the snapshot tree's layout and labels, the rollback target choices.
- `messages`: the forensic history, the user's view, the last notice the user got.
- `memory`: the memory table, why a memory was invalidated, the decay chart's frames.
- `budget`: the token budget per step and of the current context.

The screens of the same names (`dashboard/screens/session/`) render them.
"""
