"""The "callback approach" baseline: Storm's explicit builder asks a Python callback which actions to keep.

This is how the field verifies trained RL policies today (COOL-MC, ``storm_model_checker.py`` /
``model_checker.py``), and what distmc is compared against:

1. Storm's own explicit-state builder (``stormpy.developer.make_explicit_model_builder`` with a
   ``StateValuationFunctionMask``; older stormpy called it ``make_sparse_model_builder`` /
   ``StateValuationFunctionActionMaskDouble``) explores the PRISM MDP with the property-driven builder options
   (``stormpy.BuilderOptions(properties)``, plus choice labels and state valuations) and, for every state it
   expands and every action there, calls a Python function ``f(state valuation, action index) -> keep?``.
2. The callback turns the valuation into the network input (all state variables as float32, in distmc's state
   layout order, booleans 0/1), runs the torch network on that *single* state -- once per state: the output is
   cached per valuation, because Storm calls the mask for every action of a state and, on crazy_climber, 6 to 9
   times per (state, action) (once per command with that label) -- and keeps the action if it is the argmax over the enabled actions (``deterministic``) or has pi(a|s) > 0
   (``stochastic``). As in COOL-MC, the enabled actions of a state come from Storm's PRISM simulator
   (``reset_to_state`` + ``get_choices``), asked only in deterministic mode and once per state.
3. Stochastic policies: Storm's builder only keeps or drops choices, so the result is still an MDP. As COOL-MC's
   ``modify_model`` does, a Python loop over the states weights each kept choice by pi(a|s) (renormalised over
   the kept, i.e. enabled, actions), merges them into one DTMC row, and a ``SparseDtmc`` is built with
   ``SparseMatrixBuilder.add_next_value`` and the MDP's state labelling. That loop is part of what is measured.
4. The property is checked with ``stormpy.model_checking`` on the DTMC, with distmc's own solver settings
   (``distmc.check.checker.environment``: sound value iteration at 1e-12), so that the two approaches are
   compared on building the model and their values agree to 1e-9.

Where this deliberately differs from COOL-MC (so that both tools verify the *same* policy-induced DTMC):

* deterministic mode takes the argmax over the enabled actions (COOL-MC takes the global argmax and, if that
  action is not enabled, the alphabetically first enabled action);
* the cache key is the tuple of variable values read with ``get_integer_value``/``get_boolean_value``; COOL-MC's
  ``model_checker.py`` (LAVA-LAB/COOL-MC) parses ``valuation.to_json()``, restarts the simulator and queries the
  agent on *every* call, so this baseline is the faster, cached variant of the same approach;
* pi(a|s) in the weighting loop comes from the callback's cache instead of running the network again.

The network (:func:`make_network`) is a 2x64 MLP with softmax output, seeded; output ``i`` is the ``i``-th action
label in alphabetical order (COOL-MC's convention). :func:`save_network` writes it as TorchScript plus distmc's
JSON interface file, so ``distmc.api.verify`` runs on the same network (``--compare``).

Usage (from the repository root)::

    python benchmarks/callback_baseline.py --model avoid --const xMax=4,yMax=4,slickness=0.1 \\
        --prop 'P=? [F<=100 COLLISION=true]' --mode stochastic --compare
    python benchmarks/callback_baseline.py --model crazy_climber --compare

Numerics: a float32 network does not give bit-identical outputs for one state (the callback) and for the same
state inside a batch (distmc): in our measurements about half of the states differ in the last float32 bit of some
pi(a|s) (up to 6e-8), because the matrix kernels sum in a different order for a batch. The two DTMCs therefore
differ by that much, and so do the values (1e-10 on avoid 4x4, 5e-10 on avoid 2x2 with seed 3 and F<=10): within
the 1e-9 check, but not bit-exact. ``--float64`` evaluates the same weights in double precision, which removes
the effect (values then agree to ~1e-15) and checks that both tools build the same DTMC.

Reusable pieces for other benchmark scripts: :func:`make_network`, :func:`policy_interface`,
:func:`network_for`, :func:`save_network`, :func:`run_callback`, :func:`run_distmc`, :data:`CASES`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import stormpy
import stormpy.developer as sd
import torch
from stormpy.developer import storage as sst
from torch import nn

from distmc.check.checker import environment

REPO = Path(__file__).resolve().parents[1]
#: Default folder of the COOL-MC reference models (read-only, outside the repository).
DEFAULT_MODEL_DIR = REPO.parent / "shared" / "models" / "coolmc"
MODES = ("stochastic", "deterministic")
#: Largest allowed difference between the callback baseline's value and distmc's.
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Case:
    """A benchmark case: PRISM file (relative to the model folder), constants and property."""

    file: str
    constants: str
    prop: str


#: The named benchmark cases (``--model NAME``).
CASES: dict[str, Case] = {
    "avoid": Case("avoid.prism", "xMax=4,yMax=4,slickness=0.1", "P=? [ F<=100 COLLISION=true ]"),
    "crazy_climber": Case("crazy_climber.prism", "", "P=? [ F COLLISION=true ]"),
}


# -- the network ---------------------------------------------------------------------------------------------


class Float64Net(nn.Module):
    """Evaluates a network in double precision: float32 input (as distmc feeds it) cast to float64."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net.double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.double())


def make_network(
    n_inputs: int, n_actions: int, hidden: int = 64, seed: int = 0, dtype: torch.dtype = torch.float32
) -> nn.Module:
    """A 2x``hidden`` MLP with softmax output (``torch.manual_seed(seed)`` before creating the layers).

    Args:
        n_inputs: number of state variables V.
        n_actions: number of action labels A.
        hidden: width of the two hidden layers.
        seed: seed of torch's global generator for the weight initialisation.
        dtype: ``torch.float32`` (default, as trained policies are), or ``torch.float64``: the same weights
            (created in float32, then widened exactly) evaluated in double precision, see :class:`Float64Net`.
    """
    torch.manual_seed(seed)
    net: nn.Module = nn.Sequential(
        nn.Linear(n_inputs, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, n_actions),
        nn.Softmax(dim=-1),
    )
    if dtype == torch.float64:
        net = Float64Net(net)
    elif dtype != torch.float32:
        raise ValueError(f"dtype must be torch.float32 or torch.float64, not {dtype}")
    net.eval()
    return net


def policy_interface(model_path: str | Path, constants: str | None) -> tuple[list[str], list[str]]:
    """Input features (distmc's state layout order) and output actions (alphabetical) of a model's network.

    The features come from ``distmc.model.program.load_model(...).variables`` -- global variables first, then
    each module's variables, ints before bools within a module, as Storm lists them -- so that the baseline and
    distmc feed the network the same vector.
    """
    from distmc.model.program import load_model

    model = load_model(model_path, constants or None)
    return [v.name for v in model.variables], sorted(model.actions)


def network_for(
    model_path: str | Path, constants: str | None, hidden: int = 64, seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[nn.Module, list[str], list[str]]:
    """The seeded network for a model, with its features and actions (see :func:`policy_interface`)."""
    features, actions = policy_interface(model_path, constants)
    return make_network(len(features), len(actions), hidden, seed, dtype), features, actions


def save_network(net: nn.Module, features: list[str], actions: list[str], directory: str | Path) -> tuple[Path, Path]:
    """Write ``net`` as TorchScript (``policy.pt``) and distmc's interface file (``policy.json``) into ``directory``.

    Returns:
        The paths of the TorchScript file and of the interface file.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    policy, interface = d / "policy.pt", d / "policy.json"
    torch.jit.script(net).save(str(policy))
    interface.write_text(json.dumps({"features": features, "actions": actions, "output": "probabilities"}, indent=2))
    return policy, interface


# -- the callback approach -------------------------------------------------------------------------------------


def _program(model_path: str | Path, constants: str | None) -> Any:
    prog = stormpy.parse_prism_program(str(model_path), prism_compatibility=True)
    if constants:
        prog, _ = stormpy.instantiate_constants(prog, constants)
    return prog


def _variables(prog: Any, features: list[str]) -> list[tuple[Any, bool]]:
    """Storm expression variable and is-boolean flag of each feature, in feature order."""
    by_name: dict[str, tuple[Any, bool]] = {}
    for v in prog.global_integer_variables:
        by_name[v.name] = (v.expression_variable, False)
    for v in prog.global_boolean_variables:
        by_name[v.name] = (v.expression_variable, True)
    for m in prog.modules:
        for v in m.integer_variables:
            by_name[v.name] = (v.expression_variable, False)
        for v in m.boolean_variables:
            by_name[v.name] = (v.expression_variable, True)
    missing = [f for f in features if f not in by_name]
    if missing:
        raise ValueError(f"features {missing} are not variables of the program (have {sorted(by_name)})")
    return [by_name[f] for f in features]


class PolicyMask:
    """The callback Storm's builder calls per (state, action): keep the action under the policy?

    The network runs once per state (cache keyed by the tuple of variable values, which is also the input).
    The cache holds the weights used later to fuse the kept choices: pi(a|s) (stochastic) or the one-hot argmax
    over the enabled actions (deterministic).
    """

    def __init__(self, prog: Any, net: nn.Module, features: list[str], actions: list[str], mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.net, self.mode, self.actions = net, mode, actions
        self.variables = _variables(prog, features)
        column = {a: i for i, a in enumerate(actions)}
        # Storm action index -> output column (index 0 is the silent action, which has no column).
        n_indices = 1 + max((c.action_index for m in prog.modules for c in m.commands if c.is_labeled), default=0)
        self.column = [column.get(prog.get_action_name(i), -1) if i > 0 else -1 for i in range(n_indices)]
        self.simulator = (
            sd.DiscreteTimePrismProgramSimulator[float](prog, sd.BuilderOptions()) if mode == "deterministic" else None
        )
        self.cache: dict[tuple[Any, ...], list[float]] = {}
        self.calls = 0

    def weights(self, valuation: Any) -> list[float]:
        """The cached (or newly computed) per-action weights of the state with this valuation."""
        key = tuple(valuation.get_boolean_value(v) if b else valuation.get_integer_value(v) for v, b in self.variables)
        w = self.cache.get(key)
        if w is None:
            with torch.inference_mode():
                pi = self.net(torch.tensor([key], dtype=torch.float32))[0].tolist()
            if self.mode == "deterministic":
                assert self.simulator is not None
                self.simulator.reset_to_state(valuation)
                enabled = {self.column[c.get_action_index()] for c in self.simulator.get_choices()}
                best = max((j for j in range(len(pi)) if j in enabled), key=lambda j: (pi[j], -j))
                w = [1.0 if j == best else 0.0 for j in range(len(pi))]
            else:
                w = pi
            self.cache[key] = w
        return w

    def __call__(self, valuation: Any, action_index: int) -> bool:
        self.calls += 1
        col = self.column[action_index] if action_index < len(self.column) else -1
        if col < 0:
            raise ValueError(f"action index {action_index} is not one of the network's actions {self.actions}")
        return self.weights(valuation)[col] > 0.0


def _fuse(mdp: Any, mask: PolicyMask) -> Any:
    """The policy-induced DTMC of the masked MDP: each state's kept choices weighted by pi and merged (Python loop)."""
    n = mdp.nr_states
    matrix = mdp.transition_matrix
    groups = mdp.nondeterministic_choice_indices
    choice_labels = mdp.choice_labeling
    valuations = mdp.state_valuations
    columns = [valuations.get_values_states(v) for v, _ in mask.variables]
    keys = list(zip(*columns, strict=True))
    column_of = {a: i for i, a in enumerate(mask.actions)}
    builder = sst.SparseMatrixBuilder(rows=n, columns=n, entries=0, force_dimensions=True)
    for s in range(n):
        start, end = groups[s], groups[s + 1]
        labels = [choice_labels.get_labels_of_choice(c) for c in range(start, end)]
        if end - start == 1 and not labels[0]:
            # Self-loop Storm added to a terminal (property-driven) or deadlock state: no policy choice.
            for e in matrix.get_row(start):
                builder.add_next_value(s, e.column, e.value)
            continue
        pi = mask.cache[keys[s]]
        w = [pi[column_of[next(iter(lab))]] for lab in labels]
        if len({next(iter(lab)) for lab in labels}) != len(labels):
            raise NotImplementedError(f"state {keys[s]} keeps several choices with the same action label {labels}")
        total = sum(w)
        row: dict[int, float] = {}
        for c, wc in zip(range(start, end), w, strict=True):
            for e in matrix.get_row(c):
                row[e.column] = row.get(e.column, 0.0) + wc / total * e.value
        for t in sorted(row):
            builder.add_next_value(s, t, row[t])
    components = sst.SparseModelComponents(transition_matrix=builder.build(), state_labeling=mdp.labeling)
    return sst.SparseDtmc(components)


def run_callback(
    model_path: str | Path,
    constants: str | None,
    prop: str,
    net: nn.Module,
    mode: str = "stochastic",
    features: list[str] | None = None,
    actions: list[str] | None = None,
) -> dict[str, Any]:
    """Verify ``net`` on a PRISM MDP the callback way (see the module docstring).

    Args:
        model_path: PRISM file (an MDP).
        constants: undefined constants, ``"N=3,p=0.1"`` (empty or None: none).
        prop: a ``P=? [...]`` property.
        net: the torch network (state variables as float32 in, one probability per action out).
        mode: ``stochastic`` or ``deterministic``.
        features: input variables in order (default: :func:`policy_interface`).
        actions: output action labels in order (default: alphabetical).

    Returns:
        ``states``, ``transitions`` (of the induced DTMC), ``result`` (value at the initial state), ``seconds``
        (wall time, parsing to result), and ``timings`` (``parse_s``, ``build_s``, ``fuse_s``, ``check_s``),
        ``mdp_states``, ``mdp_transitions`` (Storm's masked MDP), ``callback_calls``, ``network_calls``.
    """
    if features is None or actions is None:
        f, a = policy_interface(model_path, constants)
        features, actions = features or f, actions or a
    t0 = time.perf_counter()
    prog = _program(model_path, constants)
    if prog.number_of_unlabeled_commands > 0:
        raise ValueError(f"{model_path}: unlabelled commands are not controlled by the policy; label them first")
    props = stormpy.parse_properties(prop, prog)
    formula = props[0].get_raw_formula()
    if not formula.is_probability_operator_formula:
        raise ValueError(f"only P=? [...] properties are supported by the baseline, not '{prop}'")
    options = stormpy.BuilderOptions(props)
    options.set_build_choice_labels()
    options.set_build_state_valuations()
    mask = PolicyMask(prog, net, features, actions, mode)
    t1 = time.perf_counter()
    builder = sd.make_explicit_model_builder[float](
        sd.SymbolicModelDescription(prog), options, sd.StateValuationFunctionMask[float](mask)
    )
    mdp = builder.build()
    t2 = time.perf_counter()
    dtmc = _fuse(mdp, mask)
    t3 = time.perf_counter()
    result = stormpy.model_checking(dtmc, formula, only_initial_states=True, environment=environment())
    initial = list(dtmc.initial_states)
    if len(initial) != 1:
        raise ValueError(f"expected one initial state, the model has {len(initial)}")
    value = float(result.get_value(initial[0]))
    t4 = time.perf_counter()
    return {
        "states": dtmc.nr_states,
        "transitions": dtmc.nr_transitions,
        "result": value,
        "seconds": t4 - t0,
        "timings": {"parse_s": t1 - t0, "build_s": t2 - t1, "fuse_s": t3 - t2, "check_s": t4 - t3},
        "mdp_states": mdp.nr_states,
        "mdp_transitions": mdp.nr_transitions,
        "callback_calls": mask.calls,
        "network_calls": len(mask.cache),
    }


# -- distmc on the same network ------------------------------------------------------------------------------


def run_distmc(
    model_path: str | Path,
    constants: str | None,
    prop: str,
    policy: str | Path,
    interface: str | Path,
    mode: str = "stochastic",
    checker: str = "auto",
) -> dict[str, Any]:
    """``distmc.api.verify`` on a saved network; same keys as :func:`run_callback` (``timings`` are distmc's).

    ``kernel`` records ``$DISTMC_KERNEL`` (``numpy`` selects distmc's numpy kernel instead of the numba one, whose
    first call includes the JIT compilation).
    """
    from distmc.api import verify

    t0 = time.perf_counter()
    report = verify(
        model_path,
        prop,
        constants=constants or None,
        policy=str(policy),
        interface=interface,
        mode=mode,
        checker=checker,
    )
    seconds = time.perf_counter() - t0
    assert not isinstance(report, tuple)
    return {
        "states": report.states,
        "transitions": report.transitions,
        "result": report.result,
        "seconds": seconds,
        "timings": dict(report.timings),
        "kernel": os.environ.get("DISTMC_KERNEL", "default"),
        "checker": report.checker,
    }


# -- command line ------------------------------------------------------------------------------------------------


def _timings(t: dict[str, float]) -> str:
    return ", ".join(f"{k[:-2]} {v:.3f} s" for k, v in t.items())


def main(argv: list[str] | None = None) -> int:
    """Command line: run the callback baseline (and, with ``--compare``, distmc on the same network)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model", required=True, help=f"one of {sorted(CASES)}, or a PRISM file")
    ap.add_argument(
        "--model-dir", default=str(DEFAULT_MODEL_DIR), help="folder of the named models (default: %(default)s)"
    )
    ap.add_argument("--const", default=None, help="constants, e.g. xMax=4,yMax=4,slickness=0.1 (default: the case's)")
    ap.add_argument("--prop", default=None, help="property (default: the case's)")
    ap.add_argument("--mode", choices=MODES, default="stochastic")
    ap.add_argument("--seed", type=int, default=0, help="seed of the network (default: %(default)s)")
    ap.add_argument("--hidden", type=int, default=64, help="hidden layer width (default: %(default)s)")
    ap.add_argument(
        "--float64",
        action="store_true",
        help="evaluate the (same) network in double precision, so that batched and single-state inference "
        "agree to ~1e-16 (see the module docstring)",
    )
    ap.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads, for both tools (default: %(default)s)"
    )
    ap.add_argument("--compare", action="store_true", help="also run distmc on the same network and compare")
    ap.add_argument(
        "--checker",
        default="auto",
        choices=["auto", "storm", "native"],
        help="distmc's checker with --compare (the callback approach always checks with Storm)",
    )
    ap.add_argument("--save", default=None, help="folder to keep the TorchScript network and interface file in")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    if args.model in CASES:
        case = CASES[args.model]
        model_path = Path(args.model_dir) / case.file
        constants = case.constants if args.const is None else args.const
        prop = case.prop if args.prop is None else args.prop
    else:
        model_path = Path(args.model)
        constants = args.const or ""
        if args.prop is None:
            ap.error("--prop is required with a model file")
        prop = args.prop

    dtype = torch.float64 if args.float64 else torch.float32
    net, features, actions = network_for(model_path, constants, args.hidden, args.seed, dtype)
    print(f"model {model_path} [{constants}]  {prop}  mode {args.mode}")
    print(
        f"network {len(features)}-{args.hidden}-{args.hidden}-{len(actions)} softmax ({str(dtype)[6:]}), seed {args.seed}; "
        f"actions {actions}; torch threads {args.threads}"
    )
    cb = run_callback(model_path, constants, prop, net, args.mode, features, actions)
    print(
        f"callback: {cb['states']} states, {cb['transitions']} transitions, value {cb['result']!r}, "
        f"time {cb['seconds']:.3f} s ({_timings(cb['timings'])}); "
        f"{cb['callback_calls']} callback calls, {cb['network_calls']} network calls"
    )

    if args.save is None and not args.compare:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        policy, interface = save_network(net, features, actions, args.save or tmp)
        if args.save:
            print(f"saved {policy} and {interface}")
        if not args.compare:
            return 0
        dm = run_distmc(model_path, constants, prop, policy, interface, args.mode, args.checker)
    print(
        f"distmc:   {dm['states']} states, {dm['transitions']} transitions, value {dm['result']!r}, "
        f"time {dm['seconds']:.3f} s ({_timings(dm['timings'])}); DISTMC_KERNEL={dm['kernel']}, checker {dm['checker']}"
    )
    diff = abs(float(dm["result"]) - cb["result"]) if isinstance(dm["result"], float) else float("inf")
    print(f"speed ratio callback/distmc: {cb['seconds'] / dm['seconds']:.2f}x; |value difference| {diff:.3g}")
    if diff > TOLERANCE:
        raise AssertionError(
            f"values differ by {diff:.3g} > {TOLERANCE}: callback {cb['result']!r}, distmc {dm['result']!r}"
        )
    if dm["states"] != cb["states"]:
        raise AssertionError(f"state counts differ: callback {cb['states']}, distmc {dm['states']}")
    if dm["transitions"] != cb["transitions"]:
        print(f"note: transition counts differ: callback {cb['transitions']}, distmc {dm['transitions']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
