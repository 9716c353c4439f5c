"""Finding models: presets and aliases, user YAML, --set, config.json files and directories, hub ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from calc.analysis.count import count
from calc.errors import GptcalcError
from calc.spec.flat import flat_view
from calc.spec.load import load_spec, parse_overrides, preset_names
from calc.spec.presets import COMPILED, PRESET_DIR, compile_presets, compiled_preset
from calc.spec.yamlfile import read_yaml

GPT2_CONFIG = {  # source: https://huggingface.co/openai-community/gpt2/blob/main/config.json (abridged)
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
    "vocab_size": 50257,
}
LLAMA2_70B_CONFIG = {  # source: https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json
    "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 8192,
    "intermediate_size": 28672, "max_position_embeddings": 4096, "model_type": "llama",
    "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False, "vocab_size": 32000,
}
QWEN2_72B_CONFIG = {  # source: https://huggingface.co/Qwen/Qwen2-72B/blob/main/config.json (abridged)
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 8192, "intermediate_size": 29568,
    "max_position_embeddings": 131072, "model_type": "qwen2", "num_attention_heads": 64,
    "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "tie_word_embeddings": False, "vocab_size": 152064,
}


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_and_cites_its_source(name: str) -> None:
    raw = read_yaml(PRESET_DIR / f"{name}.yaml")
    spec = load_spec(name)
    assert spec.name == name == raw["name"]
    assert raw["source"].startswith("https://")
    assert load_spec(name.upper()) == spec


@pytest.mark.parametrize(("alias", "name"), [("gpt2", "gpt2-small"), ("llama-70b", "llama-2-70b"),
                                             ("Qwen/Qwen2-72B", "qwen2-72b"), ("davinci", "gpt3-175b")])
def test_aliases(alias: str, name: str) -> None:
    assert load_spec(alias) == load_spec(name)


def test_unknown_model_suggests() -> None:
    with pytest.raises(GptcalcError, match=r"^unknown model 'gpt2-smal' \(did you mean gpt2-small\?\)$"):
        load_spec("gpt2-smal")


def test_overrides_recompute_derived_fields() -> None:
    spec = flat_view(load_spec("gpt2-small", parse_overrides(["n_heads=16", "qkv_bias=false"])))
    assert (spec.head_dim, spec.qkv_bias) == (48, False)


def test_overrides_of_a_config_name_its_own_keys(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA2_70B_CONFIG))
    spec = load_spec(str(tmp_path), parse_overrides(["num_key_value_heads=64"]))
    assert flat_view(spec).n_kv_heads == 64
    with pytest.raises(GptcalcError, match=r"--set n_kv_heads: unknown field \(did you mean num_key_value_heads\?\)"):
        load_spec(str(tmp_path), parse_overrides(["n_kv_heads=64"]))


def test_dotted_overrides_reach_into_a_layered_spec(tmp_path: Path) -> None:
    path = tmp_path / "layered.yaml"
    path.write_text(yaml.safe_dump(load_spec("llama-70b").model_dump()))
    spec = load_spec(str(path), parse_overrides(["blocks.block.attention.n_kv_heads=1"]))
    assert count(spec).total == count(load_spec("llama-70b", {"n_kv_heads": 1})).total


@pytest.mark.parametrize(("pair", "message"), [
    ("qkv_bias", "--set 'qkv_bias': expected key=value"),
    ("n_layer=3", "--set n_layer: unknown field (did you mean n_layers?)"),
])
def test_bad_overrides(pair: str, message: str) -> None:
    with pytest.raises(GptcalcError, match="^" + message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        load_spec("gpt2-small", parse_overrides([pair]))


def test_override_with_invalid_value_names_origin() -> None:
    with pytest.raises(GptcalcError, match=r"gpt2-small.yaml \(with --set\): d_model=770 is not divisible"):
        load_spec("gpt2-small", parse_overrides(["d_model=770"]))


def test_user_yaml(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", "vocab_size": 50257, "n_positions": 1024,
                                    "d_model": 768, "n_layers": 12, "n_heads": 12}))
    assert count(load_spec(str(path))).total == 124_439_808


@pytest.mark.parametrize(("text", "message"), [
    ("d_model: [1,\n", "line 2: invalid YAML"),
    ("- 1\n- 2\n", "expected a mapping of spec fields, got list"),
    ("vocab_size: 10\nn_positions: 4\nd_model: 8\nn_layers: 1\nn_heads: 2\nbogus: 1\n", "bogus: unknown field"),
    ("!!python/object/apply:os.system ['echo pwned']\n", "invalid YAML"),
])
def test_bad_yaml_names_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(GptcalcError) as caught:
        load_spec(str(path))
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


def test_missing_file() -> None:
    with pytest.raises(GptcalcError, match="^nope/spec.yaml: no such file$"):
        load_spec("nope/spec.yaml")


@pytest.mark.parametrize(("config", "preset"), [(GPT2_CONFIG, "gpt2-small"), (LLAMA2_70B_CONFIG, "llama-2-70b"),
                                                (QWEN2_72B_CONFIG, "qwen2-72b")])
def test_config_json_file_and_directory(tmp_path: Path, config: dict, preset: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    for source in (str(tmp_path / "config.json"), str(tmp_path)):
        spec = load_spec(source)
        assert count(spec).components == count(load_spec(preset)).components


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"model_type": "bert"}', "model_type: 'bert' is not supported (supported: "),
    ('{"model_type": ["gpt2"]}', "model_type: ['gpt2'] is not supported"),
    ('{"model_type": "llama", "hidden_size": "4096"}', "hidden_size: expected an integer, got '4096'"),
    ('{"model_type": "gpt2", "n_embd": 770, "n_head": 12, "n_layer": 1, "vocab_size": 5, "n_positions": 8}',
     "d_model=770 is not divisible by n_heads=12"),
])
def test_bad_config_json(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(GptcalcError) as caught:
        load_spec(str(path))
    assert str(caught.value).startswith(str(path)) and message in str(caught.value)


def test_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(GptcalcError, match="directory has no config.json"):
        load_spec(str(tmp_path))


def test_hub_id_offline_and_not_cached_is_a_clear_error() -> None:
    # conftest sets HF_HUB_OFFLINE=1 and an empty HF_HOME: the real huggingface_hub path runs.
    with pytest.raises(GptcalcError, match="^meta-llama/Llama-3.3-70B-Instruct: config.json is not in the local Hugging Face cache"):
        load_spec("meta-llama/Llama-3.3-70B-Instruct")


def test_hub_id_from_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cached config.json is used offline; the download goes through huggingface_hub (whose files
    are in its cache: one outside it would be refused)."""
    import huggingface_hub
    from huggingface_hub import constants

    cached = Path(constants.HF_HUB_CACHE) / "models--someone--llama-2-70b-copy"
    cached.mkdir(parents=True, exist_ok=True)
    (cached / "config.json").write_text(json.dumps(LLAMA2_70B_CONFIG))
    calls = []

    def cached_download(repo_id: str, filename: str, **options: object) -> str:
        calls.append((repo_id, filename))
        return str(cached / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", cached_download)
    spec = load_spec("someone/llama-2-70b-copy")
    assert calls == [("someone/llama-2-70b-copy", "config.json")]
    assert spec.name == "someone/llama-2-70b-copy"
    assert count(spec).total == 68_976_648_192


@pytest.mark.parametrize("model_type", ["gpt2", "llama", "mistral", "qwen2"])
def test_config_written_by_transformers(tmp_path: Path, model_type: str) -> None:
    """transformers' own config.json for each family -> our count == its model's parameter count."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    small = {"gpt2": dict(n_embd=96, n_layer=2, n_head=4, vocab_size=500, n_positions=64)}.get(
        model_type, dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                         intermediate_size=200, vocab_size=500, max_position_embeddings=64))
    config = transformers.AutoConfig.for_model(model_type, **small)
    config.save_pretrained(tmp_path)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert count(load_spec(str(tmp_path))).total == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("typo", ["mixtral-8x7b-instruct", "llama-3.1-7b", "qwen2-1.5b", "gpt2-xxl-2"])
def test_did_you_mean_never_offers_another_size_or_version(typo: str) -> None:
    """A suggestion shares every digit of the query: sizes and versions are not typos."""
    with pytest.raises(GptcalcError) as caught:
        load_spec(typo)
    message = str(caught.value)
    suggested = message.split("did you mean ", 1)[1].rstrip("?)") if "did you mean" in message else ""
    assert "".join(filter(str.isdigit, suggested)) in ("", "".join(filter(str.isdigit, typo)))


def test_compiled_presets_are_current_and_construct_what_validation_builds() -> None:
    """presets/compiled.json is every preset validated; rebuilt from it, a spec equals the
    validated one (run `python docs/regenerate.py` after editing a preset)."""
    compiled = json.loads(COMPILED.read_text(encoding="utf-8"))
    assert compiled == compile_presets(), "stale: run python docs/regenerate.py"
    for name in preset_names():
        assert compiled_preset(name) == load_spec(str(PRESET_DIR / f"{name}.yaml")), name


def test_a_preset_loads_without_pydantic() -> None:
    """The start-up path: a preset by name is rebuilt from compiled.json without importing pydantic
    (its field machinery alone costs more than a count), an adapter or the flat-spec model."""
    import subprocess
    import sys

    code = ("import sys; from calc.spec.load import load_spec; load_spec('llama-3-8b'); "
            "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'calc.arch', 'calc.spec.flat', 'calc.spec.validate'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_hub_id_that_names_a_preset_needs_no_network() -> None:
    # conftest sets HF_HUB_OFFLINE=1 with an empty cache: the preset answers for its repo id.
    assert load_spec("meta-llama/Llama-3.1-8B") == load_spec("llama-3.1-8b")
