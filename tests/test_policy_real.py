"""The real embedded SmolLM2-135M-Instruct, 4-bit, constrained: valid actions, ratio 1."""

import pytest
import torch

from empo2_studio.config import PolicyConfig
from empo2_studio.policy import ActionRequest, Turn, load_policy
from empo2_studio.policy.prompts import first_user_message, step_user_message
from empo2_studio.types import Observation

pytestmark = pytest.mark.slow

VALID = ("focus on red light bulb", "go to kitchen", "go to workshop", "look around", "open door to kitchen")
OBS = Observation(
    text="This room is called the hallway. You see a door to the kitchen and a door to the workshop.",
    task="trap-light-bulb",
    variation=0,
    task_description="Your task is to turn on the red light bulb. First, focus on the red light bulb. Then, turn it on.",
    valid_actions=VALID,
)


def test_embedded_4bit_constrained_samples_valid_actions_with_ratio_one():
    torch.set_num_threads(2)
    policy = load_policy(PolicyConfig(quantization="4bit", decoding="constrained", device="cpu"))
    assert policy.metrics["policy/packed_fallback"] == 0.0
    turns = (Turn(first_user_message("trap", OBS, ()), None, VALID),)
    s0 = policy.sample([ActionRequest("a", turns), ActionRequest("b", turns)], temperature=1.0)
    assert all(s.text in VALID for s in s0)
    turns2 = (Turn(turns[0].user_text, s0[0].token_ids, VALID), Turn(step_user_message(OBS), None, VALID))
    s1 = policy.sample([ActionRequest("a", turns2)], temperature=1.0)[0]
    assert s1.text in VALID
    conv = [turns2[0], Turn(turns2[1].user_text, s1.token_ids, VALID)]
    with torch.no_grad():
        scored = policy.score([conv])[0]
    # bitsandbytes' CPU 4-bit kernels are not shape-invariant on every CPU: on an AVX2 EPYC the ratio
    # was 1 to 1e-4; on an AVX-512/AMX Xeon a prompt-only forward and the packed conversation's differ
    # by up to 2.4e-2 in log-prob (measured, one request or two alike). Float32, the CPU default, is
    # held to 1e-5 (tests/test_policy_scoring.py); here the ratio must stay well inside the clip (0.2).
    for s, lp in zip((s0[0], s1), scored):
        ratio = torch.exp(lp - torch.tensor(s.logprobs))
        torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=5e-2, rtol=0)
