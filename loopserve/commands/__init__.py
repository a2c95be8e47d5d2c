"""One module per subcommand of ``loopserve``: ``run`` (run and sweep), ``report``,
``calibrate``, ``fidelity`` and ``serve``. Each registers its parser (``add_parser``) and runs
it (``main(args, argv)``); ``loopserve.cli`` parses and dispatches."""
