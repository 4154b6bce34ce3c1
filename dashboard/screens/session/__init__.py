"""The session page (`session?session=<id>`). `session.py` is the page Streamlit runs, named after
its address: its `main` reads the session once and renders what is above the tabs (the header,
the actions, the operator's label). `page.py` holds what every tab reads; one module renders each
tab (`timeline`, `why_flagged`, `snapshots`, `memory`, `budget`, `messages`) from the view model
of the same name in `dashboard/views/session/`."""
