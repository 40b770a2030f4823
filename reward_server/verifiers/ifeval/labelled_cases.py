"""Responses written for the ifeval tests: (instruction id, kwargs, response, followed under
the strict reading, labelled by hand). Several per instruction, followed and not, with the
edges the rules turn on. Run side by side with the reference in test_ifeval_reference.py; in
the package because ``bench/bench_ifeval.py`` scores the same responses."""

from __future__ import annotations

W = "length_constraints:number_words"
S = "length_constraints:number_sentences"
P = "length_constraints:number_paragraphs"
NTH = "length_constraints:nth_paragraph_first_word"
BUL = "detectable_format:number_bullet_lists"
HL = "detectable_format:number_highlighted_sections"
SEC = "detectable_format:multiple_sections"
JS = "detectable_format:json_format"
TI = "detectable_format:title"
CR = "detectable_format:constrained_response"
PH = "detectable_content:number_placeholders"
PS = "detectable_content:postscript"
EX = "keywords:existence"
FB = "keywords:forbidden_words"
FR = "keywords:frequency"
LF = "keywords:letter_frequency"
UP = "change_case:english_capital"
LO = "change_case:english_lowercase"
CAP = "change_case:capital_word_frequency"
END = "startend:end_checker"
QU = "startend:quotation"
REP = "combination:repeat_prompt"
TWO = "combination:two_responses"
NC = "punctuation:no_comma"
LANG = "language:response_language"

ESSAY = ("The river wound through the valley. Farmers worked the fields at dawn. "
         "Children walked to school along the bank. ")
# a Google IFEval row's kwargs: every parameter name, None where unused
GOOGLE_NONES = {"num_highlights": None, "relation": None, "num_words": None,
                "num_placeholders": None, "prompt_to_repeat": None, "num_bullets": None,
                "section_spliter": None, "num_sections": None, "capital_relation": None,
                "capital_frequency": None, "keywords": None, "num_paragraphs": None,
                "language": None, "let_relation": None, "letter": None, "let_frequency": None,
                "end_phrase": None, "forbidden_words": None, "keyword": None, "frequency": None,
                "num_sentences": None, "postscript_marker": None, "first_word": None,
                "nth_paragraph": None}


def g(**kwargs: object) -> dict:
    return {**GOOGLE_NONES, **kwargs}


CASES: list[tuple[str, dict, str, bool]] = [
    # word counts: \w+ tokens, the boundary of "at least" / "less than"
    (W, {"relation": "at least", "num_words": 5}, "one two three four five", True),
    (W, {"relation": "at least", "num_words": 5}, "one two three four", False),
    (W, {"relation": "less than", "num_words": 5}, "one two three four five", False),
    (W, {"relation": "less than", "num_words": 5}, "one two three four", True),
    (W, g(relation="at least", num_words=6), "don't stop-believing: it's 2024!", True),
    (W, {"relation": "at least", "num_words": 3}, "naïve café über", True),
    (W, {"relation": "at least", "num_words": 300}, ESSAY * 16, True),  # 304 words
    (W, {"relation": "less than", "num_words": 100}, ESSAY * 5, True),
    # sentences (punkt in the reference; our splitter here)
    (S, {"relation": "at least", "num_sentences": 3}, ESSAY, True),
    (S, {"relation": "at least", "num_sentences": 4}, ESSAY, False),
    (S, {"relation": "less than", "num_sentences": 2}, "Mr. Smith went to Washington.", True),
    (S, {"relation": "less than", "num_sentences": 3}, "Is it? Yes! Really.", False),
    (S, {"relation": "at least", "num_sentences": 2}, "- item one\n- item two\n- item three",
     False),
    (S, g(relation="less than", num_sentences=2), "It costs $3.50 in the U.S. today.", True),
    (S, {"relation": "at least", "num_sentences": 2}, "He said \"Hi.\" Then he left.", True),
    (S, {"relation": "at least", "num_sentences": 3}, "Wait... what? Yes.", False),  # 2
    # paragraphs separated by ***
    (P, {"num_paragraphs": 3}, "One.\n***\nTwo.\n***\nThree.", True),
    (P, {"num_paragraphs": 3}, "One.\n***\nTwo.", False),
    (P, {"num_paragraphs": 2}, "***\nOne.\n***\nTwo.\n***", True),
    (P, {"num_paragraphs": 3}, "One.\n***\n\n***\nThree.", False),
    (P, g(num_paragraphs=1), "Just one paragraph here.", True),
    # nth paragraph's first word, paragraphs by \n\n
    (NTH, {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "however"},
     "First part.\n\nHowever, the second.", True),
    (NTH, {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "however"},
     "First part.\n\nBut the second.", False),
    (NTH, {"num_paragraphs": 3, "nth_paragraph": 1, "first_word": "dear"},
     "\"Dear friend,\n\nhello.\n\nbye.", True),
    (NTH, {"num_paragraphs": 2, "nth_paragraph": 1, "first_word": "summary"},
     "Summary: done.\n\n\n\nEnd.", False),  # the word is "summary:"
    (NTH, g(num_paragraphs=3, nth_paragraph=2, first_word="then"),
     "A.\n\nThen b.", False),
    # bullets: "* " and "- " lines, exactly
    (BUL, {"num_bullets": 3}, "* one\n* two\n* three", True),
    (BUL, {"num_bullets": 3}, "- one\n- two\n- three", True),
    (BUL, {"num_bullets": 2}, "* one\n- two", True),
    (BUL, {"num_bullets": 2}, "* one\n* two\n* three", False),
    (BUL, {"num_bullets": 2}, "**Bold** title\n* one\n* two", True),
    (BUL, {"num_bullets": 2}, "Intro\n   * indented\n\t- tabbed\n", True),
    (BUL, g(num_bullets=1), "1. numbered\n2. list", False),
    # highlighted sections: *x* and **x**
    (HL, {"num_highlights": 2}, "Some *important* and *urgent* text.", True),
    (HL, {"num_highlights": 2}, "Only *one* here.", False),
    (HL, {"num_highlights": 2}, "A **bold** part.", False),  # counted once
    (HL, {"num_highlights": 1}, "Empty * * and ** **.", False),
    (HL, {"num_highlights": 1}, "Broken *across\nlines* here.", False),
    (HL, g(num_highlights=3), "*a* *b* *c*", True),
    # sections
    (SEC, {"section_spliter": "Section", "num_sections": 2},
     "Section 1\nIntro.\nSection 2\nBody.", True),
    (SEC, {"section_spliter": "SECTION", "num_sections": 3},
     "SECTION 1\nIntro.\nSECTION 2\nBody.", False),
    (SEC, {"section_spliter": "Section", "num_sections": 2},
     "Section one\nIntro.\nSection two\nBody.", False),
    (SEC, g(section_spliter=" PARAGRAPH ", num_sections=2), "PARAGRAPH 1 a PARAGRAPH 2 b", True),
    # JSON, fenced or not
    (JS, {}, '{"a": 1, "b": [1, 2]}', True),
    (JS, {}, '```json\n{"a": 1}\n```', True),
    (JS, {}, '```JSON\n[1, 2, 3]\n```  ', True),
    (JS, {}, '```\n{"a": 1}\n```', True),
    (JS, {}, 'Here it is: {"a": 1}', False),
    (JS, {}, '{"a": 1,}', False),
    (JS, g(), '```json\n{"a": "naïve ☃"}\n```\n', True),
    # titles <<...>>
    (TI, {}, "<<A Poem of Joy>>\nRoses are red.", True),
    (TI, {}, "<< >>\nNo title really.", False),
    (TI, {}, "<<broken\n>> title", False),
    (TI, {}, "No title at all.", False),
    (TI, g(), "Text <<<inner>>> text", True),
    # constrained response
    (CR, {}, "My answer is yes.", True),
    (CR, {}, "Well, my answer is no.", False),
    (CR, {}, "I think... My answer is maybe. Because reasons.", True),
    (CR, g(), "Yes.", False),
    # placeholders [x]
    (PH, {"num_placeholders": 2}, "Dear [name], you live at [address].", True),
    (PH, {"num_placeholders": 2}, "Dear [name], nothing else.", False),
    (PH, {"num_placeholders": 1}, "An empty [] one counts.", True),
    (PH, {"num_placeholders": 1}, "Open [across\nlines] does not.", False),
    (PH, g(num_placeholders=3), "[[a]] [b] [c", False),
    # postscripts
    (PS, {"postscript_marker": "P.S."}, "Hello.\n\nP.S. See you soon.", True),
    (PS, {"postscript_marker": "P.S."}, "Hello.\n\np.s. lower case counts.", True),
    (PS, {"postscript_marker": "P.P.S"}, "Hello.\nP.P.S. Another one.", True),
    (PS, {"postscript_marker": "P.P.S"}, "Hello.\nP.S. only one.", False),
    (PS, g(postscript_marker="P.S."), "No postscript here.", False),
    # keywords
    (EX, {"keywords": ["river", "dawn"]}, ESSAY, True),
    (EX, {"keywords": ["river", "moon"]}, ESSAY, False),
    (EX, {"keywords": ["RIVER"]}, ESSAY, True),
    (EX, g(keywords=["field"]), ESSAY, True),
    (FB, {"forbidden_words": ["moon", "star"]}, ESSAY, True),
    (FB, {"forbidden_words": ["farmers"]}, ESSAY, False),
    (FB, {"forbidden_words": ["field"]}, ESSAY, True),
    (FB, g(forbidden_words=["school", "school"]), ESSAY, False),
    (FR, {"keyword": "the", "frequency": 3, "relation": "at least"}, ESSAY, True),
    (FR, {"keyword": "the", "frequency": 5, "relation": "at least"}, ESSAY, False),
    (FR, {"keyword": "valley", "frequency": 2, "relation": "less than"}, ESSAY, True),
    (FR, g(keyword=" Farmers ", frequency=1, relation="less than"), ESSAY, False),
    (LF, {"letter": "z", "let_frequency": 2, "let_relation": "at least"}, "Zebra puzzle", True),
    (LF, {"letter": "z", "let_frequency": 5, "let_relation": "at least"}, "Zebra puzzle", False),
    (LF, {"letter": "a", "let_frequency": 3, "let_relation": "less than"}, "banana", False),
    (LF, g(letter="Q", let_frequency=1, let_relation="less than"), "no such letter", True),
    # letter case and language
    (UP, {}, "THIS IS ALL IN CAPITAL LETTERS, AS ASKED.", True),
    (UP, {}, "THIS IS ALMOST all in capital letters.", False),
    (UP, {}, "C'EST UNE RÉPONSE ENTIÈREMENT EN FRANÇAIS ET EN MAJUSCULES.", False),
    (UP, g(), "HELLO WORLD, THIS IS A TEST OF THE SYSTEM.   \n", True),
    (LO, {}, "this is all lowercase english text about rivers.", True),
    (LO, {}, "this is Mostly lowercase english text.", False),
    (LO, {}, "ceci est une phrase entièrement en français et en minuscules.", False),
    (LO, g(), "all lower, with a number 42 and punctuation!", True),
    (CAP, {"capital_frequency": 2, "capital_relation": "at least"}, "I saw NASA and the FBI.",
     True),
    (CAP, {"capital_frequency": 4, "capital_relation": "at least"}, "I saw NASA and the FBI.",
     False),
    (CAP, {"capital_frequency": 3, "capital_relation": "less than"}, "DON'T do it.", True),
    (CAP, {"capital_frequency": 2, "capital_relation": "at least"}, "NASA's budget.", False),
    (CAP, {"capital_frequency": 3, "capital_relation": "at least"}, "I'm SURE it's OK.", True),
    (CAP, g(capital_frequency=2, capital_relation="less than"), "STATE-OF-THE-ART tools.", True),
    (LANG, {"language": "en"}, ESSAY, True),
    (LANG, {"language": "fr"}, ESSAY, False),
    (LANG, {"language": "de"}, "Der Fluss schlängelte sich durch das Tal und die Bauern "
     "arbeiteten auf den Feldern.", True),
    (LANG, g(language="es"), "El río serpenteaba por el valle y los campesinos trabajaban.",
     True),
    # end phrase, quotation, repeat, two responses, commas
    (END, {"end_phrase": "Any other questions?"}, "Done. Any other questions?", True),
    (END, {"end_phrase": "Any other questions?"}, "Done. any other questions?  \n", True),
    (END, {"end_phrase": "Any other questions?"}, "\"Done. Any other questions?\"", True),
    (END, {"end_phrase": "Any other questions?"}, "Any other questions? Thanks.", False),
    (END, g(end_phrase="Is there anything else I can help with?"), "Bye.", False),
    (QU, {}, "\"Wrapped in quotes.\"", True),
    (QU, {}, "  \"Wrapped, with spaces around.\"  \n", True),
    (QU, {}, "\"", False),
    (QU, {}, "“Curly quotes do not count.”", False),
    (QU, g(), "Not wrapped.", False),
    (REP, {"prompt_to_repeat": "Write a poem about rivers."},
     "Write a poem about rivers. The river runs.", True),
    (REP, {"prompt_to_repeat": "Write a poem about rivers."},
     "  write a POEM about rivers. Sure!", True),
    (REP, {"prompt_to_repeat": "Write a poem about rivers."},
     "Sure! Write a poem about rivers.", False),
    (REP, g(prompt_to_repeat="Say hi."), "Say hi", False),
    (TWO, {}, "First answer.\n******\nSecond answer.", True),
    (TWO, {}, "Same.\n******\nSame.", False),
    (TWO, {}, "One.\n******\nTwo.\n******\nThree.", False),
    (TWO, {}, "******\nOne.\n******\nTwo.\n******", True),
    (TWO, g(), "One.\n******\n\n******\nTwo.", False),
    (NC, {}, "No commas here at all.", True),
    (NC, {}, "Well, there is one.", False),
    (NC, {}, "A full-width comma， is not a comma.", True),
    (NC, g(), "", False),  # a blank response follows nothing
]

# Where ours differs from the reference on purpose: (id, kwargs, response, ours, theirs),
# "theirs" an exception's name where the reference raises.
DIVERGENT: list[tuple[str, dict, str, bool, object]] = [
    # langdetect finds no features: the reference counts it as followed
    (LANG, {"language": "fr"}, "12345 !!! 678", False, True),
    # a keyword is literal here; the reference compiles it as a regex
    (EX, {"keywords": ["what?"]}, "so wha", False, True),
    (EX, {"keywords": ["a.c"]}, "abc", False, True),
    (FR, {"keyword": "(x", "frequency": 1, "relation": "at least"}, "(x", True, "error"),
    # JSON nested past the parser's depth: not JSON here, an exception there
    (JS, {}, "[" * 100_000 + "]" * 100_000, False, "RecursionError"),
]

# Sentence counts of our splitter, by hand (punkt agrees on all but the last: it reads the
# "A." of an enumeration as the end of a sentence).
SENTENCES: list[tuple[str, int]] = [
    ("", 0),
    ("   \n ", 0),
    ("One sentence without a full stop", 1),
    ("Hello world. This is it.", 2),
    ("Mr. Smith met Dr. Jones at 5 p.m. yesterday.", 1),
    ("I live in the U.S. The weather is fine.", 2),
    ("J. K. Rowling wrote it. The end.", 2),
    ("Wow!!! Amazing. Really?! Yes.", 4),
    ("He said \"Stop.\" She stopped.", 2),
    ("Use tools, e.g. hammers.", 2),
    ("Wait... the end.", 1),
    ("Wait... The end.", 2),
    ("In 2019. the year ended.", 1),
    ("In 2019. The year ended.", 2),
    ("Line one\nLine two\n\nLine three", 1),
    ("**Note.** Read this. Then go.", 3),
    ("(Hello.) World.", 2),
    ("Vitamin C. It helps.", 1),
    ("Options: A. B. C.", 1),
]
