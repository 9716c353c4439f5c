"""Shared test setup: no test may reach the network.

huggingface_hub reads HF_HUB_OFFLINE and HF_HOME once, when it is first imported, so they are set
here, at conftest import time, before any test module imports it: hub code paths then run for real
against an empty private cache and fail fast instead of trying the network.
"""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
# One intra-op thread, set before torch is imported: the tests' tensors are tiny, and on a machine whose cores
# are busy, a second OpenMP thread spins waiting for a core instead of helping (a tiny model's forward took ten
# times its single-threaded CPU time so). OMP_NUM_THREADS given to the run wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A pipe's width is COLUMNS when the environment has it (calc/render/output.py): the tests draw at the
# default 160 unless a test sets its own (tests/test_width.py).
os.environ.pop("COLUMNS", None)
HF_HOME = os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="gptcalc-hf-home-")


def pytest_addoption(parser) -> None:
    parser.addoption("--fuzz-long", action="store_true",
                     help="run the hostile-input fuzz tests and the random-spec property tests with 20 times as many "
                          "examples, and the per-model-type sweeps the default run samples in full (minutes, not "
                          "seconds)")
    parser.addoption("--llamacpp", metavar="BIN_DIR", default=None,
                     help="opt-in conformance suite: run this llama.cpp build's llama-completion on tiny GGUFs "
                          "(tests/test_llamacpp_conformance.py)")
    parser.addoption("--distributed", action="store_true",
                     help="opt-in: run torchtitan's tensor-parallel plan and torch's 1F1B and interleaved 1F1B "
                          "pipelining on spawned gloo ranks and check tests/data/dtensor_tp.json, pipeline_1f1b.json, "
                          "pipeline_1f1b_6.json, pipeline_interleaved.json and pipeline_interleaved_6.json "
                          "(tests/test_train_tp_dtensor.py, tests/test_train_pipeline.py, "
                          "tests/test_train_interleaved.py; a few minutes), and torch "
                          "FSDP2 on a fake two-rank group (tests/test_train_fsdp2.py)")
    parser.addoption("--llamacpp-src", metavar="TREE", default=None,
                     help="with --llamacpp: the llama.cpp source tree whose convert_hf_to_gguf.py makes the recurrent "
                          "and hybrid GGUFs (tests/test_llamacpp_conformance_recurrent.py)")
    parser.addoption("--compile-measure", action="store_true",
                     help="opt-in: compile Llama layers with inductor on the CPU and check what they save against "
                          "tests/data/compiled_saves.json (tests/test_train_compile.py; minutes)")
    parser.addoption("--heavy-towers", action="store_true",
                     help="opt-in: save whole multimodal models with their released-size towers and run `verify "
                          "--load` on them (Gemma 3n's 300M MobileNet-v5: needs timm; minutes)")
    parser.addoption("--llamacpp-record", action="store_true",
                     help="with --llamacpp: record llama.cpp's cache lines under tests/data/llamacpp/")


def pytest_configure(config) -> None:
    """`--fuzz-long` is passed on as GPTCALC_FUZZ_LONG=1, which tests/cli_checks.fuzz_examples reads
    when the fuzz modules are imported (hypothesis settings are fixed at decoration time)."""
    if config.getoption("--fuzz-long"):
        os.environ["GPTCALC_FUZZ_LONG"] = "1"


def pytest_unconfigure(config) -> None:
    """The private Hub cache goes with the run (one was left in the temp folder per run)."""
    shutil.rmtree(HF_HOME, ignore_errors=True)
