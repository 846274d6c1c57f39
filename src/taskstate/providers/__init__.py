"""Crash-safe versions of provider operators upstream has not made durable (yet).

`taskstate.providers.amazon` (`BatchOperator`, `EcsRunTaskOperator`, `AthenaOperator`),
`taskstate.providers.dbt_cloud` (`DbtCloudRunJobOperator`) and `taskstate.providers.airbyte`
(`AirbyteTriggerSyncOperator`): subclasses of the installed provider's operators, same arguments
and results, on taskstate's `ResumableJobMixin` (docs/providers.md). Airflow-layer code, like
`taskstate.airflow`: each module imports its Airflow provider, so `import taskstate` never
imports this package, and this `__init__` imports nothing.
"""
