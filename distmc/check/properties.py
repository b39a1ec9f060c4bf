"""PCTL properties: parsing against the model, the atoms to label, and the property-driven terminal states.

Terminal states follow Storm's property-driven builder (``storm/builder/TerminalStatesGetter``) exactly, so that
state and transition counts are comparable with ``stormpy.build_model(program, properties)``: only an atomic
child (a label or an expression) of the outermost ``P``/``R`` operator's path formula counts:

* ``F phi`` (unbounded): states satisfying ``phi`` are not expanded;
* ``phi1 U phi2`` (unbounded): states satisfying ``phi2``, and states violating ``phi1``, are not expanded, but
  only when ``phi1`` is atomic or ``true``;
* the same for their step-bounded forms (``F<=k``, ``phi1 U<=k phi2``);
* ``G``, ``X``, cumulative and instantaneous rewards, long-run averages: no terminal states; nor the right side of
  an until whose step bound has a lower bound above 0 (``F[2,5] phi``: a path may leave ``phi`` and come back).

Threshold operators (``P>=p``, ``R<r``, ``S>q``, ...) are checked as their quantitative form (the bound removed;
on an MDP queried without ``min``/``max``, the direction the comparison implies, as Storm and PRISM do: ``min`` for
a lower bound, ``max`` for an upper one), and the truth value is the comparison at every initial state.
Several properties (``A; B``, or a PRISM properties file) are parsed by :func:`parse_properties` into one
:class:`PropertySet`, whose exploration serves them all (:meth:`PropertySet.terminal_mask`).

Labels of the PRISM program inside the property are replaced by their defining expressions before the formula
used for checking is parsed, so that every propositional subformula becomes one atomic expression; the reducer
labels the assembled model with each of them under the name Storm's checker looks up (the expression's text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import stormpy.logic as sl

from distmc.check.formula import (
    COMPARISON,
    EXPOSED,
    OPERATORS,
    atom_of,
    bounded_globally,
    children,
    has_opaque_combination,
    names_of,
    opaque_atoms,
    parse_all,
    parse_one,
    solution_of,
    stop_of,
    terminal_of,
)
from distmc.check.result import TRUTH_FILTERS, VALUE_FILTERS
from distmc.errors import PropertyError
from distmc.model.expr import CompiledExpr
from distmc.model.program import LITERAL, Model, split_top

__all__ = [
    "PropertySet",
    "PropertySpec",
    "parse_properties",
    "parse_property",
    "property_constants",
    "split_statements",
]

_LABEL_REF = re.compile(r'(?<![{\w])"([^"]+)"')
_BUILTIN_LABELS = ("init", "deadlock")


@dataclass
class PropertySpec:
    """A parsed property and what exploration and assembly need from it.

    Attributes:
        text: the property as the user gave it.
        formula: the stormpy formula used for checking (labels expanded into expressions).
        atoms: label name in the assembled model -> compiled expression.
        terminal: ``(expression, value)`` pairs: a state where ``expression == value`` is not expanded.
        reward_name: the reward structure an ``R`` operator refers to (None: the model's only/first one).
        is_reward: whether the property is an ``R`` operator.
        has_direction: whether ``min``/``max`` was given, or a threshold implies one (see the module docstring).
        name: the property's name (``"name": P=? [...]`` in a properties file), else None.
        operator: ``P``, ``R``, ``LRA`` (also written ``S``) or ``T``.
        threshold: ``(comparison, bound)`` of a threshold operator (``(">=", Fraction(1, 10))``), else None.
        quantitative: ``formula`` with the threshold removed (and the implied direction set): what is computed.
        solution: how the value is found: ``sound`` (unbounded reachability, until, globally, expected rewards
            and times over propositional state formulas: an iterative method with a stated error bound),
            ``steps`` (``X``, step-bounded until, ``C<=k``, ``I=k``: finitely many matrix-vector steps, exact up
            to floating point) or ``other`` (long-run averages, nested operators, LTL: Storm's method, no stated
            bound).
        filter: ``filter(op, ..., "init")``'s function over the initial states (``max``, ``avg``, ``forall``,
            ...; :data:`~distmc.check.result.VALUE_FILTERS`, :data:`~distmc.check.result.TRUTH_FILTERS`), or None:
            the value at the one initial state, or the range over several.
        bound_rewards: reward structures that reward bounds of path formulas name (``F{"time"}<=200``).
        stop: a reward-bounded until's states after which its value is decided (its target, and its left side's
            violations), as ``terminal``'s pairs: Storm's reward-bounded method needs them absorbing.
    """

    text: str
    formula: Any
    atoms: dict[str, CompiledExpr] = field(default_factory=dict)
    terminal: list[tuple[CompiledExpr, bool]] = field(default_factory=list)
    reward_name: str | None = None
    is_reward: bool = False
    has_direction: bool = False
    builtin_labels: set[str] = field(default_factory=set)
    name: str | None = None
    operator: str = "P"
    threshold: tuple[str, Fraction] | None = None
    quantitative: Any = None
    solution: str = "sound"
    filter: str | None = None
    bound_rewards: list[str] = field(default_factory=list)
    stop: list[tuple[CompiledExpr, bool]] = field(default_factory=list)

    def terminal_mask(self, states: np.ndarray, stop: bool = False) -> np.ndarray:
        """``[B]`` bool: which of ``states`` ``[B, V]`` are not to be expanded; ``stop``: ``stop``'s instead."""
        out = np.zeros(states.shape[0], dtype=bool)
        for e, value in self.stop if stop else self.terminal:
            v = e(states)
            out |= v if value else ~v
        return out

    def with_direction(self, direction: str) -> Any:
        """A copy of the quantitative formula with ``min`` or ``max`` set (for MDPs)."""
        f = self.quantitative.clone()
        f.set_optimality_type(
            sl.OptimizationDirection.MINIMIZE if direction == "min" else sl.OptimizationDirection.MAXIMIZE
        )
        return f


def parse_property(text: str, model: Model, name: str | None = None) -> PropertySpec:
    """Parse one property ``text`` against ``model``; check that every label it names exists.

    Raises:
        PropertyError: on a syntax error, an unknown label or variable, or an unsupported operator.
    """
    for label in _LABEL_REF.findall(text):
        if label not in model.labels and label not in _BUILTIN_LABELS:
            raise PropertyError(
                f"property '{text}' names label \"{label}\", which {model.path} does not define "
                f"(labels: {', '.join(sorted(model.labels)) or 'none'})"
            )
    filter_op, inner = _split_filter(text)
    work = inner if "G" in names_of(model) else bounded_globally(inner)  # a variable G: as Storm reads it
    original = parse_one(work, model)
    operator = next((op for cls, op in OPERATORS if isinstance(original, cls)), None)
    if operator is None:
        raise PropertyError(
            f"property '{text}' must be a P, R, S (LRA) or T operator: P=? [...], P>=0.5 [...], R{{\"r\"}}=? [...], "
            f"S=? [...] (optionally with min/max)"
        )
    spec = PropertySpec(text=text, formula=None, name=name, operator=operator, filter=filter_op)
    spec.is_reward = operator == "R"
    spec.has_direction = bool(original.has_optimality_type)
    if spec.is_reward:
        if not model.rewards:
            raise PropertyError(f"property '{text}' asks for rewards, but {model.path} has no reward structure")
        if original.has_reward_model_name():
            spec.reward_name = original.reward_name
            if spec.reward_name not in [r.name for r in model.rewards]:
                raise PropertyError(
                    f"property '{text}' names reward structure '{spec.reward_name}', which the model lacks "
                    f"(have: {[r.name for r in model.rewards]})"
                )
        elif len(model.rewards) > 1:  # the first, as Storm takes it
            spec.reward_name = model.rewards[0].name
    spec.bound_rewards = list(dict.fromkeys(_BOUND_REWARD.findall(str(original))))
    have = [r.name for r in model.rewards]
    for r in spec.bound_rewards:
        if r not in have:
            raise PropertyError(
                f"property '{text}' bounds a path by reward structure '{r}', which the model lacks (have: {have})"
            )
    spec.terminal = terminal_of(original, model)
    # The formula for checking: PRISM labels expanded, so propositional parts are single atomic expressions.
    expanded = _LABEL_REF.sub(
        lambda m: f"({model.labels[m.group(1)].text})" if m.group(1) in model.labels else m.group(0), work
    )
    if spec.is_reward and len(model.rewards) > 1 and spec.reward_name and not original.has_reward_model_name():
        # name the structure: beside another property's, the induced model holds several and Storm needs the name
        expanded = re.sub(r"^\s*R(?=(min|max)?\s*[=<>])", f'R{{"{spec.reward_name}"}}', expanded, count=1)
    spec.formula = parse_one(expanded, model)
    if has_opaque_combination(spec.formula):
        expanded = _expand_builtin(expanded, text, model)
        spec.formula = parse_one(expanded, model)
    spec.builtin_labels = {n for n in _LABEL_REF.findall(expanded) if n in _BUILTIN_LABELS}
    stack = [spec.formula]
    while stack:
        f = stack.pop()
        a = atom_of(f, model)
        if a is not None:
            spec.atoms[a[0]] = a[1]
        elif not isinstance(f, EXPOSED):
            spec.atoms.update(opaque_atoms(f, model))
        stack.extend(children(f))
    spec.quantitative = spec.formula.clone()
    if spec.formula.has_bound:
        comparison = COMPARISON[str(spec.formula.comparison_type).rsplit(".", 1)[-1]]
        # threshold_expr, not threshold: stormpy's threshold reads (1 / 6) as 0 (measured)
        spec.threshold = (comparison, Fraction(str(spec.formula.threshold_expr.evaluate_as_rational())))
        spec.quantitative.remove_bound()
        if not spec.has_direction:  # PRISM's and Storm's reading on an MDP: for all schedulers
            spec.quantitative.set_optimality_type(
                sl.OptimizationDirection.MINIMIZE if comparison.startswith(">") else sl.OptimizationDirection.MAXIMIZE
            )
            spec.has_direction = True
    spec.solution = "other" if spec.bound_rewards else solution_of(spec.formula)  # Storm's epoch method: no bound
    if spec.bound_rewards:
        spec.stop = spec.terminal or stop_of(spec.formula, model)
    if filter_op in TRUTH_FILTERS and spec.threshold is None:
        raise PropertyError(
            f"property '{text}': filter({filter_op}, ...) counts or quantifies truth values: give it "
            f"a threshold property (P>=0.5 [...]), or use min, max, avg, sum or first for a value"
        )
    if filter_op in VALUE_FILTERS and spec.threshold is not None and filter_op != "range":
        raise PropertyError(
            f"property '{text}': filter({filter_op}, ...) of a threshold property: use forall, "
            f"exists or count, or ask for the value (=?)"
        )
    return spec


_FILTER = re.compile(r"^\s*filter\s*\((.*)\)\s*$", re.S)
_BOUND_REWARD = re.compile(r'rew\{"([^"]+)"\}')


def _split_filter(text: str) -> tuple[str | None, str]:
    """``(op, property)`` of ``filter(op, property, "init")``; ``(None, text)`` for a property without a filter.

    Raises:
        PropertyError: for a filter function or a set of states distmc does not answer.
    """
    m = _FILTER.match(text)
    if m is None:
        return None, text
    args = [a.strip() for a in split_top(m.group(1), ",")]
    supported = ", ".join(VALUE_FILTERS + TRUTH_FILTERS)
    if args[0] not in VALUE_FILTERS + TRUTH_FILTERS:
        raise PropertyError(
            f"property '{text}': filter function '{args[0]}' is not supported (over the initial "
            f"states distmc answers {supported}; --values writes every state's value)"
        )
    if len(args) != 3 or args[2] != '"init"':
        raise PropertyError(
            f"property '{text}': distmc answers filters over the initial states only, "
            f'filter({args[0]}, PROPERTY, "init") (--values writes every state\'s value)'
        )
    return args[0], args[1]


#: At most this many initial states are spelled out for "init" inside a Boolean combination.
_MAX_INIT_DISJUNCTS = 64


def _expand_builtin(expanded: str, text: str, model: Model) -> str:
    """``expanded`` with "init" written as the disjunction of the initial states' valuations."""
    if '"deadlock"' in expanded:
        raise PropertyError(
            f"property '{text}': \"deadlock\" inside a Boolean combination is not supported (use it on its own, "
            f'e.g. F "deadlock")'
        )
    states = model.initial_states
    if states.shape[0] > _MAX_INIT_DISJUNCTS:
        raise PropertyError(
            f"property '{text}': \"init\" inside a Boolean combination is spelled out as the initial states, and "
            f"this model has {states.shape[0]} (at most {_MAX_INIT_DISJUNCTS}); use it on its own"
        )
    disjuncts = []
    for row in states.tolist():
        parts = [
            (v.name if val else f"!{v.name}") if v.is_bool else f"{v.name}={val}"
            for v, val in zip(model.variables, row, strict=True)
        ]
        disjuncts.append("(" + (" & ".join(parts) or "true") + ")")
    return expanded.replace('"init"', "(" + " | ".join(disjuncts) + ")")


@dataclass
class PropertySet:
    """The properties of one run, checked on one exploration (:func:`parse_properties`).

    A state is left unexpanded only where every property allows it (the intersection of their terminal sets), so
    each property's value on the one model equals its value on its own property-driven model.
    """

    specs: list[PropertySpec]

    @property
    def atoms(self) -> dict[str, CompiledExpr]:
        """Label name -> expression: the union of the properties' atoms."""
        out: dict[str, CompiledExpr] = {}
        for spec in self.specs:
            out.update(spec.atoms)
        return out

    def terminal_mask(self, states: np.ndarray) -> np.ndarray:
        """``[B]`` bool: the states of ``states`` ``[B, V]`` that no property needs expanded."""
        out = self.specs[0].terminal_mask(states)
        for spec in self.specs[1:]:
            if not out.any():
                break
            out &= spec.terminal_mask(states)
        return out

    def reward_names(self, model: Model) -> list[str]:
        """The reward structures the properties use (``R`` operators and reward bounds), each once, in order."""
        names = []
        for s in self.specs:
            names += ([model.reward(s.reward_name).name] if s.is_reward else []) + s.bound_rewards
        return list(dict.fromkeys(names))


_NAMED = re.compile(r'^\s*"([^"]+)"\s*:\s*(.*)$', re.S)
_CONST = re.compile(r"^\s*const\b")
_UNDEFINED_CONST = re.compile(r"^\s*const\s+(?:(int|double|bool)\s+)?([A-Za-z_]\w*)\s*$")


def property_constants(text: str) -> list[str]:
    """The constants a properties text declares without a value (``const int B;``): ``--const`` gives them."""
    return [m.group(2) for s in split_statements(text) if (m := _UNDEFINED_CONST.match(s))]


def _define(statement: str, constants: dict[str, str]) -> str:
    """``const int B`` with ``B`` in ``constants``: ``const int B = 5`` (other statements as they are)."""
    m = _UNDEFINED_CONST.match(statement)
    if m is None or m.group(2) not in constants:
        return statement
    value = constants[m.group(2)].strip()
    if not LITERAL.fullmatch(value):
        raise PropertyError(
            f"cannot read the value '{value}' of constant '{m.group(2)}' of the properties: give a "
            f"number (3, 0.1, 1/3) or true/false"
        )
    return f"const {m.group(1) or 'int'} {m.group(2)} = {value}"


def split_statements(text: str) -> list[str]:
    """The statements of a PRISM properties text, ``//`` comments and blank ones dropped.

    Statements are ``;``-separated, or one per line (a line with an open bracket goes on to the next).
    """
    body = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in body:
        depth += (ch in "([{") - (ch in ")]}")
        if ch == ";" or (ch == "\n" and depth <= 0):
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(" " if ch == "\n" else ch)
    out.append("".join(cur).strip())
    return [s for s in out if s]


def parse_properties(text: str, model: Model, constants: dict[str, str] | None = None) -> PropertySet:
    """Parse one or several properties: ``A; B``, or the text of a PRISM properties file.

    A properties file has one property per line or ``;``-separated, ``"name": P=? [...]`` names, and ``const``
    definitions the properties use; ``constants`` gives the values of those it declares without one
    (``const int B;`` and ``--const B=5``, as PRISM and Storm take them).

    Example:
        >>> parse_properties('"six": P=? [F "six"]; P>=0.1 [X s=1]', model).specs[0].name  # doctest: +SKIP
        'six'

    Raises:
        PropertyError: as :func:`parse_property`, for a constant without a value, or for no property at all.
    """
    statements = [_define(s, constants or {}) for s in split_statements(text)]
    props = [s for s in statements if not _CONST.match(s)]
    if not props:
        raise PropertyError(f"no property in '{text}'")
    if len(statements) == 1:
        named = _NAMED.match(props[0])
        one = parse_property(named.group(2), model, named.group(1)) if named else parse_property(props[0], model)
        _check_reward_bounded([one])
        return PropertySet([one])
    rewrite = (lambda s: s) if "G" in names_of(model) else bounded_globally
    parsed = parse_all(";\n".join(rewrite(s) for s in statements), model)
    if len(parsed) != len(props):
        raise PropertyError(f"expected {len(props)} properties in '{text}', Storm read {len(parsed)}")
    specs = []
    for stmt, prop in zip(props, parsed, strict=True):
        if prop.contains_undefined_constants():
            names = [c.name for c in prop.get_undefined_constants()]
            raise PropertyError(
                f"property '{stmt}' uses a constant without a value ({', '.join(names)}): give it "
                f"with --const {','.join(n + '=VALUE' for n in names)}, or define it in the "
                f"properties, e.g. const double p = 0.1;"
            )
        named = _NAMED.match(stmt)
        body = named.group(2) if named else stmt
        # With constants, the text Storm prints has them substituted; without, the user's text is kept.
        if len(props) < len(statements):
            op, _ = _split_filter(body)
            raw = str(prop.get_raw_formula())
            body = raw if op is None else f'filter({op}, {raw}, "init")'
        specs.append(parse_property(body, model, named.group(1) if named else None))
    _check_reward_bounded(specs)
    return PropertySet(specs)


def _check_reward_bounded(specs: list[PropertySpec]) -> None:
    """Refuse a reward-bounded path formula whose target states distmc cannot make absorbing.

    Storm's reward-bounded method (stormpy 2.0.0) crashed the process, or answered wrongly (0.929 where the exact
    value is 0.907, -2.7e41 for a probability), on chains whose target states are not absorbing. Its states are
    made absorbing by the property's terminal states (:func:`terminal_of`: atomic sides) in the exploration, or in a
    copy of the model for its check where the exploration keeps them expanded (other properties of the run, or a
    negated side: :func:`stop_of`; :func:`distmc.check.dispatch.check_properties`).
    """
    for s in specs:
        if s.bound_rewards and not s.stop:
            raise PropertyError(
                f"property '{s.text}': a reward-bounded path formula needs sides that are labels or "
                f'expressions, or their negations (as in !"a" U{{"r"}}<=5 x=3): Storm\'s method '
                f"fails otherwise"
            )
