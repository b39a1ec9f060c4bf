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
import stormpy
import stormpy.logic as sl

from distmc._internal.stderr import storm_lines, storm_quiet
from distmc.check.result import TRUTH_FILTERS, VALUE_FILTERS
from distmc.errors import PropertyError
from distmc.model.expr import CompiledExpr
from distmc.model.program import LITERAL, Model, split_top

__all__ = ["PropertySet", "PropertySpec", "parse_properties", "parse_property", "property_constants",
           "split_statements"]

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


#: Words of the property language itself (PCTL operators, functions, literals).
_KEYWORDS = {"P", "R", "S", "F", "G", "U", "W", "X", "C", "I", "LRA", "min", "max", "Pmin", "Pmax", "Rmin", "Rmax",
             "true", "false", "floor", "ceil", "pow", "mod", "log", "multi", "filter", "T"}


_GLOBALLY = re.compile(r"(?<![\w\"])G\s*(<=|<|>=|>|\[)")


def _operand_end(text: str, start: int) -> int:
    """Where the path formula that starts at ``start`` ends: at the bracket closing the group it is in."""
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return i
            depth -= 1
    return len(text)


def _bounded_globally(text: str) -> str:
    """``text`` with every step-bounded ``G`` written in a form Storm parses (its parser has no bounded ``G``).

    ``G<=k phi`` (``phi`` in each of the steps 0..k) is ``phi U[k+1,k+1] true`` and ``G<k phi`` is ``phi U[k,k]
    true``: a step-bounded until, checked by matrix-vector steps like ``F<=k``; ``G[a,b] phi`` and ``G>=k phi``
    become the path formulas ``!(F[a,b] !phi)`` and ``!(F>=k !phi)``, which Storm checks as LTL.
    """
    while (m := _GLOBALLY.search(text)) is not None:
        if m.group(1) == "[":
            close = text.index("]", m.end())
            bound, after = text[m.end() : close], close + 1
        else:
            bm = re.match(r"\s*(\([^()]*\)|[\w.]+)", text[m.end() :])
            if bm is None:
                return text
            bound, after = bm.group(1), m.end() + bm.end()
        end = _operand_end(text, after)
        phi = text[after:end].strip()
        op = m.group(1)
        if op == "<=":
            new = f"({phi}) U[({bound})+1, ({bound})+1] true"
        elif op == "<":
            new = f"({phi}) U[{bound}, {bound}] true"
        elif op == "[":
            lo, _, hi = bound.partition(",")
            new = (f"({phi}) U[({hi.strip()})+1, ({hi.strip()})+1] true" if lo.strip() == "0"
                   else f"!(F[{bound}] {_negate(phi)})")
        else:
            new = f"!(F{op}{bound} {_negate(phi)})"
        text = text[: m.start()] + new + text[end:]
    return text


def _negate(phi: str) -> str:
    """``!(phi)``, or the operand of ``phi = !psi`` (Storm's LTL takes ``!(!psi)`` for an unknown label)."""
    rest = phi[1:].strip() if phi.startswith("!") else ""
    if rest and all(len(split_top(rest, op)) == 1 for op in "&|=<>"):
        return rest
    return f"!({phi})"


def _names(model: Model) -> set[str]:
    """The identifiers a property may use: variables, constants and PRISM formulas."""
    return ({v.name for v in model.variables} | {c.name for c in model.program.constants}
            | {v.name for v in model.program.expression_manager.get_variables()})


def _unknown_names(text: str, model: Model) -> list[str]:
    """Identifiers in ``text`` (outside quoted labels and reward names) that the model does not define."""
    bare = re.sub(r'"[^"]*"', " ", text)
    known = _names(model)
    return sorted({w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bare) if w not in known | _KEYWORDS})


def _parse_all(text: str, model: Model) -> list[Any]:
    """Storm's properties in ``text`` (``;``-separated, with ``const`` definitions and ``"name":`` prefixes)."""
    try:
        with storm_quiet():
            return list(stormpy.parse_properties(text, model.program))
    except RuntimeError as exc:
        unknown = _unknown_names(text, model)
        if unknown:
            raise PropertyError(
                f"property '{text}' names {', '.join(unknown)}: not a variable or constant of "
                f"{model.path.name} (variables: {', '.join(v.name for v in model.variables)}; labels are written "
                f'in quotes, as in F "goal")'
            ) from None
        raise PropertyError(f"cannot parse property '{text}': {' '.join(storm_lines(str(exc))) or repr(exc)}") from None


def _parse(text: str, model: Model) -> Any:
    props = _parse_all(text, model)
    if len(props) != 1:
        raise PropertyError(f"expected exactly one property, got {len(props)} in '{text}'")
    return props[0].get_raw_formula()


def _atom(f: Any, model: Model) -> tuple[str, CompiledExpr] | None:
    """(label name, expression) of an atomic formula, else None."""
    if isinstance(f, sl.AtomicExpressionFormula):
        return str(f), model.compile(f.get_expression())
    if isinstance(f, sl.AtomicLabelFormula):
        name = f.label
        if name in model.labels:
            return f'"{name}"', model.labels[name]
        return None
    return None


#: Formula classes stormpy exposes with their operands; a formula of another class (``X``, an LTL path formula,
#: total rewards ``C``) is opaque: its atoms are found in its text (:func:`_opaque_atoms`).
_EXPOSED = (sl.ProbabilityOperatorFormula, sl.RewardOperatorFormula, sl.LongRunAverageOperatorFormula,
            sl.TimeOperatorFormula, sl.EventuallyFormula, sl.GloballyFormula, sl.UntilFormula,
            sl.BoundedUntilFormula, sl.UnaryBooleanStateFormula, sl.BinaryBooleanStateFormula,
            sl.AtomicExpressionFormula, sl.AtomicLabelFormula, sl.BooleanLiteralFormula,
            sl.CumulativeRewardFormula, sl.InstantaneousRewardFormula, sl.LongRunAverageRewardFormula,
            sl.ConditionalFormula)


def _children(f: Any) -> list[Any]:
    out = []
    for attr in ("subformula", "left_subformula", "right_subformula", "main_subformula", "conditional_subformula"):
        if hasattr(f, attr):
            try:
                out.append(getattr(f, attr))
            except RuntimeError:
                pass
    return out


def _groups(text: str) -> list[str]:
    """Every balanced parenthesised part of ``text``, outermost first."""
    out, open_at = [], []
    for i, ch in enumerate(text):
        if ch == "(":
            open_at.append(i)
        elif ch == ")" and open_at:
            out.append((open_at.pop(), i + 1))
    return [text[a:b] for a, b in sorted(out)]


def _opaque_atoms(f: Any, model: Model) -> dict[str, CompiledExpr]:
    """The atomic expressions inside a formula stormpy does not expose the operands of, found in its text.

    Storm prints an atomic expression in parentheses, ``X (s = 1)``; each parenthesised part that parses (on its
    own, against the model) as one atomic expression printed the same way is one. The text comes from a formula
    Storm has parsed already, so every identifier in it is known (Storm's parser crashes on unknown ones).
    """
    out: dict[str, CompiledExpr] = {}
    inside: list[str] = []
    for g in _groups(str(f)):
        if any(g in outer for outer in inside):  # part of an atom found already
            continue
        try:
            with storm_quiet():
                (prop,) = stormpy.parse_properties(f"P=? [F {g}]", model.program)
        except (RuntimeError, ValueError):
            continue
        sub = prop.get_raw_formula().subformula.subformula
        if isinstance(sub, sl.AtomicExpressionFormula) and str(sub) == g:
            out[g] = model.compile(sub.get_expression())
            inside.append(g)
    return out


_COMPARISON = {"GEQ": ">=", "GREATER": ">", "LEQ": "<=", "LESS": "<"}
_OPERATORS = ((sl.ProbabilityOperatorFormula, "P"), (sl.RewardOperatorFormula, "R"),
              (sl.LongRunAverageOperatorFormula, "LRA"), (sl.TimeOperatorFormula, "T"))


def _lower_step_bound(f: Any) -> bool:
    """Whether a bounded until has a lower step bound above 0 (``U[2, 5]``, ``U>=2``); stormpy hides it."""
    if not f.has_lower_bound:
        return False
    text = str(f)
    m = re.search(r"U\[([^,\]]+),", text) or re.search(r"U>=?\s*([^\s\[(]+)", text)
    return m is None or m.group(1).strip() != "0"


def _propositional(f: Any) -> bool:
    if isinstance(f, sl.UnaryBooleanStateFormula):
        return _propositional(f.subformula)
    return isinstance(f, (sl.AtomicExpressionFormula, sl.AtomicLabelFormula, sl.BooleanLiteralFormula))


def _solution(f: Any) -> str:
    """``sound``, ``steps`` or ``other``: see :class:`PropertySpec`'s ``solution``."""
    sub = f.subformula
    if isinstance(f, sl.LongRunAverageOperatorFormula) or isinstance(sub, sl.LongRunAverageRewardFormula):
        return "other"
    if isinstance(sub, (sl.CumulativeRewardFormula, sl.InstantaneousRewardFormula)):
        return "steps"
    text = str(sub)
    if not isinstance(sub, _EXPOSED):  # X, total rewards, LTL
        if text.strip() == "C":
            return "sound"  # total reward: Storm reduces it to a reachability reward, solved the same way
        nexts = re.fullmatch(r"(?:X\s*)+(.*)", text)
        operand = "" if nexts is None else nexts.group(1)
        if operand and not re.search(r"\b(F|G|U|W|X|P|R|LRA|T)\b|\[", operand):  # X ... X over a state formula
            return "steps"
        return "other"
    if not all(_propositional(c) for c in _children(sub)):
        return "other"
    if isinstance(sub, sl.BoundedUntilFormula):
        return "steps"
    return "sound"


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
    work = inner if "G" in _names(model) else _bounded_globally(inner)  # a variable G: as Storm reads it
    original = _parse(work, model)
    operator = next((op for cls, op in _OPERATORS if isinstance(original, cls)), None)
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
            raise PropertyError(f"property '{text}' bounds a path by reward structure '{r}', which the model lacks "
                                f"(have: {have})")
    spec.terminal = _terminal(original, model)
    # The formula for checking: PRISM labels expanded, so propositional parts are single atomic expressions.
    expanded = _LABEL_REF.sub(
        lambda m: f"({model.labels[m.group(1)].text})" if m.group(1) in model.labels else m.group(0), work
    )
    if spec.is_reward and len(model.rewards) > 1 and spec.reward_name and not original.has_reward_model_name():
        # name the structure: beside another property's, the induced model holds several and Storm needs the name
        expanded = re.sub(r"^\s*R(?=(min|max)?\s*[=<>])", f'R{{"{spec.reward_name}"}}', expanded, count=1)
    spec.formula = _parse(expanded, model)
    if _has_opaque_combination(spec.formula):
        expanded = _expand_builtin(expanded, text, model)
        spec.formula = _parse(expanded, model)
    spec.builtin_labels = {n for n in _LABEL_REF.findall(expanded) if n in _BUILTIN_LABELS}
    stack = [spec.formula]
    while stack:
        f = stack.pop()
        a = _atom(f, model)
        if a is not None:
            spec.atoms[a[0]] = a[1]
        elif not isinstance(f, _EXPOSED):
            spec.atoms.update(_opaque_atoms(f, model))
        stack.extend(_children(f))
    spec.quantitative = spec.formula.clone()
    if spec.formula.has_bound:
        comparison = _COMPARISON[str(spec.formula.comparison_type).rsplit(".", 1)[-1]]
        # threshold_expr, not threshold: stormpy's threshold reads (1 / 6) as 0 (measured)
        spec.threshold = (comparison, Fraction(str(spec.formula.threshold_expr.evaluate_as_rational())))
        spec.quantitative.remove_bound()
        if not spec.has_direction:  # PRISM's and Storm's reading on an MDP: for all schedulers
            spec.quantitative.set_optimality_type(
                sl.OptimizationDirection.MINIMIZE if comparison.startswith(">") else sl.OptimizationDirection.MAXIMIZE
            )
            spec.has_direction = True
    spec.solution = "other" if spec.bound_rewards else _solution(spec.formula)  # Storm's epoch method: no bound
    if spec.bound_rewards:
        spec.stop = spec.terminal or _stop(spec.formula, model)
    if filter_op in TRUTH_FILTERS and spec.threshold is None:
        raise PropertyError(f"property '{text}': filter({filter_op}, ...) counts or quantifies truth values: give it "
                            f"a threshold property (P>=0.5 [...]), or use min, max, avg, sum or first for a value")
    if filter_op in VALUE_FILTERS and spec.threshold is not None and filter_op != "range":
        raise PropertyError(f"property '{text}': filter({filter_op}, ...) of a threshold property: use forall, "
                            f"exists or count, or ask for the value (=?)")
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
        raise PropertyError(f"property '{text}': filter function '{args[0]}' is not supported (over the initial "
                            f"states distmc answers {supported}; --values writes every state's value)")
    if len(args) != 3 or args[2] != '"init"':
        raise PropertyError(f"property '{text}': distmc answers filters over the initial states only, "
                            f'filter({args[0]}, PROPERTY, "init") (--values writes every state\'s value)')
    return args[0], args[1]


def _has_opaque_combination(f: Any) -> bool:
    """Whether ``f`` holds a Boolean combination that stays a ``BinaryBooleanStateFormula``.

    With labels expanded, that happens only where a built-in label ("init", "deadlock") is combined with something
    else; stormpy does not expose such a formula's operands, so their atoms could not be labelled.
    """
    stack = [f]
    while stack:
        g = stack.pop()
        if isinstance(g, sl.BinaryBooleanStateFormula):
            return True
        stack.extend(_children(g))
    return False


#: At most this many initial states are spelled out for "init" inside a Boolean combination.
_MAX_INIT_DISJUNCTS = 64


def _expand_builtin(expanded: str, text: str, model: Model) -> str:
    """``expanded`` with "init" written as the disjunction of the initial states' valuations."""
    if '"deadlock"' in expanded:
        raise PropertyError(
            f"property '{text}': \"deadlock\" inside a Boolean combination is not supported (use it on its own, "
            f"e.g. F \"deadlock\")"
        )
    states = model.initial_states
    if states.shape[0] > _MAX_INIT_DISJUNCTS:
        raise PropertyError(
            f"property '{text}': \"init\" inside a Boolean combination is spelled out as the initial states, and "
            f"this model has {states.shape[0]} (at most {_MAX_INIT_DISJUNCTS}); use it on its own"
        )
    disjuncts = []
    for row in states.tolist():
        parts = [(v.name if val else f"!{v.name}") if v.is_bool else f"{v.name}={val}"
                 for v, val in zip(model.variables, row, strict=True)]
        disjuncts.append("(" + (" & ".join(parts) or "true") + ")")
    return expanded.replace('"init"', "(" + " | ".join(disjuncts) + ")")


def _terminal(f: Any, model: Model) -> list[tuple[CompiledExpr, bool]]:
    # Mirrors storm::builder::getTerminalStatesFromFormula.
    out: list[tuple[CompiledExpr, bool]] = []
    if not isinstance(f, (sl.ProbabilityOperatorFormula, sl.RewardOperatorFormula, sl.TimeOperatorFormula)):
        return out
    sub = f.subformula
    if isinstance(sub, sl.EventuallyFormula):
        a = _atom(sub.subformula, model)
        if a is not None:
            out.append((a[1], True))
    elif isinstance(sub, (sl.UntilFormula, sl.BoundedUntilFormula)) and isinstance(f, sl.ProbabilityOperatorFormula):
        # Storm uses an until formula only when its left side is atomic or the literal true (measured: with a
        # compound left side, e.g. !"a" U "b", it builds the whole reachable model).
        left_f = sub.left_subformula
        left = _atom(left_f, model)
        if left is None and not (isinstance(left_f, sl.BooleanLiteralFormula) and str(left_f) == "true"):
            return out
        right = _atom(sub.right_subformula, model)
        if right is not None and not (isinstance(sub, sl.BoundedUntilFormula) and _lower_step_bound(sub)):
            out.append((right[1], True))
        if left is not None:
            out.append((left[1], False))
    return out


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
        raise PropertyError(f"cannot read the value '{value}' of constant '{m.group(2)}' of the properties: give a "
                            f"number (3, 0.1, 1/3) or true/false")
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
    rewrite = (lambda s: s) if "G" in _names(model) else _bounded_globally
    parsed = _parse_all(";\n".join(rewrite(s) for s in statements), model)
    if len(parsed) != len(props):
        raise PropertyError(f"expected {len(props)} properties in '{text}', Storm read {len(parsed)}")
    specs = []
    for stmt, prop in zip(props, parsed, strict=True):
        if prop.contains_undefined_constants():
            names = [c.name for c in prop.get_undefined_constants()]
            raise PropertyError(f"property '{stmt}' uses a constant without a value ({', '.join(names)}): give it "
                                f"with --const {','.join(n + '=VALUE' for n in names)}, or define it in the "
                                f"properties, e.g. const double p = 0.1;")
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


def _literal(f: Any, model: Model) -> tuple[CompiledExpr, bool] | None:
    """``(expression, value)`` of an atom or a negated atom (``f`` holds where the expression equals the value)."""
    if isinstance(f, sl.UnaryBooleanStateFormula):  # Storm's only unary Boolean operator: not
        inner = _literal(f.subformula, model)
        return None if inner is None else (inner[0], not inner[1])
    a = _atom(f, model)
    return None if a is None else (a[1], True)


def _stop(f: Any, model: Model) -> list[tuple[CompiledExpr, bool]]:
    """The stop states of a reward-bounded until ``f`` with literal sides (see ``PropertySpec.stop``), else []."""
    sub = f.subformula
    if not isinstance(sub, sl.BoundedUntilFormula):
        return []
    right = _literal(sub.right_subformula, model)
    left_f = sub.left_subformula
    literal_true = isinstance(left_f, sl.BooleanLiteralFormula) and str(left_f) == "true"
    left = None if literal_true else _literal(left_f, model)
    if right is None or (left is None and not literal_true):
        return []
    return [right] + ([] if left is None else [(left[0], not left[1])])


def _check_reward_bounded(specs: list[PropertySpec]) -> None:
    """Refuse a reward-bounded path formula whose target states distmc cannot make absorbing.

    Storm's reward-bounded method (stormpy 2.0.0) crashed the process, or answered wrongly (0.929 where the exact
    value is 0.907, -2.7e41 for a probability), on chains whose target states are not absorbing. Its states are
    made absorbing by the property's terminal states (:func:`_terminal`: atomic sides) in the exploration, or in a
    copy of the model for its check where the exploration keeps them expanded (other properties of the run, or a
    negated side: :func:`_stop`; :func:`distmc.check.dispatch.check_properties`).
    """
    for s in specs:
        if s.bound_rewards and not s.stop:
            raise PropertyError(f"property '{s.text}': a reward-bounded path formula needs sides that are labels or "
                                f"expressions, or their negations (as in !\"a\" U{{\"r\"}}<=5 x=3): Storm's method "
                                f"fails otherwise")
