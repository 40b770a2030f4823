"""SandboxFusion's ``POST /run_code`` on this server's sandbox: its wire models
(``schemas``), its language names mapped onto ours (``languages``), and one call through the
sandbox service's containers and fair gate (``service``); and stateful sessions, an interpreter
kept across calls in a container of its own (``sessions``, ``session_schemas``,
``session_settings``). How a command or a cell ended, as SandboxFusion's status: one table for
both (``statuses``)."""
