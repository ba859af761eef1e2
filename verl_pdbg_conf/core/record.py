"""Record classes for the validator's own data (findings, documents, options), without
`dataclasses`: importing it pulls in `inspect` (with `ast` and `dis`) and each class it builds
execs generated code, about 8 ms of a pre-flight run that must start in a third of
check-jsonschema's time. Same semantics as @dataclass for what this package uses: fields from
the class's annotations in order, defaults, `factory(...)` for mutable defaults, __eq__,
__repr__, `frozen=True` (then hashable and read-only), and `replace(**changes)`."""

from __future__ import annotations


class factory:
    """A default built anew for each record: `roles: dict = factory(dict)`."""

    __slots__ = ("make",)

    def __init__(self, make):
        self.make = make


def _read_only(self, name, *value):
    raise AttributeError(f"cannot change field '{name}' of a frozen {type(self).__name__}")


class Record:
    _fields: tuple = ()
    _defaults: dict = {}
    _frozen = False

    def __init_subclass__(cls, frozen: bool = False, **kw):
        super().__init_subclass__(**kw)
        fields = list(cls._fields)
        defaults = dict(cls._defaults)
        for name in cls.__dict__.get("__annotations__", {}):
            if name not in fields:
                fields.append(name)
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
                if isinstance(defaults[name], factory):
                    delattr(cls, name)
        cls._fields, cls._defaults, cls._frozen = tuple(fields), defaults, frozen or cls._frozen
        if cls._frozen:
            cls.__setattr__ = cls.__delattr__ = _read_only
        elif "__hash__" not in cls.__dict__:
            cls.__hash__ = None  # as @dataclass(eq=True): a mutable record is not hashable

    def __init__(self, *args, **kw):
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} arguments, {len(args)} given")
        values = dict(zip(fields, args))
        for name in fields[len(args):]:
            if name in kw:
                values[name] = kw.pop(name)
            elif name in self._defaults:
                d = self._defaults[name]
                values[name] = d.make() if isinstance(d, factory) else d
            else:
                raise TypeError(f"{type(self).__name__}() missing argument '{name}'")
        if kw:
            raise TypeError(f"{type(self).__name__}() got unexpected arguments {sorted(kw)}")
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def astuple(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def asdict(self) -> dict:
        return {f: getattr(self, f) for f in self._fields}

    def replace(self, **changes):
        return type(self)(**{**self.asdict(), **changes})

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.astuple() == other.astuple()

    def __hash__(self):
        return hash(self.astuple())

    def __repr__(self):
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"
