"""What the pages draw and write, as pure functions of a trace or a server's numbers: plotly figures, the
sentence beside each chart, token text and Markdown escaping. No Streamlit, no torch: the pages put these
on screen (specviz.app), and tests check them without a browser."""
