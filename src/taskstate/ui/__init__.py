"""The state pages: a small vanilla-JS app (`static/`) that calls the HTTP API's routes.

Served by the API's own FastAPI app at `/taskstate/ui/` (`taskstate.api.routes_ui`), so
`taskstate serve`, the Airflow 3 api-server and the Airflow 2 webserver all serve the same
files; inside Airflow the plugin adds a "Task State" tab / view / extra link
(`taskstate.airflow.ui_extensions`, with the Airflow 2 view's template in `templates/`). No
build step: the files in `static/` are what the browser runs, and they ship in the wheel.
"""
