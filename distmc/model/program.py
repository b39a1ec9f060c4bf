"""PRISM program -> a flat, typed model description, on top of stormpy's parser.

:func:`load_model` parses the file with Storm, instantiates the constants, substitutes formulas and constants,
and compiles every guard, probability, assignment, label and reward expression into a vectorised numpy function
(:mod:`distmc.model.expr`). The result, :class:`Model`, is what the successor kernel and the rest of distmc read;
the stormpy program stays attached for property parsing and for the Storm reference builder.

Layout of a state: one int64 column per variable, global variables first, then each module's variables in
declaration order (booleans are 0/1). This is also the default feature order of a policy.

Action order: the distinct action labels in order of first appearance (modules in declaration order, commands in
file order); ``""`` stands for unlabelled commands. This is the default action order of a policy and the order
that breaks argmax ties.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import stormpy
from stormpy import expressions as sx
from stormpy.developer.storage import PrismModelType

from distmc._internal.stderr import storm_lines, storm_quiet
from distmc.errors import ModelError, UnsupportedError
from distmc.model.expr import CompiledExpr, compile_expression, reparseable

__all__ = [
    "LITERAL",
    "Command",
    "Model",
    "Module",
    "RewardStructure",
    "Update",
    "Variable",
    "load_model",
    "parse_constants",
    "split_top",
]

#: Upper bound on the number of valuations enumerated for an ``init ... endinit`` block.
MAX_INIT_ENUMERATION = 50_000_000


@dataclass(frozen=True)
class Variable:
    """A bounded state variable (booleans have bounds 0..1)."""

    name: str
    lo: int
    hi: int
    init: int
    is_bool: bool
    module: str | None  # None for a global variable


@dataclass(frozen=True)
class Update:
    """One probabilistic branch of a command: ``prob : (x'=e) & ...``."""

    prob: CompiledExpr
    assigns: tuple[tuple[int, CompiledExpr], ...]  # (column, new value)


@dataclass(frozen=True)
class Command:
    """A guarded command of a module."""

    module: int
    index: int  # position within its module
    action: str  # "" for an unlabelled command
    guard: CompiledExpr
    updates: tuple[Update, ...]
    text: str

    def where(self, modules: list[Module]) -> str:
        return f"module '{modules[self.module].name}', command {self.index + 1} ({self.text.strip()})"


@dataclass(frozen=True)
class Module:
    name: str
    commands: tuple[Command, ...]


@dataclass(frozen=True)
class RewardStructure:
    """A reward structure: state rewards and action (transition) rewards."""

    name: str
    state_items: tuple[tuple[CompiledExpr, CompiledExpr], ...]  # (guard, value)
    action_items: tuple[tuple[str, CompiledExpr, CompiledExpr], ...]  # (action, guard, value)

    def state_rewards(self, states: np.ndarray) -> np.ndarray:
        """State reward ``[B]`` of states ``[B, V]`` (the sum over the items whose guard holds)."""
        out = np.zeros(states.shape[0])
        for guard, value in self.state_items:
            out += np.where(guard(states), value(states), 0.0)
        return out

    def choice_rewards(
        self, states: np.ndarray, c_state: np.ndarray, c_action: np.ndarray, action_id: dict[str, int]
    ) -> np.ndarray:
        """Action reward ``[C]`` of choices given by their state index into ``states`` and their action id.

        Args:
            states: ``[B, V]`` source states.
            c_state: ``[C]`` index into ``states`` of each choice.
            c_action: ``[C]`` action id of each choice (as the kernel numbers actions).
            action_id: action label -> id (items of actions the model lacks add nothing).
        """
        out = np.zeros(c_state.shape[0])
        for action, guard, value in self.action_items:
            if action not in action_id:
                continue
            sel = np.flatnonzero(c_action == action_id[action])
            if sel.size:
                sub = states[c_state[sel]]
                out[sel] += np.where(guard(sub), value(sub), 0.0)
        return out


@dataclass
class Model:
    """A PRISM model ready for the successor kernel.

    Attributes:
        path: the source file.
        model_type: ``"dtmc"`` or ``"mdp"``.
        variables: the state layout, one column each.
        modules: modules with their compiled commands.
        actions: action labels in the documented order (``""`` for unlabelled).
        sync: action label -> indices of the modules that synchronise on it.
        labels: PRISM label name -> compiled expression.
        rewards: reward structures in declaration order.
        initial_states: int64 ``[I, V]``.
        program: the instantiated stormpy program (for properties and the Storm reference).
    """

    path: Path
    model_type: str
    variables: list[Variable]
    modules: list[Module]
    actions: list[str]
    sync: dict[str, list[int]]
    labels: dict[str, CompiledExpr]
    rewards: list[RewardStructure]
    initial_states: np.ndarray
    program: Any
    constants: dict[str, str] = field(default_factory=dict)

    @property
    def columns(self) -> dict[str, tuple[int, bool]]:
        return {v.name: (i, v.is_bool) for i, v in enumerate(self.variables)}

    @property
    def lo(self) -> np.ndarray:
        return np.array([v.lo for v in self.variables], dtype=np.int64)

    @property
    def hi(self) -> np.ndarray:
        return np.array([v.hi for v in self.variables], dtype=np.int64)

    def compile(self, e: sx.Expression) -> CompiledExpr:
        """Compile any stormpy expression over this model's variables."""
        return compile_expression(e, self.columns)

    def describe_state(self, state: np.ndarray) -> str:
        """``(x=1, y=true, ...)`` for error messages."""
        parts = []
        for v, val in zip(self.variables, state.tolist(), strict=True):
            parts.append(f"{v.name}={'true' if val else 'false'}" if v.is_bool else f"{v.name}={val}")
        return "(" + ", ".join(parts) + ")"

    def reward(self, name: str | None) -> RewardStructure:
        if not self.rewards:
            raise ModelError(f"{self.path}: the model has no reward structure")
        if name is None:
            return self.rewards[0]
        for r in self.rewards:
            if r.name == name:
                return r
        raise ModelError(f"{self.path}: no reward structure named '{name}' (have: {[r.name for r in self.rewards]})")


_CONST_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([^,]+)\s*")


def parse_constants(spec: str | None) -> dict[str, str]:
    """Parse ``"N=3,p=0.1"`` into ``{"N": "3", "p": "0.1"}``."""
    if not spec:
        return {}
    out: dict[str, str] = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        m = _CONST_RE.fullmatch(part)
        if not m:
            raise ModelError(f"cannot read constant definition '{part}': expected NAME=VALUE, as in --const N=3,p=0.1")
        out[m.group(1)] = m.group(2).strip()
    return out


_PARSE_ERR = re.compile(r"(?:WrongFormatException: )?(.*?)(?:\s*\(.*\))?$", re.S)


def _parse(path: Path) -> Any:
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    try:
        with storm_quiet():
            return stormpy.parse_prism_program(str(path), prism_compatibility=True)
    except RuntimeError as exc:
        raise ModelError(f"{path}{_storm_message(str(exc))}") from None


def _storm_message(text: str) -> str:
    """Storm's multi-line parse error as one line: ``:LINE:COL: syntax error: expecting ... (at 'text')``."""
    lines = storm_lines(text)
    if not lines:
        return ": cannot parse"
    m = re.search(r"Parsing error at (\d+):(\d+):\s*(.*?)(,\s*here:)?$", lines[0])
    if m is None:
        return ": " + " ".join(lines)
    near = f" (at '{lines[1]}')" if len(lines) > 1 and lines[1] != "^" else ""
    return f":{m.group(1)}:{m.group(2)}: syntax error: {m.group(3)}{near}"


#: What ``--const`` accepts as a value: true, false, or arithmetic over number literals (Storm's expression parser
#: crashes the process on an unknown identifier).
LITERAL = re.compile(r"true|false|[-+*/()\s0-9.eE]*[0-9][-+*/()\s0-9.eE]*")


def _instantiate(prog: Any, path: Path, constants: dict[str, str]) -> Any:
    known = {c.name: c for c in prog.constants}
    for name in constants:
        if name not in known:
            open_ = [c.name for c in prog.constants if not c.defined]
            raise ModelError(
                f"{path}: --const names '{name}', which neither the model nor the properties declare; "
                + (
                    f"its undefined constants are {', '.join(open_)}"
                    if open_
                    else "it has no undefined constants to give"
                )
            )
    defs = {}
    manager = prog.expression_manager
    parser = sx.ExpressionParser(manager)
    parser.set_identifier_mapping({})
    for name, text in constants.items():
        c = known[name]
        if c.defined:
            raise ModelError(
                f"{path}: constant '{name}' is already defined in the model and cannot be set with --const"
            )
        # Storm's expression parser crashes the process on an unknown identifier: only literals get to it.
        if not LITERAL.fullmatch(text.strip()):
            raise ModelError(
                f"{path}: cannot read the value '{text}' of constant '{name}': give a number "
                f"(3, 0.1, 1/3, 1e-3) or true/false"
            )
        try:
            with storm_quiet():
                value = parser.parse_from_string(text, True)
        except RuntimeError:
            raise ModelError(f"{path}: cannot read the value '{text}' of constant '{name}'") from None
        if c.expression_variable.has_integer_type() and not value.has_integer_type():
            raise ModelError(f"{path}: constant '{name}' is an int; '{text}' is not")
        if c.expression_variable.has_boolean_type() and not value.has_boolean_type():
            raise ModelError(f"{path}: constant '{name}' is a bool; '{text}' is not")
        defs[c.expression_variable] = value
    if defs:
        prog = prog.define_undefined_constants(defs)
    missing = [c.name for c in prog.constants if not c.defined]
    if missing:
        raise ModelError(
            f"{path}: undefined constant(s) {', '.join(missing)}; give them with --const "
            + ",".join(f"{m}=VALUE" for m in missing)
        )
    return prog.substitute_constants().substitute_formulas().substitute_constants()


def _int(e: Any, what: str, path: Path) -> int:
    try:
        return int(e.evaluate_as_int())
    except RuntimeError:
        raise ModelError(f"{path}: {what} '{e}' is not a constant integer") from None


_REWARDS_RE = re.compile(r'^rewards(?:[ \t]+"([^"]*)")?\s*(.*?)^endrewards', re.S | re.M)


def split_top(text: str, sep: str) -> list[str]:
    """Split at ``sep`` outside parentheses/brackets (Storm prints every compound expression parenthesised)."""
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _rewards(prog: Any, columns: dict[str, tuple[int, bool]], path: Path) -> list[RewardStructure]:
    # stormpy 2.0 binds only the name of a PRISM reward model, so the items are read back from Storm's own
    # printout of the instantiated program (one item per line, every expression fully parenthesised) and each
    # expression is re-parsed by Storm's expression parser.
    if not prog.reward_models:
        return []
    parser = sx.ExpressionParser(prog.expression_manager)
    mapping = {}
    for v in itertools.chain(prog.global_integer_variables, prog.global_boolean_variables):
        mapping[v.name] = v.expression_variable.get_expression()
    for m in prog.modules:
        for v in itertools.chain(m.integer_variables, m.boolean_variables):
            mapping[v.name] = v.expression_variable.get_expression()
    parser.set_identifier_mapping(mapping)
    out = []
    blocks = _REWARDS_RE.findall(str(prog))
    if len(blocks) != len(prog.reward_models):
        raise ModelError(f"{path}: could not read the reward structures back from Storm")
    for name, body in blocks:
        state_items, action_items = [], []
        for item in body.split(";"):
            item = item.strip()
            if not item:
                continue
            action = None
            if item.startswith("["):
                end = item.index("]")
                action, item = item[1:end].strip(), item[end + 1 :]
            guard_txt, value_txt = split_top(item, ":")[0], ":".join(split_top(item, ":")[1:])
            guard = compile_expression(parser.parse_from_string(reparseable(guard_txt.strip()), True), columns)
            value = compile_expression(parser.parse_from_string(reparseable(value_txt.strip()), True), columns)
            if action is None:
                state_items.append((guard, value))
            else:
                action_items.append((action, guard, value))
        out.append(RewardStructure(name, tuple(state_items), tuple(action_items)))
    return out


def _initial_states(
    prog: Any, variables: list[Variable], columns: dict[str, tuple[int, bool]], path: Path
) -> np.ndarray:
    if not prog.has_initial_states_expression:
        return np.array([[v.init for v in variables]], dtype=np.int64)
    init = compile_expression(prog.initial_states_expression, columns)
    sizes = [v.hi - v.lo + 1 for v in variables]
    total = int(np.prod(sizes, dtype=object))
    if total > MAX_INIT_ENUMERATION:
        raise UnsupportedError(
            f"{path}: the init ... endinit block ranges over {total} valuations, more than distmc enumerates "
            f"({MAX_INIT_ENUMERATION}); narrow the variable bounds"
        )
    found = []
    chunk = 1 << 20
    lo = np.array([v.lo for v in variables], dtype=np.int64)
    radix = np.array(sizes, dtype=np.int64)
    for start in range(0, total, chunk):
        idx = np.arange(start, min(total, start + chunk), dtype=np.int64)
        states = np.empty((idx.size, len(variables)), dtype=np.int64)
        rest = idx
        for c in range(len(variables) - 1, -1, -1):  # loop over variables, not states
            states[:, c] = rest % radix[c] + lo[c]
            rest = rest // radix[c]
        found.append(states[init(states)])
    result = np.concatenate(found) if found else np.zeros((0, len(variables)), dtype=np.int64)
    if result.shape[0] == 0:
        raise ModelError(f"{path}: the init ... endinit block admits no state")
    return result


def load_model(path: str | Path, constants: dict[str, str] | str | None = None) -> Model:
    """Parse and compile a PRISM file.

    Args:
        path: the ``.prism``/``.pm``/``.nm`` file.
        constants: values for undefined constants, as a dict or as ``"N=3,p=0.1"``.

    Raises:
        ModelError: on a syntax error, an undefined constant or a malformed declaration.
        UnsupportedError: for model types other than dtmc and mdp.

    Example:
        >>> m = load_model("examples/gridworld.prism", "N=4")  # doctest: +SKIP
        >>> m.actions
        ['up', 'down', 'left', 'right']
    """
    path = Path(path)
    if isinstance(constants, str) or constants is None:
        constants = parse_constants(constants)
    prog = _parse(path)
    mt = prog.model_type
    types = {PrismModelType.DTMC: "dtmc", PrismModelType.MDP: "mdp"}
    if mt not in types:
        raise UnsupportedError(
            f"{path}: model type {str(mt).split('.')[-1].lower()} is not supported; distmc handles dtmc and mdp"
        )
    if re.search(r"^system\s", str(prog), re.M):
        raise UnsupportedError(
            f"{path}: custom system composition (system ... endsystem) is not supported; use the default "
            "parallel composition of all modules"
        )
    prog = _instantiate(prog, path, dict(constants))

    variables: list[Variable] = []
    init_block = bool(prog.has_initial_states_expression)

    def add_vars(int_vars: Any, bool_vars: Any, module: str | None) -> None:
        # Storm keeps int and bool variables apart; the file's order within each kind is kept.
        for v in int_vars:
            lo = _int(v.lower_bound_expression, f"lower bound of '{v.name}'", path)
            hi = _int(v.upper_bound_expression, f"upper bound of '{v.name}'", path)
            if hi < lo:
                raise ModelError(f"{path}: variable '{v.name}' has an empty range [{lo}..{hi}]")
            init = lo
            # With an init ... endinit block Storm leaves the variables' own initial values unset (touching them
            # crashes the process); the block decides the initial states.
            if not init_block and v.initial_value_expression is not None and str(v.initial_value_expression) != "":
                try:
                    init = _int(v.initial_value_expression, f"initial value of '{v.name}'", path)
                except ModelError:
                    init = lo
            variables.append(Variable(v.name, lo, hi, init, False, module))
        for v in bool_vars:
            init = 0
            if not init_block and v.initial_value_expression is not None and str(v.initial_value_expression) != "":
                try:
                    init = int(bool(v.initial_value_expression.evaluate_as_bool()))
                except RuntimeError:
                    init = 0
            variables.append(Variable(v.name, 0, 1, init, True, module))

    add_vars(prog.global_integer_variables, prog.global_boolean_variables, None)
    for m in prog.modules:
        add_vars(m.integer_variables, m.boolean_variables, m.name)
    columns = {v.name: (i, v.is_bool) for i, v in enumerate(variables)}
    for v in variables:
        if not v.lo <= v.init <= v.hi:
            raise ModelError(f"{path}: initial value {v.init} of '{v.name}' is outside its range [{v.lo}..{v.hi}]")

    modules: list[Module] = []
    actions: list[str] = []
    sync: dict[str, list[int]] = {}
    for mi, m in enumerate(prog.modules):
        cmds = []
        for ci, c in enumerate(m.commands):
            action = c.action_name if c.is_labeled else ""
            if action not in actions:
                actions.append(action)
            if action and mi not in sync.setdefault(action, []):
                sync[action].append(mi)
            updates = []
            for u in c.updates:
                if str(u).startswith("["):  # "[lo, hi] : ...": Storm keeps only lo as the update's probability
                    raise UnsupportedError(
                        f"{path}: module '{m.name}', command {ci + 1} ({c}): interval probabilities ([lo, hi], "
                        "an interval DTMC/MDP) are not supported; distmc checks models with exact probabilities"
                    )
                assigns = []
                for a in u.assignments:
                    name = a.variable.name
                    if name not in columns:
                        raise ModelError(f"{path}: module '{m.name}' assigns unknown variable '{name}'")
                    assigns.append((columns[name][0], compile_expression(a.expression, columns)))
                updates.append(Update(compile_expression(u.probability_expression, columns), tuple(assigns)))
            cmds.append(
                Command(mi, ci, action, compile_expression(c.guard_expression, columns), tuple(updates), str(c))
            )
        modules.append(Module(m.name, tuple(cmds)))
    labels = {lab.name: compile_expression(lab.expression, columns) for lab in prog.labels}
    rewards = _rewards(prog, columns, path)
    init_states = _initial_states(prog, variables, columns, path)
    return Model(
        path=path,
        model_type=types[mt],
        variables=variables,
        modules=modules,
        actions=actions,
        sync=sync,
        labels=labels,
        rewards=rewards,
        initial_states=init_states,
        program=prog,
        constants=dict(constants),
    )
