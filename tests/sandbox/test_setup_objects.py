"""Objects the trusted test setup builds (MBPP's ``test_setup_code``: a tree of ``Node``s, a
``ListNode`` list) cross between the test process and the solution's as instances of each
side's own copy of the setup's classes, made by ``object.__new__`` with their attributes set:
no code of any class runs to make them, and nothing but the setup's classes and plain data
crosses. The codec on the host first (both sides' classes from one setup run twice, as in the
sandbox), then one real-shaped row per case through the real server and Docker engine."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from sandbox.harness import objects, protocol
from tests.conftest import ServerProcess, verify_code
from tests.helpers.code import sandbox_server

SETUP = """
calls = []

class ListNode:
    def __init__(self, val=0, next=None):
        calls.append('init')
        self.val = val
        self.next = next

class TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val, self.left, self.right = val, left, right
    def __eq__(self, other):
        calls.append('eq')
        return isinstance(other, TreeNode) and (self.val, self.left, self.right) == (
            other.val, other.left, other.right)
    def __hash__(self):
        calls.append('hash')
        return 0

class Point:
    __slots__ = ('x', 'y', '__z')
    def total(self):
        return self.x + self.y

class Guarded:
    def __setattr__(self, name, value):
        calls.append('setattr')
    @property
    def size(self):
        return 1

class Bad(ValueError):
    pass

class Items(list):
    pass
"""


def setup_side() -> tuple[dict[str, Any], dict[str, type]]:
    """One run of the setup: its namespace and classes (each process has its own)."""
    namespace: dict[str, Any] = {"__name__": objects.SETUP_MODULE}
    exec(SETUP, namespace)
    return namespace, objects.setup_classes(namespace)


def cross(value: object, sender: dict[str, type], receiver: dict[str, type]) -> Any:
    return protocol.decode(json.loads(json.dumps(protocol.encode(value, sender))), receiver)


def linked(ns: dict[str, Any], values: list[int]) -> Any:
    head = None
    for v in reversed(values):
        head = ns["ListNode"](v, head)
    return head


def test_a_linked_list_crosses_as_the_receivers_class_without_its_init() -> None:
    ns, sent = setup_side()
    theirs, received = setup_side()
    got = cross(linked(ns, [1, 2, 3]), sent, received)
    assert type(got) is received["ListNode"] and received["ListNode"] is not sent["ListNode"]
    values = []
    while got is not None:
        values.append(got.val)
        got = got.next
    assert values == [1, 2, 3] and theirs["calls"] == []  # no __init__ on the receiving side


def test_a_100000_node_list_crosses_flat_in_linear_time() -> None:
    ns, classes = setup_side()
    head = linked(ns, list(range(100_000)))
    started = time.process_time()
    wire = json.dumps(protocol.encode(head, classes))
    got = protocol.decode(json.loads(wire), classes)
    assert time.process_time() - started < 10  # ~2 s on a loaded 2-core machine
    assert len(wire) < protocol.CANDIDATE_FRAME_BYTES
    count = 0
    while got is not None:
        count, got = count + 1, got.next
    assert count == 100_000


def test_shared_nodes_and_cycles_keep_their_shape() -> None:
    ns, classes = setup_side()
    a, b = ns["ListNode"](1), ns["ListNode"](2)
    a.next, b.next = b, a
    got = cross({"pair": (a, b), "again": [a]}, classes, classes)
    x, y = got["pair"]
    assert x.next is y and y.next is x and got["again"][0] is x


def test_a_tree_compares_by_the_setups_eq_and_none_of_its_code_runs_to_build_it() -> None:
    ns, classes = setup_side()
    tree = ns["TreeNode"](1, ns["TreeNode"](2), ns["TreeNode"](3))
    theirs, received = setup_side()
    got = cross([tree, tree.left], classes, received)
    assert theirs["calls"] == []  # no __eq__, __hash__ or __init__ while decoding
    assert got[0].left is got[1]
    assert got[0] == received["TreeNode"](1, received["TreeNode"](2), received["TreeNode"](3))


def test_slots_cross_and_an_unset_slot_stays_unset() -> None:
    ns, classes = setup_side()
    p = ns["Point"]()
    p.x, p.y = 1, 2
    got = cross(p, classes, classes)
    assert (got.x, got.y, got.total()) == (1, 2, 3)
    with pytest.raises(AttributeError):
        got._Point__z  # noqa: B018


def test_identity_hashed_objects_may_be_set_elements_but_not_coded_ones() -> None:
    ns, classes = setup_side()
    nodes = {ns["ListNode"](1), ns["ListNode"](2)}
    assert {n.val for n in cross(nodes, classes, classes)} == {1, 2}
    theirs, received = setup_side()
    for value in ({ns["TreeNode"](1)}, {(1, ns["TreeNode"](1)): 0}, [[ns["TreeNode"](1)]] * 9):
        try:
            cross(value, classes, received)
        except ValueError:
            pass
    assert theirs["calls"] == []  # never hashed or compared by its own code here
    with pytest.raises(ValueError, match="hash by their class"):
        cross({ns["TreeNode"](1)}, classes, received)
    with pytest.raises(ValueError, match="key that hashes"):
        cross({(1, ns["TreeNode"](1)): 0}, classes, received)


@pytest.mark.parametrize("name", ["Bad", "Items", "calls", "Missing", "object", "type"])
def test_only_plain_classes_of_the_setup_are_rebuilt(name: str) -> None:
    """Not an exception, not a subclass of a builtin, nothing the setup did not define."""
    _, classes = setup_side()
    node = {"g": [{"o": 0}, [[name, []]]]}
    with pytest.raises(ValueError, match="does not define"):
        protocol.decode(node, classes)


def test_an_instance_of_a_class_not_the_setups_is_not_plain_data() -> None:
    ns, classes = setup_side()
    with pytest.raises(TypeError, match="not plain data"):
        protocol.encode([ns["Items"]([1])], classes)
    with pytest.raises(TypeError, match="not plain data"):
        protocol.encode(ns["ListNode"](1))  # no classes: plain data only


@pytest.mark.parametrize(("state", "match"), [
    ([["__class__", None]], "plain identifier"), ([["__dict__", {"d": []}]], "plain identifier"),
    ([["not a name", None]], "plain identifier"), ([[5, None]], "plain identifier"),
    ([["x" * 101, None]], "plain identifier"), ([["size", None]], "shadow"),
    ([[f"a{i}", None] for i in range(65)], "more than 64"),
])
def test_forged_attributes_are_refused(state: list[Any], match: str) -> None:
    theirs, classes = setup_side()
    with pytest.raises(ValueError, match=match):
        protocol.decode({"g": [{"o": 0}, [["Guarded", state]]]}, classes)
    assert theirs["calls"] == []  # its __setattr__ never runs


def test_a_method_cannot_be_shadowed_and_slots_are_set_through_their_descriptors() -> None:
    _, classes = setup_side()
    with pytest.raises(ValueError, match="shadow"):
        protocol.decode({"g": [{"o": 0}, [["Point", [["total", None]]]]]}, classes)
    with pytest.raises(ValueError, match="no attribute"):
        protocol.decode({"g": [{"o": 0}, [["Point", [["w", None]]]]]}, classes)


@pytest.mark.parametrize("node", [
    {"g": [{"o": 1}, [["ListNode", []]]]}, {"g": [{"o": -1}, [["ListNode", []]]]},
    {"g": [{"o": True}, [["ListNode", []]]]}, {"g": [{"o": "0"}, [["ListNode", []]]]},
    {"g": [{"o": 0}, []]}, {"g": [{"o": 0}]}, {"g": [{"o": 0}, [["ListNode"]]]},
    {"g": [{"o": 0}, [["ListNode", [["val"]]]]]}, {"g": [{"o": 0}, [[None, []]]]},
    {"l": [{"g": [{"o": 0}, [["ListNode", []]]]}]}, {"o": 0},
    {"g": [{"o": 0}, [["ListNode", [["next", {"g": [{"o": 0}, [["ListNode", []]]]}]]]]]},
])
def test_malformed_graphs_are_refused(node: object) -> None:
    _, classes = setup_side()
    with pytest.raises(ValueError):
        protocol.decode(node, classes)


def test_a_graph_is_refused_where_no_setup_class_is_known() -> None:
    with pytest.raises(ValueError, match="malformed"):
        protocol.decode({"g": [{"o": 0}, [["ListNode", []]]]})


def test_too_many_objects_are_refused_at_once() -> None:
    _, classes = setup_side()
    node = {"g": [{"o": 0}, [["ListNode", []]] * (objects.MAX_OBJECTS + 1)]}
    started = time.process_time()  # CPU time: the machine's load must not decide the test
    with pytest.raises(ValueError, match="more than"):
        protocol.decode(node, classes)
    assert time.process_time() - started < 0.5


def test_colliding_ints_spread_over_objects_are_counted_together() -> None:
    """One value's hash count spans every object's state: nine nodes holding one colliding
    int each are refused as nine such ints in one list are."""
    ns, classes = setup_side()
    P = protocol.HASH_MODULUS
    nodes = [ns["ListNode"]([i * P]) for i in range(1, 10)]
    with pytest.raises(ValueError, match="share one hash"):
        cross(nodes, classes, classes)


def test_an_exception_carries_the_setups_objects() -> None:
    from sandbox.harness.candidate import Candidate
    from sandbox.harness.candidate_server import error_reply

    ns, classes = setup_side()
    _, received = setup_side()
    candidate = Candidate()
    candidate.classes = received
    reply = json.loads(json.dumps(error_reply(ValueError(ns["ListNode"](7)), classes)))
    exc = candidate.exception_for(reply["error"])
    assert type(exc) is ValueError and type(exc.args[0]) is received["ListNode"]
    assert exc.args[0].val == 7


# --- through the server and the sandbox --------------------------------------------------------

SERVER_ENV = {"REWARD_SERVER_CACHE_SIZE": "0"}


srv = sandbox_server("setup-objects", SERVER_ENV)


def fenced(source: str) -> str:
    return f"```python\n{source}\n```"


# MBPP-shaped (task 89's kind: "check if a binary tree is balanced"): the setup builds trees of
# its own Node and the asserts pass them in; the solution defines Node too, as MBPP's code does.
MBPP_TREE: dict[str, Any] = {
    "test_setup_code": (
        "class Node: \r\n\tdef __init__(self, data): \r\n\t\tself.data = data \r\n"
        "\t\tself.left = None\r\n\t\tself.right = None\r\n"
        "root = Node(1) \r\nroot.left = Node(2) \r\nroot.right = Node(3) \r\n"
        "root.left.left = Node(4) \r\nroot.left.right = Node(5) \r\n"
        "root.left.left.left = Node(8) \r\n"
        "root1 = Node(1) \r\nroot1.left = Node(2) \r\nroot1.right = Node(3) \r\n"
        "root1.left.left = Node(4) \r\nroot1.left.right = Node(5) \r\n"
        "root1.right.left = Node(6) \r\nroot1.left.left.left = Node(7)\r\n"
        "root2 = Node(1) \r\nroot2.left = Node(2) \r\nroot2.left.left = Node(3)\r\n"
        "root2.left.left.left = Node(7)"),
    "test_list": ["assert is_tree_balanced(root) == False",
                  "assert is_tree_balanced(root1) == True",
                  "assert is_tree_balanced(root2) == False"],
}
BALANCED = (
    "class Node: \r\n\tdef __init__(self, data): \r\n\t\tself.data = data \r\n"
    "\t\tself.left = None\r\n\t\tself.right = None\r\n"
    "def get_height(root): \r\n\tif root is None: \r\n\t\treturn 0\r\n"
    "\treturn max(get_height(root.left), get_height(root.right)) + 1\r\n"
    "def is_tree_balanced(root): \r\n\tif root is None: \r\n\t\treturn True\r\n"
    "\tlh = get_height(root.left) \r\n\trh = get_height(root.right) \r\n"
    "\tif (abs(lh - rh) <= 1) and is_tree_balanced( \r\n"
    "\troot.left) is True and is_tree_balanced( root.right) is True: \r\n"
    "\t\treturn True\r\n\treturn False")


def test_mbpp_tree_row(srv: ServerProcess) -> None:
    good, always = verify_code(
        srv.url, {**MBPP_TREE, "response": fenced(BALANCED)},
        {**MBPP_TREE, "response": fenced("def is_tree_balanced(root):\n    return True\n")})
    assert (good["score"], good["total"]) == (1.0, 3), good
    assert [t["status"] for t in always["tests"]] == ["wrong_answer", "passed", "wrong_answer"]


# LeetCode-shaped, HumanEval-style (test_code + entry_point): the setup defines the node
# classes and the helpers that build and read them; the solution uses ListNode by name.
LIST_SETUP = (
    "class ListNode:\n    def __init__(self, val=0, next=None):\n"
    "        self.val = val\n        self.next = next\n\n"
    "def build(values, cycle_at=None):\n    nodes = [ListNode(v) for v in values]\n"
    "    for a, b in zip(nodes, nodes[1:]):\n        a.next = b\n"
    "    if cycle_at is not None:\n        nodes[-1].next = nodes[cycle_at]\n"
    "    return nodes[0] if nodes else None\n\n"
    "def to_list(node, limit=10000):\n    out = []\n"
    "    while node is not None and len(out) < limit:\n"
    "        out.append(node.val)\n        node = node.next\n    return out\n")
REVERSE_TEST = (
    "def check(candidate):\n"
    "    assert to_list(candidate(build([1, 2, 3, 4, 5]))) == [5, 4, 3, 2, 1]\n"
    "    assert to_list(candidate(build([1]))) == [1]\n"
    "    assert candidate(None) is None\n"
    "    assert to_list(candidate(build(list(range(5000))))) == list(range(4999, -1, -1))\n")


@pytest.mark.parametrize(("solution", "score"), [
    ("def reverseList(head):\n    prev = None\n    while head:\n"
     "        head.next, prev, head = prev, head, head.next\n    return prev\n", 1.0),
    ("def reverseList(head):\n    out = None\n    while head:\n"
     "        out = ListNode(head.val, out)\n        head = head.next\n    return out\n", 1.0),
    ("def reverseList(head):\n    return head\n", 0.0),
], ids=["in-place", "new-nodes-of-the-setups-class", "wrong"])
def test_leetcode_linked_list_row(srv: ServerProcess, solution: str, score: float) -> None:
    (result,) = verify_code(srv.url, {"response": fenced(solution), "test_setup": LIST_SETUP,
                                      "test_code": REVERSE_TEST, "entry_point": "reverseList"})
    assert result["score"] == score, result


def test_a_cycle_crosses_both_ways(srv: ServerProcess) -> None:
    """LeetCode 141/142: a cyclic list goes in; the node where its cycle starts comes back."""
    test = ("def check(candidate):\n"
            "    assert candidate(build([3, 2, 0, -4], cycle_at=1)).val == 2\n"
            "    assert candidate(build([1, 2], cycle_at=0)).val == 1\n"
            "    assert candidate(build([1])) is None\n")
    floyd = ("def detectCycle(head):\n    slow = fast = head\n    while fast and fast.next:\n"
             "        slow, fast = slow.next, fast.next.next\n        if slow is fast:\n"
             "            slow = head\n            while slow is not fast:\n"
             "                slow, fast = slow.next, fast.next\n            return slow\n"
             "    return None\n")
    (result,) = verify_code(srv.url, {"response": fenced(floyd), "test_setup": LIST_SETUP,
                                      "test_code": test, "entry_point": "detectCycle"})
    assert result["score"] == 1.0, result


TREE_SETUP = (
    "class TreeNode:\n    def __init__(self, val=0, left=None, right=None):\n"
    "        self.val, self.left, self.right = val, left, right\n"
    "    def __eq__(self, other):\n"
    "        return isinstance(other, TreeNode) and (self.val, self.left, self.right) == (\n"
    "            other.val, other.left, other.right)\n\n"
    "def tree(values):\n    nodes = [None if v is None else TreeNode(v) for v in values]\n"
    "    kids = nodes[::-1]\n    root = kids.pop()\n    for node in nodes:\n"
    "        if node:\n            if kids: node.left = kids.pop()\n"
    "            if kids: node.right = kids.pop()\n    return root\n")


@pytest.mark.parametrize(("solution", "score"), [
    ("def invertTree(root):\n    if root:\n"
     "        root.left, root.right = invertTree(root.right), invertTree(root.left)\n"
     "    return root\n", 1.0),
    ("class TreeNode:\n    def __init__(self, val=0, left=None, right=None):\n"
     "        self.val, self.left, self.right = val, left, right\n"
     "    def __eq__(self, other):\n        return True\n"
     "def invertTree(root):\n    return TreeNode(0)\n", 0.0),
], ids=["invert", "own-class-always-equal"])
def test_a_returned_tree_is_compared_by_the_setups_eq(srv: ServerProcess, solution: str,
                                                      score: float) -> None:
    """The solution's own TreeNode (whose __eq__ says yes) crosses as the setup's: only the
    setup's __eq__ decides."""
    test = ("def check(candidate):\n"
            "    assert candidate(tree([4, 2, 7, 1, 3, 6, 9])) == tree([4, 7, 2, 9, 6, 3, 1])\n"
            "    assert candidate(tree([2, 1, 3])) == tree([2, 3, 1])\n")
    (result,) = verify_code(srv.url, {"response": fenced(solution), "test_setup": TREE_SETUP,
                                      "test_code": test, "entry_point": "invertTree"})
    assert result["score"] == score, result


def test_a_slots_class_of_the_setups(srv: ServerProcess) -> None:
    setup = ("class Point:\n    __slots__ = ('x', 'y')\n    def __init__(self, x, y):\n"
             "        self.x, self.y = x, y\n\nA, B = Point(0, 0), Point(4, 2)\n")
    solution = "def midpoint(a, b):\n    return Point((a.x + b.x) / 2, (a.y + b.y) / 2)\n"
    (result,) = verify_code(srv.url, {
        "response": fenced(solution), "test_setup_code": setup,
        "test_list": ["assert (midpoint(A, B).x, midpoint(A, B).y) == (2, 1)",
                      "assert isinstance(midpoint(A, A), Point)"]})
    assert (result["score"], result["total"]) == (1.0, 2), result
