"""The trusted test setup's objects on the proxy's wire: which of its classes may cross between
the test process and the solution's (``setup_classes``, ``object_classes``), what an object's
state is (``state_of``), and how a received one gets it without any code of its class running
(``set_state``). The codec itself is ``protocol``'s."""

from __future__ import annotations

import types

# The attributes one object (an exception, an instance of a setup class) may carry across.
MAX_ATTRIBUTES = 64
# Objects in one value: a linked list of 100,000 nodes (LeetCode's largest) fits; the frame's
# bound holds fewer anyway.
MAX_OBJECTS = 1 << 17
# The module name the trusted test setup runs as, in the test process and the solution's: the
# classes it defines say so in their ``__module__``.
SETUP_MODULE = "__test__"


def setup_classes(namespace):
    """The classes the test setup defined in ``namespace`` (after running it, before anything
    else runs there), each by its own name: the only classes whose instances and exceptions may
    be rebuilt from the solution's data."""
    return {name: value for name, value in namespace.items()
            if type(value) is type and value.__module__ == SETUP_MODULE
            and value.__name__ == name}


def attribute_name(name):
    """Whether ``name`` may be an attribute that crosses: a plain identifier, no dunder (an
    instance's ``__class__`` or ``__dict__`` entry is nothing honest state needs)."""
    return (type(name) is str and len(name) <= 100 and name.isidentifier()
            and not name.startswith("__"))


def class_attribute(cls, name):
    """What ``cls`` itself (its MRO) holds under ``name``, or None; read from each class's own
    ``__dict__``, so nothing of the class's runs."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def set_state(instance, pairs):
    """Give ``instance`` the attributes ``pairs`` (name, value) as an object's own state:
    slots through their member descriptors, the rest straight into its ``__dict__``; no
    ``__setattr__``, property or ``__init__`` of its class runs. Checked whole before any is
    set: ValueError for too many, a bad name, or one that would shadow a method or property of
    the class (its callables must stay its own)."""
    cls, slots, plain = type(instance), [], {}
    if len(pairs) > MAX_ATTRIBUTES:
        raise ValueError(f"more than {MAX_ATTRIBUTES} attributes")
    try:
        own = object.__getattribute__(instance, "__dict__")
    except AttributeError:
        own = None
    for name, value in pairs:
        if not attribute_name(name):
            raise ValueError("an attribute name that is not a plain identifier")
        held = class_attribute(cls, name)
        if type(held) is types.MemberDescriptorType:
            slots.append((held, value))
        elif held is not None and (callable(held) or hasattr(type(held), "__get__")):
            raise ValueError(f"attribute {name!r} would shadow {cls.__name__}'s own")
        elif type(own) is not dict:
            raise ValueError(f"{cls.__name__} has no attribute {name!r}")
        else:
            plain[name] = value
    for descriptor, value in slots:
        descriptor.__set__(instance, value)
    if plain:
        own.update(plain)


def object_classes(classes):
    """The classes of ``setup_classes`` whose instances may cross: plain classes (metaclass
    ``type``) with only the setup's classes and ``object`` above them, so ``object.__new__``
    makes one and its attributes are all its state (no exception, no subclass of a builtin
    such as ``list``, no Enum)."""
    known = {id(c) for c in classes.values()}
    return {name: cls for name, cls in classes.items()
            if all(k is object or (type(k) is type and id(k) in known) for k in cls.__mro__)}


def slots_of(cls):
    """The member descriptors of ``cls``'s slots, (name, descriptor), from each class's own
    ``__dict__`` along its MRO."""
    return [(name, held) for klass in cls.__mro__ for name, held in list(klass.__dict__.items())
            if type(held) is types.MemberDescriptorType]


def state_of(instance, slots):
    """An object's attributes, (name, value): its ``slots`` that are set, and its
    ``__dict__``."""
    pairs = []
    for name, held in slots:
        try:
            pairs.append((name, held.__get__(instance, type(instance))))
        except AttributeError:
            pass  # a slot never set
    try:
        own = object.__getattribute__(instance, "__dict__")
    except AttributeError:
        own = None
    if type(own) is dict:
        pairs.extend(own.items())
    return pairs
