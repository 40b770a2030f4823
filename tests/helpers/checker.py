"""A real-shaped row with several correct outputs and a checker for it: Codeforces 1352A "Sum
of Round Numbers" (in CodeContests as ``1352_A. Sum of Round Numbers``), whose public test's
answer lists the round numbers in one order of many; a right and a wrong solution."""

from __future__ import annotations

# The row as CodeContests has it (public_tests: input and output lists), and the problem:
# represent each n as a sum of the fewest round numbers (one non-zero digit), in any order.
ROW = {
    "name": "1352_A. Sum of Round Numbers",
    "public_tests": {
        "input": ["5\n5009\n7\n9876\n10000\n10\n"],
        "output": ["2\n5000 9\n1\n7 \n4\n800 70 6 9000 \n1\n10000 \n1\n10 \n"],
    },
}
TESTS = [{"input": i, "output": o}
         for i, o in zip(ROW["public_tests"]["input"], ROW["public_tests"]["output"],
                         strict=True)] + [
    {"input": "3\n1\n99999\n10101\n", "output": "1\n1\n5\n9 90 900 9000 90000\n3\n1 100 10000\n"},
]

# The checker a judge would write: the count must be the answer's (the minimum), each term
# round and positive, the terms summing to n.
CHECKER = r"""
#include <cstdio>
#include <cstdlib>
static bool round_number(long long x) {
  if (x <= 0) return false;
  while (x % 10 == 0) x /= 10;
  return x < 10;
}
int main(int argc, char **argv) {
  if (argc != 4) return 3;
  FILE *in = fopen(argv[1], "r"), *out = fopen(argv[2], "r"), *ans = fopen(argv[3], "r");
  if (!in || !out || !ans) return 3;
  int t;
  if (fscanf(in, "%d", &t) != 1) return 3;
  for (int c = 1; c <= t; c++) {
    long long n, k, best, sum = 0, x;
    if (fscanf(in, "%lld", &n) != 1 || fscanf(ans, "%lld", &best) != 1) return 3;
    for (long long i = 0; i < best; i++) fscanf(ans, "%lld", &x);
    if (fscanf(out, "%lld", &k) != 1) { fprintf(stderr, "case %d: no count\n", c); return 2; }
    if (k != best) { fprintf(stderr, "case %d: %lld terms, %lld suffice\n", c, k, best); return 1; }
    for (long long i = 0; i < k; i++) {
      if (fscanf(out, "%lld", &x) != 1) { fprintf(stderr, "case %d: too few\n", c); return 2; }
      if (!round_number(x)) { fprintf(stderr, "case %d: %lld is not round\n", c, x); return 1; }
      sum += x;
    }
    if (sum != n) { fprintf(stderr, "case %d: sum %lld, not %lld\n", c, sum, n); return 1; }
  }
  if (fscanf(out, "%lld", &t) == 1) { fprintf(stderr, "extra output\n"); return 4; }
  fprintf(stderr, "ok %d cases\n", t);
  return 0;
}
"""

# Correct, with the terms from the highest digit down (the answer lists another order)
RIGHT = """t = int(input())
for _ in range(t):
    n = input().strip()
    parts = [d + "0" * (len(n) - i - 1) for i, d in enumerate(n) if d != "0"]
    print(len(parts))
    print(*parts)
"""
# Wrong: n itself, one term, round or not
WRONG = "t = int(input())\nfor _ in range(t):\n    print(1)\n    print(input())\n"
# The same checker in Python: any language of the table can judge
PY_CHECKER = """import sys
inp, out, ans = (open(p).read().split() for p in sys.argv[1:4])
t, pos, apos = int(inp[0]), 0, 0
for c in range(t):
    n, best = int(inp[1 + c]), int(ans[apos])
    apos += 1 + best
    k = int(out[pos])
    terms = [int(x) for x in out[pos + 1:pos + 1 + k]]
    pos += 1 + k
    if k != best or sum(terms) != n or any(x <= 0 or str(x).rstrip("0") not in
                                           "123456789" for x in terms):
        sys.exit(1)
sys.exit(4 if pos != len(out) else 0)
"""
