"""``reward-rescore``: score stored rollouts again and say which verdicts changed.

    reward-rescore ROLLOUTS --url http://reward:8000 [--out OUT] [--summary SUMMARY] [--resume]

ROLLOUTS is our trainer's run directory or rollouts.jsonl, a TRL output directory or one of
its completions/*.parquet. Exit codes: 0 done, 2 input it cannot read (one line naming the
file and line: not a regular file, a line longer than --max-line-bytes, not UTF-8, not JSON,
nested or numbered past Python's parser, a field of the wrong type), 3 the server refused
or did not answer (what was scored is kept: the same command with --resume goes on).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from reward_server.client import RewardClientError, split_urls
from reward_server.rescore import default_output, rescore
from reward_server.rescore.sources import MAX_LINE_BYTES, SourceError
from reward_server.rescore.summary import table


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reward-rescore", description=(
        "Score stored rollouts again on a reward server; write the new results beside the "
        "old (resumable) and a summary of what changed."))
    p.add_argument("rollouts", type=Path, help="rollouts.jsonl, a trainer run dir, a TRL "
                   "output dir or completions parquet file")
    p.add_argument("--url", required=True, type=split_urls,
                   help="reward server URL(s), comma-separated")
    p.add_argument("--token", default=os.environ.get("REWARD_SERVER_TOKEN"),
                   help="bearer token (default: $REWARD_SERVER_TOKEN)")
    p.add_argument("--out", type=Path, help="new results, JSONL (default: rescored.jsonl in "
                   "the run dir, or <name>.rescored.jsonl); refused if it exists, unless "
                   "--resume")
    p.add_argument("--resume", action="store_true", help="go on from an output this command "
                   "wrote before (its last whole line)")
    p.add_argument("--summary", type=Path, help="summary JSON (default: OUT with "
                   ".summary.json)")
    p.add_argument("--batch-size", type=int, default=256, help="items per request")
    p.add_argument("--examples", type=int, default=3,
                   help="examples per verifier and direction in the summary")
    p.add_argument("--retry-for-s", type=float, default=300.0, help="give a server that does "
                   "not answer this long before stopping (progress is kept)")
    p.add_argument("--max-line-bytes", type=int, default=MAX_LINE_BYTES, help="the longest "
                   "line read (an item, its result and provenance); a longer one stops the run "
                   "naming it (default: 64 MiB, the server's default body limit)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.batch_size < 1 or args.max_line_bytes < 1 or not args.url:
        print("reward-rescore: --batch-size and --max-line-bytes must be at least 1 and --url "
              "name a server", file=sys.stderr)
        raise SystemExit(2)
    out = args.out or default_output(args.rollouts)
    summary_path = args.summary or out.with_name(out.stem + ".summary.json")
    try:
        summary = rescore(args.rollouts, args.url, out, batch=args.batch_size,
                          examples=args.examples, progress=not args.no_progress,
                          token=args.token, max_attempts=None, retry_for_s=args.retry_for_s,
                          resume=args.resume, max_line_bytes=args.max_line_bytes)
    except SourceError as exc:
        print(f"reward-rescore: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except RewardClientError as exc:
        print(f"reward-rescore: {exc}; what was scored is in {out}: run again with --resume "
              "to go on", file=sys.stderr)
        raise SystemExit(3) from None
    except KeyboardInterrupt:
        print(f"reward-rescore: interrupted; what was scored is in {out}: run again with "
              "--resume to go on", file=sys.stderr)
        raise SystemExit(130) from None
    _replace(summary_path, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    print(table(summary))
    print(f"new results: {out}\nsummary: {summary_path}")


def _replace(path: Path, text: str) -> None:
    """``path`` replaced whole by a new file: a symbolic link there is replaced, never
    followed to the file it names."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


if __name__ == "__main__":
    main()
