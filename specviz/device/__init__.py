"""The one device process and the page side's client of it: the worker that holds every model and runs named
jobs (run, race, sweep, exactness, calibration, ...), its job table, the single queue for device work with
its heartbeat and stop, and a local vLLM server started for the Server page. No Streamlit here; torch only
in the worker process (the Streamlit server never imports it)."""
