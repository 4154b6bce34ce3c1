"""Console pages, run by `st.navigation` in dashboard/app.py (see there why not `pages/`)."""
