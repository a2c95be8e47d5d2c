"""Run outputs (docs/design.md): staged atomic writing and the plain writers (``files``), the
three record CSVs (``records``), env.json (``env_info``), the Perfetto trace (``trace``) and
reading a finished run folder back (``rundata``)."""
