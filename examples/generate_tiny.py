"""Generate with the real engine (CPU, the ``tiny`` preset's seeded random weights) on the
mixed arm, and check that the atomic arm produces the very same tokens and exit depths.

    python examples/generate_tiny.py              # expected output: generate_tiny.out
"""

from engine.core.config import ExitConfig
from engine.core.request import SamplingParams
from engine.llm import LLM

prompts = [[(7 * i + 3 * j) % 64 for j in range(5 + 9 * i)] for i in range(4)]  # token ids
params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
# Ouro's adaptive exit: leave the loop once the gate's accumulated exit probability >= 0.5.
exits = ExitConfig(mode="ouro", exit_threshold=0.5)
options = dict(exit=exits, max_num_seqs=4, max_num_batched_tokens=64, prefill_chunk_size=16)

mixed = LLM("tiny", arm="mixed", **options).generate(prompts, params)
for out in mixed:
    print(f"prompt {out.request_id} ({len(out.prompt_token_ids):2d} tokens) -> "
          f"{out.output_token_ids}  loops {out.exit_depths}  ({out.finish_reason})")

atomic = LLM("tiny", arm="atomic", **options).generate(prompts, params)
same = [(a.output_token_ids, a.exit_depths) == (m.output_token_ids, m.exit_depths)
        for a, m in zip(atomic, mixed, strict=True)]
print("atomic arm gives the same tokens and exit depths:", all(same))
