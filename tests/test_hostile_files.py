"""Hostile files in the user's config directory or given to `validate`: each is refused with
one line naming the file (and the line where it can), quickly, and the rest still loads."""
from __future__ import annotations

import time

import pytest

from solvers.data import load_catalog
from solvers.validate import read_questions

GPU = ("gpus:\n  my-gpu:\n    name: Mine\n    vendor: x\n    bf16_dense_tflops: {tflops}\n    hbm_gb: 80\n"
       "    hbm_tb_s: 3\n    source: a test\n")
BOMB = "".join(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9 if prev else ["x"] * 9) + "]\n"
               for prev, name in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg"))
HOSTILE = {  # name -> (file bytes, what the one line says)
    "latin-1": ("gpus:\n  g:\n    name: Caf\xe9\n".encode("latin-1"), ":3: not UTF-8 text (byte 0xe9)"),
    "utf-16": ("gpus: {}\n".encode("utf-16"), "not UTF-8 text"),
    "binary": (bytes(range(256)) * 4, "not UTF-8 text"),
    "alias bomb": (BOMB.encode(), "aliases repeated too often"),
    "deep nesting": (("[" * 5000 + "]" * 5000).encode(), "nest"),
    "too large": (b"# " + b"x" * 1_100_000 + b"\n", "over 1,000 KB"),
    "syntax error": (b"gpus:\n  g: [1, 2\n", "not valid YAML"),
    "python tag": (b"gpus: !!python/object/apply:os.system [true]\n", "not valid YAML"),
    "NaN figure": (GPU.format(tflops=".nan").encode(), "bf16_dense_tflops: nan is not a figure"),
    "infinite figure": (GPU.format(tflops=".inf").encode(), "bf16_dense_tflops: inf is not a figure"),
    "5,000 digits": (GPU.format(tflops="9" * 5000).encode(), "a value cannot be read"),
    "40 digits": (GPU.format(tflops="9" * 40).encode(), "a number with over 30 digits is not a figure"),
    "10^400": (GPU.format(tflops="1.0e+400").encode(), "inf is not a figure"),
    "markup in a field": (GPU.format(tflops=1).replace("hbm_gb", "'[/x]'").encode(), "my-gpu.[/x]: unknown field"),
    "model without kv_heads": (b"models:\n  m:\n    name: M\n    params_b: 1\n    layers: 2\n    hidden: 64\n"
                               b"    heads: 2\n    head_dim: 32\n    ffn: 128\n    vocab: 100\n    attention: gqa\n"
                               b"    source: a test\n", "m.kv_heads: missing (gqa attention needs it)"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_user_data_file_is_one_named_line_and_the_shipped_data_loads(tmp_path, name):
    content, says = HOSTILE[name]
    file = tmp_path / ("models.yaml" if content.startswith(b"models:") else "hardware.yaml")
    file.write_bytes(content)
    started = time.perf_counter()
    catalog = load_catalog(user_dir=tmp_path)
    seconds = time.perf_counter() - started
    mine = [p for p in catalog.problems if str(tmp_path) in p]
    assert len(mine) >= 1 and any(says in p for p in mine), mine
    assert all("\n" not in p and p.startswith(str(file)) for p in mine)
    assert "h100-sxm" in catalog.collections["gpus"] and seconds < 2


@pytest.mark.parametrize("name", ["latin-1", "binary", "alias bomb", "deep nesting", "too large", "syntax error"])
def test_a_hostile_question_file_is_one_named_line(tmp_path, name):
    content, says = HOSTILE[name]
    (tmp_path / "bad.yaml").write_bytes(content)
    bank, problems = read_questions([tmp_path])
    assert not bank.questions and len(problems) == 1 and says in problems[0], problems
    assert problems[0].startswith(f"{tmp_path / 'bad.yaml'}:") and "\n" not in problems[0]


def test_a_user_model_a_question_cannot_use_is_refused_in_one_line(config_dir, capsys):
    from tests.test_cli import run_cli

    (config_dir / "models.yaml").write_text(
        "models:\n  mine:\n    name: Mine-8B\n    params_b: 8\n    layers: 32\n    hidden: 4096\n    heads: 32\n"
        "    kv_heads: 8\n    head_dim: 128\n    ffn: 14336\n    vocab: 128256\n    attention: gqa\n"
        "    max_context: 131072\n    source: a test\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "solve", "sliding-window-savings", "--set", "model=mine")
    assert code == 2 and err.count("\n") == 1 and "cannot use this entry: Mine-8B has no sliding_window" in err
