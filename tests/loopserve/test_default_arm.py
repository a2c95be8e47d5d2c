"""One product default arm everywhere: the core's SchedulerConfig, LLM(...),
make_engine_config, ServeOptions and ``loopserve serve --arm``."""

from __future__ import annotations

import argparse
import inspect

from engine.core.config import DEFAULT_ARM, EngineConfig, SchedulerConfig
from engine.core.shapes import TINY
from engine.llm import LLM, make_engine_config
from loopserve.commands import serve
from loopserve.server.launch import ServeOptions


def test_every_entry_point_defaults_to_the_one_arm() -> None:
    assert DEFAULT_ARM == "mixed"
    defaults = {
        "SchedulerConfig": SchedulerConfig().arm,
        "EngineConfig": EngineConfig(model=TINY).scheduler.arm,
        "LLM": inspect.signature(LLM.__init__).parameters["arm"].default,
        "make_engine_config": inspect.signature(make_engine_config).parameters["arm"].default,
        "ServeOptions": ServeOptions(model="tiny").arm,
    }
    parser = argparse.ArgumentParser()
    serve.add_parser(parser.add_subparsers())
    defaults["serve --arm"] = parser.parse_args(["serve", "--model", "tiny"]).arm
    assert defaults == dict.fromkeys(defaults, DEFAULT_ARM)
