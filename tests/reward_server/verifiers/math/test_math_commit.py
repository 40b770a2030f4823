"""The committed final answer (docs/math.md), a table per kind of response that got the
wrong reward, through the real server: all rows in one batch, each row its own test.

The responses are written in the styles models produce (R1 ``<think>`` blocks, Qwen's
boxed answers, GSM8K ``####``, tool-integrated reasoning with code and its output,
markdown with a bolded final line, small models cut off by the length limit)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from reward_server.verifiers.math.extract import extract_answer
from reward_server.worst_case import FIELD_BYTES
from tests.helpers.batch import verify_batch

# (kind, response, reference, extra item fields, correct, status)
Row = tuple[str, str, str, dict[str, Any], bool, str]

R1 = ("<think>\nOkay, so I need to find how many clips Natalia sold. In April 48, in May half "
      "of that, so 24. Wait, the question asks for May only? Let me reread... no, it asks for "
      "the total. So \\boxed{24} would be wrong; 48 + 24 = 72.\n</think>\n\n")
THINK: list[Row] = [
    ("think", R1 + "Natalia sold 48 + 24 = 72 clips.\n\n**Final Answer**\n\\boxed{72}", "72", {},
     True, "ok"),
    # the box inside the reasoning is a draft; the answer after </think> differs
    ("think", R1 + "She sold **72** clips in total.", "24", {}, False, "ok"),
    ("think", "<think>\nLet me compute 6 * 7 = \\boxed{42}. Hmm, but the question wants 6 * 8"
     "\n</think>\nThe product is $48$.", "42", {}, False, "ok"),
    ("think", "<think>\nLet me compute 6 * 7 = \\boxed{42}. Hmm, but the question wants 6 * 8"
     "\n</think>\nThe product is $48$.", "48", {}, True, "ok"),
    # the template opened <think> in the prompt: the completion carries only its close
    ("think", "First, 3 * 4 = 12, and \\boxed{12} is a guess.\n</think>\n\nThe answer is "
     "$\\boxed{14}$.", "14", {}, True, "ok"),
    ("think", "First, 3 * 4 = 12, and \\boxed{12} is a guess.\n</think>\n\nThe answer is "
     "$\\boxed{14}$.", "12", {}, False, "ok"),
    # cut off while thinking: it committed to nothing, whatever the reasoning boxed
    ("think", "<think>\nThe area is 6 * 4 = 24, so \\boxed{24}. But wait, should I double "
     "check the units", "24", {}, False, "no_answer"),
    ("think", "<think>\nSo 7 + 5 = 12", "12", {}, False, "no_answer"),
    # think: keep reads the whole text (a dataset whose template writes no reasoning block)
    ("think", "<think>\nSo 7 + 5 = 12, and \\boxed{12}", "12", {"think": "keep"}, True, "ok"),
]

HEDGES: list[Row] = [
    ("hedge", "Each box holds 4 pencils, so two boxes hold 8. I think it is 8, though 10 "
     "would also be defensible.", "8", {}, False, "ok"),
    ("hedge", "Each box holds 4 pencils, so two boxes hold 8. I think it is 8, though 10 "
     "would also be defensible.", "10", {}, False, "ok"),
    ("hedge", "The answer is 8, or perhaps 10 if we count the spare box.", "8", {}, False, "ok"),
    ("hedge", "If the coins are distinguishable, the probability is \\boxed{\\frac{1}{3}}; "
     "otherwise it is \\boxed{\\frac{1}{6}}.", "\\frac{1}{6}", {}, False, "ok"),
    ("hedge", "If the coins are distinguishable, the probability is \\boxed{\\frac{1}{3}}; "
     "otherwise it is \\boxed{\\frac{1}{6}}.", "\\frac{1}{3}", {}, False, "ok"),
    ("hedge", "If we count the endpoints: $\\boxed{11}$.\n\nIf we do not count them: "
     "$\\boxed{9}$.", "9", {}, False, "ok"),
    ("hedge", "Reading 'between' as inclusive gives \\boxed{11}. Alternatively, read as "
     "exclusive, \\boxed{9}.", "9", {}, False, "ok"),
    # a correction is no hedge: the last box is the answer
    ("hedge", "So the total is \\boxed{70}. Wait, I forgot the 2 from the first step: "
     "70 + 2 = 72, so \\boxed{72}.", "72", {}, True, "ok"),
    ("hedge", "Thus $x = 3$. Checking: $2 \\cdot 3 + 1 = 7$, which matches. The answer is 3.",
     "3", {}, True, "ok"),
]

NEGATION: list[Row] = [
    ("negation", "The answer is not 9 but 11.", "9", {}, False, "ok"),
    ("negation", "The answer is not 9 but 11.", "11", {}, True, "ok"),
    ("negation", "So the number of apples left isn't 9, it's 11.", "9", {}, False, "ok"),
    ("negation", "So the number of apples left isn't 9, it's 11.", "11", {}, True, "ok"),
    ("negation", "After checking each case, the answer is not 9.", "9", {}, False, "ok"),
]

NO_COMMITMENT: list[Row] = [
    # cut off mid-sentence: its last number is where the cut fell
    ("cut", "Natalia sold 48 clips in April and 48 / 2 = 24 clips in May. Adding these "
     "together we get 72 and then we need to", "72", {}, False, "no_answer"),
    ("cut", "First we find the cost of one pen: 12 / 4 = 3 dollars. Then five pens cost 5 * 3 "
     "= 15 dollars, which is the amount of", "15", {}, False, "no_answer"),
    # an answer only in code or its printed output is no statement
    ("code", "Let me compute this with Python.\n```python\nclips = 48 + 48 // 2\nprint(clips)"
     "  # the answer is 72\n```\n```output\n72\n```\nLet me double check the problem "
     "statement first.", "72", {}, False, "no_answer"),
    ("code", "```python\n# total = 72, so \\boxed{72}\ntotal = 48 + 24\n```", "72", {}, False,
     "no_answer"),
    ("code", "<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"print(48+24)\"}}"
     "\n</tool_call>\n<tool_response>\n72\n</tool_response>", "72", {}, False, "no_answer"),
    # code, then the model states its answer: that counts
    ("code", "```python\nprint(48 + 24)\n```\n```output\n72\n```\nSo Natalia sold "
     "$\\boxed{72}$ clips.", "72", {}, True, "ok"),
    # a later box cut off: the answer was being rewritten
    ("cut", "So the total is \\boxed{70}. Hmm, I forgot the 2, so it is \\boxed{7", "70", {},
     False, "no_answer"),
    # the last bare number of a finished sentence still counts (math-verify's reading)
    ("cut", "Adding the two months, she sold 72", "72", {}, True, "ok"),
]

TRAILING: list[Row] = [
    ("trailing", "Sam gives 12 stamps away, so Sam keeps 30 stamps, 6 fewer than his sister.",
     "30", {}, True, "ok"),
    ("trailing", "Sam gives 12 stamps away, so Sam keeps 30 stamps, 6 fewer than his sister.",
     "6", {}, False, "ok"),
    ("trailing", "So Maria is 14 years old, which is 3 years older than Tom.", "14", {}, True,
     "ok"),
    ("trailing", "Counting forward from Saturday, the party falls on **Tuesday**, 3 days later.",
     "\\text{Tuesday}", {}, True, "ok"),
    ("trailing", "Counting forward from Saturday, the party falls on **Tuesday**, 3 days later.",
     "3", {}, False, "ok"),
    ("trailing", "Comparing the heights:\n\nThe tallest is **Maria**, at 160 cm.",
     "\\text{Maria}", {}, True, "ok"),
    ("trailing", "### Solution\nThe sum is 5 + 7 = 12.\n\n**Answer: 12**", "12", {}, True, "ok"),
    ("trailing", "### Solution\nThe sum is 5 + 7 = 12.\n\n**Final Answer:** 12", "13", {}, False,
     "ok"),
    ("trailing", "**Step 3:** the sum is 12", "12", {}, True, "ok"),  # a bold label states nothing
    # a bold sentence is prose, read as prose
    ("trailing", "48 + 24 = 72.\n\n**Therefore, Natalia sold 72 clips in total.**", "72", {}, True,
     "ok"),
    ("trailing", "**Answer: The total is $x = 12$ apples in all**", "12", {}, True, "ok"),
]

ROOTS = "\\frac{3+\\sqrt{7}}{2}, \\frac{3-\\sqrt{7}}{2}"
UNION = "(-\\infty,1)\\cup(4,\\infty)"
EQUIVALENT: list[Row] = [
    # an approximation after an exact value: the exact value is the answer ...
    ("forms", "The diagonal is $\\boxed{3\\sqrt{2} \\approx 4.24}$.", "3\\sqrt{2}", {}, True, "ok"),
    ("forms", "So $d = 3\\sqrt{2} \\approx 4.243$, i.e. \\boxed{d = 3\\sqrt{2} \\approx 4.243}",
     "3\\sqrt{2}", {}, True, "ok"),
    # ... when it is the exact value rounded or cut; a wrong decimal is a second value
    ("forms", "\\boxed{3\\sqrt{2} \\approx 4.3}", "3\\sqrt{2}", {}, False, "ok"),
    ("forms", "\\boxed{3 \\approx 4}", "3", {}, False, "ok"),
    ("forms", "\\boxed{4 \\approx 3.9}", "4", {}, False, "ok"),
    # two forms of one value joined by "or"; two values stay several candidates
    ("forms", "The time is $\\boxed{\\frac72 \\text{ or } 3.5}$ hours.", "\\frac{7}{2}", {},
     True, "ok"),
    ("forms", "\\boxed{\\frac{1}{2} \\text{ or } 0.5}", "0.5", {}, True, "ok"),
    ("forms", "\\boxed{\\frac72 \\text{ or } 3.6}", "\\frac{7}{2}", {}, False, "ok"),
    ("forms", "\\boxed{3 \\text{ or } 4}", "3", {}, False, "ok"),
    # a number word that scales is a value; one that hedges or is missing is not
    ("forms", "The city has about \\boxed{2.5 \\text{ million}} people.", "2500000", {}, True,
     "ok"),
    ("forms", "#### \\$3 million", "3000000", {}, True, "ok"),
    ("forms", "\\boxed{2.5 \\text{ million}}", "2.5", {}, False, "ok"),
    ("forms", "\\boxed{5 \\text{ thousand}}", "5", {}, False, "ok"),
    ("forms", "\\boxed{5 \\text{ thousand}}", "5000", {}, True, "ok"),
    # a unit with a power
    ("forms", "The area is $\\boxed{20\\text{ m}^2}$.", "20", {}, True, "ok"),
    ("forms", "\\boxed{20 \\text{ cm}^{3}}", "20", {}, True, "ok"),
    ("forms", "\\boxed{20\\text{ m}^2}", "400", {}, False, "ok"),
    # inequalities joined by "or" for a union of intervals
    ("forms", "The solution set is $\\boxed{x < 1 \\text{ or } x > 4}$.", UNION, {}, True, "ok"),
    ("forms", "\\boxed{x < 1 \\text{ or } x > 5}", UNION, {}, False, "ok"),
    ("forms", "\\boxed{x \\le 1 \\text{ or } x > 4}", UNION, {}, False, "ok"),
    ("forms", "\\boxed{x < 1 \\text{ or } y > 4}", UNION, {}, False, "ok"),
    # both roots with one \pm, against a reference of two answers (never for one)
    ("forms", "By the quadratic formula, $x = \\boxed{\\frac{3 \\pm \\sqrt7}{2}}$.", ROOTS, {},
     True, "ok"),
    ("forms", "\\boxed{\\frac{3 \\pm \\sqrt7}{2}}", "\\frac{3+\\sqrt{7}}{2}", {}, False,
     "parse_error"),
    ("forms", "\\boxed{\\frac{3 \\pm \\sqrt5}{2}}", ROOTS, {}, False, "ok"),
    # an identity whose last side is the answer; a false one is no value
    ("forms", "Expanding, $\\boxed{(x-1)(x+4) = x^2+3x-4}$.", "x^2+3x-4", {}, True, "ok"),
    ("forms", "\\boxed{(x-1)(x+4) = x^2+3x-5}", "x^2+3x-4", {}, False, "ok"),
    ("forms", "\\boxed{2x = x + 1}", "x+1", {}, False, "ok"),
]

DECIMALS: list[Row] = [
    # one rule at every digit count: a decimal alone only approximates an exact reference
    ("decimal", "\\boxed{0.142857}", "\\frac17", {}, False, "ok"),
    ("decimal", "\\boxed{0.333}", "\\frac13", {}, False, "ok"),
    ("decimal", "\\boxed{0.3333333333}", "\\frac13", {}, False, "ok"),
    ("decimal", "\\boxed{3.14159}", "\\pi", {}, False, "ok"),
    ("decimal", "\\boxed{1.41421356}", "\\sqrt{2}", {}, False, "ok"),
    # exact decimals are the value
    ("decimal", "\\boxed{0.25}", "\\frac14", {}, True, "ok"),
    ("decimal", "\\boxed{2.5}", "\\frac{5}{2}", {}, True, "ok"),
    ("decimal", "\\boxed{0.0833333333333333}", "\\frac{1}{12}", {}, True, "ok"),  # as printed
    # an item that sets a tolerance accepts approximations within it, at every digit count
    ("decimal", "\\boxed{0.142857}", "\\frac17", {"tolerance": 1e-5}, True, "ok"),
    ("decimal", "\\boxed{0.333}", "\\frac13", {"tolerance": 1e-2}, True, "ok"),
    ("decimal", "\\boxed{3.14159}", "\\pi", {"tolerance": 1e-6}, True, "ok"),
    ("decimal", "\\boxed{0.3}", "\\frac13", {"tolerance": 1e-2}, False, "ok"),
    # a decimal reference was rounded itself: the server's tolerance applies
    ("decimal", "\\boxed{\\frac17}", "0.142857", {}, True, "ok"),
]

CUT = {"truncated": True}
TRUNCATED: list[Row] = [
    # cut by max_completion_length: a marked answer that closed before the cut counts ...
    ("truncated", "48 + 24 = 72, so the answer is \\boxed{72}. Let me double-check by", "72",
     CUT, True, "ok"),
    ("truncated", "She sold 72 clips.\n#### 72\nNow let us also compute the", "72", CUT, True,
     "ok"),
    # ... never what runs into the cut
    ("truncated", "48 + 24 = 72", "72", CUT, False, "no_answer"),
    ("truncated", "The total number of clips is 72", "72", CUT, False, "no_answer"),
    ("truncated", "She sold 72 clips.\n#### 7", "7", CUT, False, "no_answer"),
    ("truncated", "So the answer is \\boxed{72", "72", CUT, False, "no_answer"),
    ("truncated", "<think>\nSo it is \\boxed{72}", "72", CUT, False, "no_answer"),
    ("truncated", "The answer is 72. Now, to double-check, we add the", "72", CUT, True, "ok"),
    # the same texts, not cut: a finished sentence's last number counts
    ("truncated", "The total number of clips is 72", "72", {}, True, "ok"),
]

MARKERS: list[Row] = [
    ("markers", "Working: #### is a separator here. Final: \\boxed{12}", "12",
     {"markers": ["boxed"]}, True, "ok"),
    ("markers", "She sold 72 clips.\n#### 72", "72", {"markers": ["boxed"], "extract": "marked"},
     False, "no_answer"),
    ("markers", "The party is on a **Tuesday**", "\\text{Tuesday}", {"markers": ["boxed"]},
     False, "no_answer"),
]

GRPO_R = "<reasoning>\nIn April 48, in May 24; 48 + 24 = 72.\n</reasoning>\n"
ANSWER_TAG: list[Row] = [
    # the GRPO/open-r1 format: the last <answer>…</answer> is an explicit marker
    ("answer_tag", GRPO_R + "<answer>\n72\n</answer>", "72", {}, True, "ok"),
    ("answer_tag", "<reasoning>48 + 24 = 72</reasoning><answer>72</answer>", "72", {}, True, "ok"),
    ("answer_tag", "<think>\n48 + 24 = 72\n</think>\n<answer>72</answer>", "72", {}, True, "ok"),
    ("answer_tag", GRPO_R + "<answer>72</answer>", "24", {}, False, "ok"),
    ("answer_tag", "<think>\nSo 72.\n</think>\n<answer>$\\frac{1}{2}$</answer>", "\\frac12", {},
     True, "ok"),
    # a box inside it is the answer; so is a box after it (the last marker wins)
    ("answer_tag", GRPO_R + "<answer>The total is \\boxed{72}.</answer>", "72", {}, True, "ok"),
    ("answer_tag", "<answer>70</answer> Wait, I forgot 2: \\boxed{72}", "72", {}, True, "ok"),
    ("answer_tag", "<answer>70</answer> Wait, I forgot 2: \\boxed{72}", "70", {}, False, "ok"),
    # the last span counts; one cut off is no answer; markers can leave it out
    ("answer_tag", "<answer>24</answer>\nNo, the total:\n<answer>72</answer>", "72", {}, True,
     "ok"),
    ("answer_tag", GRPO_R + "<answer>\n7", "7", {}, False, "no_answer"),
    ("answer_tag", GRPO_R + "<answer>72</answer>", "72", {"markers": ["boxed"]}, False,
     "no_answer"),
    ("answer_tag", "The answer is 72. <answer>72</answer>", "72", {"truncated": True}, True, "ok"),
]

ENDINGS: list[Row] = [
    # an explicit answer statement ends the text: no final full stop needed
    ("ending", "Comparing the four options, only B works. Therefore, the correct option is B",
     "B", {}, True, "ok"),
    ("ending", "Comparing the four options, only B works. Therefore, the correct option is B",
     "C", {}, False, "ok"),
    ("ending", "因此，答案是 72。", "72", {}, True, "ok"),
    ("ending", "48 加 24 等于 72。", "72", {}, True, "ok"),
    ("ending", "因此，答案是 72。", "70", {}, False, "ok"),
    # the trainer says it was not cut: the model stopped there, its last number counts
    ("ending", "Adding these together we get 72 and then we", "72", {"truncated": False}, True,
     "ok"),
    ("ending", "Adding these together we get 72 and then we", "72", {}, False, "no_answer"),
]

MENTIONS: list[Row] = [
    # a fence opens a line; a tag is a block when it pairs (or opens a line)
    ("mention", "In Markdown, code is fenced with ```. Here the total is \\boxed{72}.", "72", {},
     True, "ok"),
    ("mention", "Wrap it in <code> tags. The total is \\boxed{72}.", "72", {}, True, "ok"),
    ("mention", "The <output> tag shows the result. The total is \\boxed{72}.", "72", {}, True,
     "ok"),
    ("mention", "Let me run it.\n<code>\nprint(48 + 24)  # 72", "72", {}, False, "no_answer"),
    ("mention", "In Markdown, code is fenced with ```. Here the total is \\boxed{72}.", "70", {},
     False, "ok"),
]

TRUNCATED += [
    # a bolded label's value at the cut may be longer; a final "." may be a decimal point
    ("truncated", "So we add them.\n\n**Final Answer:** 7", "7", CUT, False, "no_answer"),
    ("truncated", "So we add them.\n\n**Answer:** 7", "7", CUT, False, "no_answer"),
    ("truncated", "So we add them.\n\n**Answer: 7**", "7", CUT, True, "ok"),
    ("truncated", "Adding them up, the answer is 7.", "7", CUT, False, "no_answer"),
    ("truncated", "Adding them up, the answer is 7. Now we", "7", CUT, True, "ok"),
]

THINK += [
    # a reasoning block reopened after the last close and never closed: cut off thinking
    ("think", "<think>\ndraft\n</think>\n<think>\nsecond \\boxed{9}", "9", {}, False,
     "no_answer"),
]

EQUIVALENT += [
    # against a decimal reference (itself rounded) the answer's rounding compares
    ("forms", "\\boxed{\\frac{2}{3} \\approx 0.67}", "0.67", {}, True, "ok"),
    ("forms", "\\boxed{\\sqrt2 \\approx 1.41}", "1.41", {}, True, "ok"),
    ("forms", "\\boxed{\\frac13 \\approx 0.33}", "0.33", {}, True, "ok"),
    ("forms", "\\boxed{\\frac13 \\approx 0.33}", "0.34", {}, False, "ok"),
]

DECIMALS += [
    # the one rule wherever the decimal sits: named, in a tuple, set, interval or matrix
    ("decimal", "\\boxed{x = 0.333333}", "\\frac13", {}, False, "ok"),
    ("decimal", "\\boxed{p = 0.142857}", "\\frac17", {}, False, "ok"),
    ("decimal", "\\boxed{A = 3.141593}", "\\pi", {}, False, "ok"),
    ("decimal", "The answer is $x = 0.333333$.", "\\frac13", {}, False, "ok"),
    ("decimal", "\\boxed{(0.333333, 0.5)}", "(\\frac13, \\frac12)", {}, False, "ok"),
    ("decimal", "\\boxed{\\{0.333333, 0.5\\}}", "\\{\\frac13, \\frac12\\}", {}, False, "ok"),
    ("decimal", "\\boxed{[0.333333, 1]}", "[\\frac13, 1]", {}, False, "ok"),
    ("decimal", "\\boxed{\\begin{pmatrix} 0.333333 & 0.5 \\end{pmatrix}}",
     "\\begin{pmatrix} \\frac13 & \\frac12 \\end{pmatrix}", {}, False, "ok"),
    ("decimal", "\\boxed{x = 0.25}", "\\frac14", {}, True, "ok"),
    ("decimal", "\\boxed{(0.25, 0.5)}", "(\\frac14, \\frac12)", {}, True, "ok"),
    ("decimal", "\\boxed{x = 0.333}", "\\frac13", {"tolerance": 1e-2}, True, "ok"),
]

THINK += [
    # the other reasoning formats are blocks too: a box in the draft is no answer
    ("think", "<thinking>\nSo \\boxed{7}? No, I missed one.\n</thinking>\nThe answer is 8.", "8", {},
     True, "ok"),
    ("think", "<thinking>\nSo \\boxed{7}? No, I missed one.\n</thinking>\nThe answer is 8.", "7", {},
     False, "ok"),
    ("think", "[THINK]So \\boxed{7}? No, I missed one.[/THINK]\nThe answer is 8.", "8", {}, True,
     "ok"),
    ("think", "<|channel|>analysis<|message|>So \\boxed{7}? No: 8.<|end|><|start|>assistant"
     "<|channel|>final<|message|>The answer is 8.<|return|>", "8", {}, True, "ok"),
    ("think", "<|channel|>analysis<|message|>So \\boxed{7}? No: 8.<|end|>", "7", {}, False,
     "no_answer"),
    ("think", "<thinking>\nSo it is \\boxed{7}", "7", {}, False, "no_answer"),
]

NO_COMMITMENT += [
    ("code", "~~~python\nprint(7)  # \\boxed{7}\n~~~\nThe answer is 8.", "8", {}, True, "ok"),
    ("code", "~~~python\nprint(7)  # \\boxed{7}\n~~~\nThe answer is 8.", "7", {}, False, "ok"),
]

NEGATION += [
    # the negated value is looked for where the answer is stated, as written
    ("negation", "The answer is not 9. I double-checked all 9 cases.", "9", {}, False, "ok"),
    ("negation", "The answer is not 1,000.", "1000", {}, False, "ok"),
    ("negation", "The answer is not quite 9.", "9", {}, False, "ok"),
    ("negation", "The answer is not simply 9.", "9", {}, False, "ok"),
    ("negation", "The answer is anything but 9.", "9", {}, False, "ok"),
    ("negation", "The answer is other than 9.", "9", {}, False, "ok"),
    ("negation", "The answer cannot be 9.", "9", {}, False, "ok"),
    ("negation", "The answer is not \\boxed{9}.", "9", {}, False, "ok"),
    ("negation", "The answer is 1,000, not 999.", "1000", {}, True, "ok"),
    ("negation", "It is not 9 but \\boxed{11}.", "11", {}, True, "ok"),
]

UNIT_WORDS = ["hundredths", "thousandths", "millionths", "billionth", "below zero", "negative",
              "minus", "doubled", "tripled", "thrice", "to the power of two", "factorial",
              "grand", "lakh"]
WORDS: list[Row] = [
    # a word that changes the value is no unit
    *[("words", f"\\boxed{{5 \\text{{ {word}}}}}", "5", {}, False, "ok") for word in UNIT_WORDS],
    ("words", "\\boxed{2 \\text{ quarters}}", "2", {}, False, "ok"),
    ("words", "\\boxed{3 \\text{ halves}}", "3", {}, False, "ok"),
    ("words", "\\boxed{4 \\text{ score}}", "4", {}, False, "ok"),
    ("words", "\\boxed{5 \\text{ apples}}", "5", {}, True, "ok"),
    # in prose too; a scale word scales, as in a box
    ("words", "The answer is 5 thousand.", "5", {}, False, "ok"),
    ("words", "The answer is 5 thousand.", "5000", {}, True, "ok"),
    ("words", "The answer is 2 squared.", "2", {}, False, "ok"),
    ("words", "The answer is 3 dozen.", "3", {}, False, "ok"),
    ("words", "The answer is 5 times 4.", "5", {}, False, "ok"),
    ("words", "The answer is 5 apples.", "5", {}, True, "ok"),
    ("words", "The answer is 28 percent.", "28", {}, True, "ok"),
]

HEDGES += [
    # two values in one box, or one box per case: a list, not one answer
    ("hedge", "\\boxed{3 \\text{, } 4}", "4", {}, False, "ok"),
    ("hedge", "\\boxed{3 \\hspace{1em} 4}", "4", {}, False, "ok"),
    ("hedge", "Case 1: $n$ even, \\boxed{3}. Case 2: $n$ odd, \\boxed{4}.", "4", {}, False, "ok"),
    ("hedge", "Case 1: $n$ even, \\boxed{3}. Case 2: $n$ odd, \\boxed{4}.", "3", {}, False, "ok"),
]

ROWS: list[Row] = (WORDS + THINK + HEDGES + NEGATION + NO_COMMITMENT + TRAILING + EQUIVALENT + DECIMALS
                   + TRUNCATED + MARKERS + ANSWER_TAG + ENDINGS + MENTIONS)
ITEMS = [{"response": r, "answer": a, **extra} for _, r, a, extra, _, _ in ROWS]


@pytest.fixture(scope="module")
def results(http: httpx.Client) -> list[dict[str, Any]]:
    return verify_batch(http, "math", ITEMS)


@pytest.mark.parametrize("index", range(len(ROWS)),
                         ids=lambda i: f"{ROWS[i][0]}-{i}-{ROWS[i][1][-30:]}")
def test_committed_answer(results: list[dict[str, Any]], index: int) -> None:
    _, response, answer, extra, correct, status = ROWS[index]
    got = results[index]
    assert got["correct"] is correct, (response, answer, extra, got)
    assert got["score"] == (1.0 if correct else 0.0)
    assert got["status"] == status, (response, answer, extra, got)


def test_every_kind_has_rows_both_ways() -> None:
    for kind in {row[0] for row in ROWS}:
        verdicts = {row[4] for row in ROWS if row[0] == kind}
        assert verdicts == {True, False}, kind


@pytest.mark.parametrize("hostile", [
    "<think>" * (FIELD_BYTES // 7),
    "</think>" * (FIELD_BYTES // 8),
    "```" * (FIELD_BYTES // 3),
    "```python\n" + "x" * FIELD_BYTES,
    "<tool_call>" * (FIELD_BYTES // 11),
    "**" * (FIELD_BYTES // 2),
    "x" * FIELD_BYTES + "\n" + "**a**" * 100,
    "not 9 " * (FIELD_BYTES // 6),
    ", 6 fewer" * (FIELD_BYTES // 9),
    "\\boxed{1} otherwise if " * (FIELD_BYTES // 24),
    "1 or 2 though " * (FIELD_BYTES // 14),
    " " * FIELD_BYTES + "isn't 9",
    "<|im_end|>" * (FIELD_BYTES // 10),
    "<answer>" * (FIELD_BYTES // 8),
    "<answer></answer>" * (FIELD_BYTES // 17),
    "~~~\n" * (FIELD_BYTES // 4),
    "```\n```" * (FIELD_BYTES // 7),
    "x<code>" * (FIELD_BYTES // 7),
    "[THINK]" * (FIELD_BYTES // 7),
    "not quite " * (FIELD_BYTES // 10),
])
def test_the_commitment_scans_are_linear(hostile: str) -> None:
    started = time.process_time()  # CPU time: the machine's load must not decide the test
    for mode in ("auto", "marked", "boxed"):
        extract_answer(hostile, mode)  # type: ignore[arg-type]
        extract_answer(hostile, mode, truncated=True)  # type: ignore[arg-type]
    assert time.process_time() - started < 2.0
