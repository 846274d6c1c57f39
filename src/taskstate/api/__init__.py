"""The HTTP API: the state store over REST, wire-compatible with Airflow 3.3's state-store routes.

One FastAPI app (`taskstate.api.app.create_app`) serves the same route table standalone
(`taskstate serve`) and inside Airflow (`taskstate.airflow.plugin`). Needs the `server` extra;
`import taskstate` never imports this package.
"""
