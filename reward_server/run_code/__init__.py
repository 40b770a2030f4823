"""SandboxFusion's ``POST /run_code`` on this server's sandbox: its wire models
(``schemas``), its language names mapped onto ours (``languages``), and one call through the
code verifier's containers and fair gate (``service``). A session of calls reuses ``service``."""
