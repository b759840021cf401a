"""Every reader of logged numbers and config files applies one rule (issue 24, findings 2, 6, 8, 12, 14).

A numeric field is a JSON number, finite, in its stated range (``parasim.calibration.calls.FIELD_RANGES``, checked by
``parasim.config.jsonl.number_field``), and its error names the file, the line and the field; duplicate keys, deep
nesting, huge integers and other encodings are refused by every JSONL reader and every config file loader; a
validate-sim log must agree with itself and with its pool.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from parasim.calibration.calls import read_calls
from parasim.config.fields import ConfigError, load_file
from parasim.config.jsonl import JSONInputError, iter_json_objects
from parasim.validation.logs import LogError, read_logs

CALL = {"task_id": "t0", "benchmark": "AIME25", "domain": "math", "tool": "standard_reasoner",
        "model": "Qwen3-30B-A3B-Instruct-2507", "status": "OK", "correct": True, "tokens_in": 100, "tokens_out": 200,
        "latency_s": 1.5, "episode": 0, "call_index": 0, "round": 0}


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _calls(tmp_path: Path, *overrides: dict) -> Path:
    lines = [json.dumps({**CALL, "call_index": i, **o}) for i, o in enumerate(overrides)]
    return _write(tmp_path / "calls.jsonl", lines)


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("difficulty", 1e20, "difficulty: expected a finite number in [-10, 10], got 1e+20"),  # finding 2
    ("latency_s", 1e300, "latency_s: expected a finite number in [0, 86400], got 1e+300"),  # finding 8
    ("episode", 1e300, "episode: expected an integer in [0, 9007199254740991], got 1e+300"),  # finding 12
    ("episode", 10**30, "episode: expected an integer in [0, 9007199254740991]"),
    ("round", 2**63, "round: expected an integer in [-1, 9007199254740991]"),
    ("tokens_out", 10**250, "tokens_out: expected a finite number in [0, 1000000000], got 1000000"),
], ids=["difficulty", "latency", "episode-float", "episode-int", "round", "tokens"])
def test_call_log_numbers_are_finite_and_in_range(tmp_path, field, value, needle):
    path = _calls(tmp_path, {}, {field: value})
    with pytest.raises(ValueError) as err:
        read_calls(path)
    assert str(err.value).startswith(f"{path}:2.{field}: ")
    assert needle in str(err.value)


@pytest.mark.parametrize(("text", "needle"), [
    ('{"a": 1, "a": 2}', "a: duplicate key 'a'"),  # finding 8
    ("[" * 100_000 + "]" * 100_000, "nesting deeper than 32 levels"),  # finding 12
    ('{"a": ' + "7" * 5000 + "}", "a: integer 77777777777777777777... has 5000 digits"),  # finding 14
    ('{"a": NaN}', "NaN is not allowed"),
])
def test_jsonl_lines_are_read_strictly(tmp_path, text, needle):
    path = _write(tmp_path / "x.jsonl", ['{"ok": 1}', text])
    with pytest.raises(JSONInputError) as err:
        list(iter_json_objects(path))
    assert str(err.value).startswith(f"{path}:2: ") and needle in str(err.value)


def test_jsonl_decode_error_names_file_and_line(tmp_path):
    """Finding 14: a byte that is not UTF-8 names the file and the line (calibrate printed neither)."""
    path = tmp_path / "calls.jsonl"
    path.write_bytes(json.dumps(CALL).encode() + b"\n" + b'{"task_id": "\xff"}\n')
    with pytest.raises(JSONInputError, match=rf"^{path}:2: not UTF-8 \(byte 0xff at column 14"):
        read_calls(path)


def test_finite_in_takes_huge_integers_without_overflow():
    from parasim.config.jsonl import finite_in

    assert not finite_in(10**400) and not finite_in(-(10**400), -1e308, 0)
    assert finite_in(2**63, 0, 2**64) and not finite_in(2**63, 0, 2**53)
    assert not finite_in(0.0, 0.0, 1.0, lo_open=True) and finite_in(1, 0, 1)


@pytest.mark.parametrize(("suffix", "text", "needle"), [
    (".json", '{"seed": 1, "seed": 2}', "seed: duplicate key 'seed'"),
    (".yaml", "seed: 1\nseed: 2\n", "line 2: duplicate key 'seed'"),
    (".yaml", "a:\n" + "".join("  " * i + "- \n" for i in range(1, 5000)), "nesting deeper than 32 levels"),
    (".yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n", "nesting deeper than 32 levels"),
    (".json", '{"a": ' + "[" * 5000 + "]" * 5000 + "}", "nesting deeper than 32 levels"),
])
def test_config_files_refuse_duplicate_keys_and_deep_nesting(tmp_path, suffix, text, needle):
    """Findings 8 and 12: YAML / JSON configs as strict as pool files (the last duplicate won; a RecursionError)."""
    path = tmp_path / f"cfg{suffix}"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_file(path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_utf16_config_file_names_the_file(tmp_path):
    """Finding 14: ``train --config`` of a UTF-16 file names the file and the encoding (was a bare decode error)."""
    path = tmp_path / "cfg.yaml"
    path.write_text("seed: 1\n", encoding="utf-16")
    with pytest.raises(ConfigError, match=rf"^{path}: encoded as UTF-16 LE .*a YAML file must be UTF-8"):
        load_file(path)


# ------------------------------------------------------------------------------ validate-sim's logs (finding 6)
MODELS = ["Qwen3-30B-A3B-Instruct-2507", "GPT-OSS-20B"]


def _pair(tmp_path: Path, calls: list[dict], rounds: list[dict], **episode) -> Path:
    _write(tmp_path / "calls.jsonl", [json.dumps({**CALL, **c}) for c in calls])
    ep = {"episode": 0, "task_id": "t0", "benchmark": "AIME25", "domain": "math", "options": 0, "correct": True,
          "models": MODELS, "rounds": rounds, **episode}
    _write(tmp_path / "calls.episodes.jsonl", [json.dumps(ep)])
    return tmp_path


def _action(*slots: tuple[int, int, int]) -> list[int]:
    return [0, *(x for s in slots for x in s)]


def test_a_consistent_log_reads(tmp_path):
    logs = read_logs(_pair(tmp_path, [{"call_index": 0, "slot": 0}, {"call_index": 1, "slot": 1}],
                           [{"calls": [0, 1], "action": _action((0, 0, 0), (0, 1, 0))}]))
    assert len(logs.episodes) == 1 and len(logs.episodes[0].rounds[0].calls) == 2


@pytest.mark.parametrize(("calls", "rounds", "extra", "needle"), [
    ([{"call_index": 0}], [{"calls": [0, 0, 0]}], {}, "rounds[0].calls[1]: call 0 is listed twice"),
    ([{"call_index": i} for i in range(3)], [{"calls": [0, 1, 2], "action": _action((0, 0, 0), (0, 1, 0))}], {},
     "rounds[0].calls: 3 calls in a round whose action has 2 slots"),
    ([{"call_index": 0, "slot": 5}], [{"calls": [0], "action": _action((0, 0, 0))}], {},
     "calls.jsonl:1.slot: slot 5 of a round whose action has 1 slots"),
    ([{"call_index": 0, "slot": 0}, {"call_index": 1, "slot": 0}],
     [{"calls": [0, 1], "action": _action((0, 0, 0), (0, 1, 0))}], {}, "calls.jsonl:2.slot: slot 0 is taken"),
    ([{"call_index": 0, "slot": 99}], [{"calls": [0]}], {},
     "calls.jsonl:1.slot: expected an integer in [0, 15], got 99"),
    ([{"call_index": 0, "benchmark": "GPQA", "domain": "science"}], [{"calls": [0]}], {},
     "calls.jsonl:1.benchmark: call 0 of episode 0 is logged with benchmark 'GPQA'"),
    ([{"call_index": 0}], [{"calls": [0], "action": [0, 0, 2**70, 0]}], {},
     "rounds[0].action: expected 1 + 3k integers of the env's int64 action"),
    ([{"call_index": 0}], [{"calls": []}] * 5000, {},
     "episodes.jsonl:1.rounds: 5000 rounds; an episode has at most 1000"),
    ([{"call_index": 0}], [{"calls": [0]}], {"difficulty": 1e20}, "difficulty: expected a finite number in [-10, 10]"),
])
def test_validate_sim_logs_must_agree_with_themselves(tmp_path, calls, rounds, extra, needle):
    with pytest.raises(LogError) as err:
        read_logs(_pair(tmp_path, calls, rounds, **extra))
    assert needle in str(err.value)
    assert str(tmp_path) in str(err.value)  # the file (and line) of the contradiction


def test_validate_sim_refuses_an_action_model_the_pool_lacks(tmp_path):
    from parasim.pools.pool import load_pool
    from parasim.validation.replay import model_indices

    logs = read_logs(_pair(tmp_path, [{"call_index": 0, "slot": 0}],
                           [{"calls": [0], "action": _action((0, 0, 0), (1, 2, 0))}],
                           models=[MODELS[0], "no-such-model", "nor-this"]))
    with pytest.raises(LogError, match=r"episodes.jsonl:1.models\[2\]: model 'nor-this' \(slot 1 of rounds\[0\]"):
        model_indices(logs.episodes, load_pool("paramanager"))
