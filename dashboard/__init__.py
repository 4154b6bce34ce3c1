"""Rewind console (Streamlit): `streamlit run dashboard/app.py` or `rewind dashboard`."""
