"""The harness: the sandbox container's main process (PID 1), started once per container.

It reads length-prefixed JSON jobs on stdin, runs the untrusted program of each against its
tests under per-process limits, and answers each with one JSON verdict on stdout. Standard
library only, so it runs on any image with python3 (>= 3.9). Modules, in the order a job
meets them: ``serve`` (the loop), ``jobs`` (one execution and its clean-up), ``stdio`` and
``asserts`` (the two kinds of job; ``tester``, the process an assertion job's test code
runs in; ``candidate`` and ``candidate_server``, the two ends of the assertion proxy;
``checker``, a dataset's output checker), ``zygote`` (the Python fork
server), ``processes`` (one process under limits), ``compare`` (outputs, return values),
``protocol`` (frames, the plain-data codec), ``objects`` (the test setup's objects on
that codec's wire),
``verdicts`` (tests not run, tests failed together), ``suite`` (which statements are tests,
so how many), ``statuses`` (every status); the host imports these three, so it counts and
fills in tests by the harness's own rules; ``slate``
(the clean slate between executions).

Why the candidate cannot forge the verdict:
- The verdict travels on this process's stdout, the container's attach stream, through a
  private copy of fd 1 (``serve.private_channel``): fd 1 is a sink, so what trusted code
  here prints is no verdict. The untrusted
  program runs in child processes that inherit none of this process's descriptors, and this
  process is made non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``), so a child cannot open
  ``/proc/<pid>/fd/1``, read its memory or ptrace it.
- Assertion tests (``test_code``) run in the job's tester, never in the candidate's process
  (``asserts``) and never here: the test code is a caller's too, and must not reach the
  harness or the next caller's job (``tester``).
- Every program runs under another uid than this process and its fork server (which run as
  root with four capabilities), so it cannot signal, ``prlimit`` or trace them; after each
  execution ``slate`` kills what is left, empties every place the candidate could write and
  checks the container is as it was fresh, or reports it dirty.
"""

import os

# The directory that holds this package (/opt in the image): the child interpreters (fork
# server, candidate server) import the package from there.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
