"""hardware.yaml and models.yaml: load, validate, merge the user's own entries.

Every figure must carry a source (the entry's `source`, or `sources.<field>`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solvers.paths import data_file, user_config_dir
from solvers.yamlload import LineDict, YamlError, read_yaml

_NUMBER = (int, float)
# collection -> field -> (type, required)
SCHEMA: dict[str, dict[str, tuple[type | tuple[type, ...], bool]]] = {
    "gpus": {
        "name": (str, True), "vendor": (str, True),
        "bf16_dense_tflops": (_NUMBER, True), "fp8_dense_tflops": (_NUMBER, False),
        "fp4_dense_tflops": (_NUMBER, False), "hbm_gb": (_NUMBER, True), "hbm_mib": (int, False),
        "hbm_tb_s": (_NUMBER, True),
        "nvlink_gb_s": (_NUMBER, False), "nvlink_domain": (int, False), "tdp_w": (_NUMBER, False), "sms": (int, False),
        "mesh_links": (int, False),  # a scale-up domain of direct links with no switch: the links a GPU has
        "fabric": (str, False),  # the scale-up fabric's name, where it is not NVLink
        # Per-SM figures for the kernel questions (units in the names; see hardware.yaml's header).
        "tensor_clock_ghz": (_NUMBER, False), "bf16_flop_per_clk_sm": (int, False), "fp8_flop_per_clk_sm": (int, False),
        "fp32_fma_per_clk_sm": (int, False), "mufu_per_clk_sm": (int, False), "regfile_kib_sm": (int, False),
        "smem_kib_sm": (int, False), "smem_block_kib": (int, False), "smem_bytes_per_clk_sm": (int, False),
        "tmem_kib_sm": (int, False),
    },
    "nics": {"name": (str, True), "gbit_s": (_NUMBER, True)},
    "models": {
        "name": (str, True), "params_b": (_NUMBER, True), "active_params_b": (_NUMBER, False),
        "layers": (int, True), "hidden": (int, True), "heads": (int, True), "kv_heads": (int, False),
        "head_dim": (int, True), "ffn": (int, True), "vocab": (int, True), "experts": (int, False),
        "experts_per_token": (int, False), "attention": (str, True), "kv_lora_rank": (int, False),
        "qk_rope_head_dim": (int, False), "q_lora_rank": (int, False),
        # MoE: each routed expert's FFN width, shared experts and leading dense layers (absent: none), and
        # group-limited routing (experts in expert_groups groups, each token's picks within groups_per_token).
        "expert_ffn": (int, False), "shared_experts": (int, False), "dense_layers": (int, False),
        "expert_groups": (int, False), "groups_per_token": (int, False),
        # Local/global models: the window in tokens, how many layers use it, the longest context served.
        "sliding_window": (int, False), "sliding_window_layers": (int, False), "max_context": (int, False),
        # Hybrids (Mamba-2 layers beside a few attention layers): the layers of each kind, and each Mamba-2 layer's
        # heads × head dim × state size, B/C groups and conv width; the KV cache lives in the attention layers alone.
        "attention_layers": (int, False), "mamba_layers": (int, False), "ssm_heads": (int, False),
        "ssm_head_dim": (int, False), "ssm_state": (int, False), "ssm_groups": (int, False),
        "conv_kernel": (int, False),
    },
}
FILES = {"hardware.yaml": ("gpus", "nics"), "models.yaml": ("models",)}


class MissingField(AttributeError):
    """A solver asked an entry for a field it does not have (a user's model without a sliding window)."""


class Record(dict):
    """One data entry; fields readable as attributes (gpu.hbm_gb)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise MissingField(f"{self.get('name', 'this entry')} has no {name}") from None


def hbm_bytes(gpu: Mapping[str, Any]) -> float:
    """A GPU's HBM in bytes as the device reports it (hbm_mib), which is what an engine budgets its
    usable share of; an entry that gives only its datasheet label is taken at 10^9 B a GB."""
    return gpu["hbm_mib"] * 2**20 if gpu.get("hbm_mib") is not None else gpu["hbm_gb"] * 1e9


@dataclass
class Catalog:
    collections: dict[str, dict[str, Record]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def get(self, collection: str, key: str) -> Record:
        return self.collections[collection][key]


MAX_FIGURE = 1e8  # above any real figure here (TFLOP/s, GB, parameters in billions, tokens of context)
# What each attention kind needs to size its KV cache (a solver would otherwise fail on the entry).
ATTENTION_NEEDS = {"gqa": ("kv_heads",), "mla": ("kv_lora_rank", "qk_rope_head_dim")}
# What the MoE helper reads of an expert model; a model without dense layers or shared experts says 0.
MOE_NEEDS = ("experts_per_token", "active_params_b", "expert_ffn", "dense_layers", "shared_experts")
ZERO_ALLOWED = frozenset({"dense_layers", "shared_experts"})  # counts where none is a real config value


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a number with over 30 digits"
    return text if len(text) <= 40 else text[:37] + "..."


def _figure_problem(value: Any, kind: type | tuple[type, ...], zero_allowed: bool = False) -> str | None:
    if isinstance(value, bool) or not isinstance(value, kind):
        return f"expected {_type_name(kind)}, got {_shown(value)}"
    if isinstance(value, str) and any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        return "contains control characters (an escape sequence would drive the terminal)"
    if isinstance(value, _NUMBER):
        try:
            finite = math.isfinite(float(value))
        except OverflowError:
            finite = False
        if not finite or value > MAX_FIGURE:
            return f"{_shown(value)} is not a figure a real part has (at most {MAX_FIGURE:.0e})"
        if value < 0 or (value == 0 and not zero_allowed):
            return "must be positive" if not zero_allowed else "must not be negative"
    return None


def _check_entry(where: str, collection: str, key: str, entry: dict) -> list[str]:
    line_of = entry.line_of if isinstance(entry, LineDict) else (lambda name: None)

    def at(name: str) -> str:
        line = line_of(name)
        return f"{where}:{line}: {collection}.{key}.{name}" if line else f"{where}: {collection}.{key}.{name}"

    problems = []
    schema = SCHEMA[collection]
    sources = entry.get("sources") or {}
    if not isinstance(sources, dict):
        problems.append(f"{at('sources')}: expected a mapping of field -> source")
        sources = {}
    for name, (kind, required) in schema.items():
        if name not in entry:
            if required:
                problems.append(f"{at(name)}: missing")
            continue
        value = entry[name]
        if (problem := _figure_problem(value, kind, name in ZERO_ALLOWED)) is not None:
            problems.append(f"{at(name)}: {problem}")
        elif isinstance(value, _NUMBER) and not (entry.get("source") or sources.get(name)):
            problems.append(f"{at(name)}: figure has no source")
    for name in entry:
        if name not in schema and name not in ("source", "sources"):
            problems.append(f"{at(str(name))}: unknown field")
    if collection == "models" and not problems:
        attention = entry.get("attention")
        if attention not in ATTENTION_NEEDS:
            problems.append(f"{at('attention')}: '{attention}' is not an attention kind the solvers know "
                            f"({', '.join(ATTENTION_NEEDS)})")
        else:
            problems += [f"{at(name)}: missing ({attention} attention needs it)"
                         for name in ATTENTION_NEEDS[attention] if name not in entry]
        if ("sliding_window" in entry) != ("sliding_window_layers" in entry):
            problems.append(f"{at('sliding_window')}: give sliding_window and sliding_window_layers together")
        if "experts" in entry:
            problems += [f"{at(name)}: missing (a MoE model needs it)"
                         for name in MOE_NEEDS if name not in entry]
        if ("expert_groups" in entry) != ("groups_per_token" in entry):
            problems.append(f"{at('expert_groups')}: give expert_groups and groups_per_token together")
        problems += [f"{at(part)}: {entry[part]} is more than {whole} ({entry[whole]}): the model cannot be built"
                     for part, whole in _PARTS if part in entry and whole in entry and entry[part] > entry[whole]]
    return problems


# (a count, the count it is a part of): a model with more KV heads than heads, more experts per
# token than experts or more windowed layers than layers would solve to numbers of no model.
_PARTS = (("kv_heads", "heads"), ("experts_per_token", "experts"), ("sliding_window_layers", "layers"),
          ("dense_layers", "layers"), ("groups_per_token", "expert_groups"), ("attention_layers", "layers"),
          ("mamba_layers", "layers"))
MAX_PROBLEMS = 20  # lines named per user file; a file with more is named once for the rest


def _type_name(kind: type | tuple[type, ...]) -> str:
    return "a number" if kind == _NUMBER else "an integer" if kind is int else "text"


def _load_file(path: Path, collections: tuple[str, ...], into: Catalog) -> None:
    problems: list[str] = []
    _read_file(path, collections, into, problems)
    if len(problems) > MAX_PROBLEMS:  # a file of thousands of bad entries: its lines on every command help no one
        problems[MAX_PROBLEMS:] = [f"{path}: {len(problems) - MAX_PROBLEMS:,} more problems not shown "
                                   "(the rest of the file's entries did load)"]
    into.problems.extend(problems)


def _read_file(path: Path, collections: tuple[str, ...], into: Catalog, problems: list[str]) -> None:
    try:
        document = read_yaml(path) or {}
    except YamlError as error:
        problems.append(f"{path}:{error.line}: {error.what}")
        return
    except OSError as error:
        problems.append(f"{path}: cannot read: {error.strerror or error}")
        return
    if not isinstance(document, dict):
        problems.append(f"{path}:{getattr(document, 'line', 1) or 1}: expected a mapping at the top level")
        return

    def line(mapping: Any, key: Any) -> int:
        return mapping.line_of(key) if isinstance(mapping, LineDict) else 1

    for name in document:
        if name not in collections:
            problems.append(f"{path}:{line(document, name)}: {name}: unknown section "
                            f"(expected {', '.join(collections)})")
    for collection in collections:
        entries = document.get(collection) or {}
        if not isinstance(entries, dict):
            problems.append(f"{path}:{line(document, collection)}: {collection}: expected a mapping of id -> entry")
            continue
        for key, entry in entries.items():
            if not isinstance(entry, dict):
                problems.append(f"{path}:{line(entries, key)}: {collection}.{key}: expected a mapping")
                continue
            found = _check_entry(str(path), collection, str(key), entry)
            if found:
                problems.extend(found)
                continue
            into.collections.setdefault(collection, {})[str(key)] = Record(entry)


def load_catalog(user_dir: Path | None = None) -> Catalog:
    """The shipped data, then the user's files (which may add or replace entries)."""
    catalog = Catalog({name: {} for name in SCHEMA})
    for filename, collections in FILES.items():
        _load_file(data_file(filename), collections, catalog)
    user_dir = user_config_dir() if user_dir is None else user_dir
    for filename, collections in FILES.items():
        path = user_dir / filename
        try:
            path.stat()
        except FileNotFoundError:  # none there (or a dangling link): the shipped data alone
            continue
        except OSError:
            pass  # a link loop: reading it says so
        _load_file(path, collections, catalog)  # a directory or a FIFO is named, not skipped
    return catalog
