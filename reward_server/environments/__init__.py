"""OpenEnv environments served by the reward server (docs/environments.md): a code
interpreter backed by ``/v1/sessions`` and a verifier environment backed by the scorer, mounted
into the server's own app (``mount``), with OpenEnv clients for both (``client``). Needs the
``openenv`` extra; nothing here is imported by the server without it."""
