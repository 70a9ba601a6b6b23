"""distlab.recompute: the policies, resolved once from their names, and what the models ask them
(every model below agrees with what a policy says it keeps and runs again)."""

from __future__ import annotations

import pytest

from distlab.evidence.plan.published import RECOMPUTE as PUBLISHED
from distlab.evidence.plan.runs import PER_OP_NOTE
from distlab.plan.activations import activation_options, layer_kept_tensors
from distlab.plan.layout import RECOMPUTE_LABELS, Layout, hardware
from distlab.plan.step import stage_flops, step_time
from distlab.recompute import (
    FULL,
    NONE,
    OP,
    PUBLISHED_RECOMPUTE,
    RECOMPUTE,
    RECOMPUTES,
    SELECTIVE,
    Again,
    Keeps,
    Recompute,
    TpAgain,
    from_published,
    recompute_policy,
)
from distlab.tensor_parallel.memory import RECOMPUTE as PAPER
from distlab.transformer import PRESETS

LLAMA = PRESETS["llama3-8b"]


def test_names_labels_and_the_vocabularies_built_from_them() -> None:
    assert RECOMPUTE == ("none", "selective", "op", "full")
    assert [RECOMPUTES[n] for n in RECOMPUTE] == [NONE, SELECTIVE, OP, FULL]
    assert RECOMPUTE_LABELS == {"selective": "sel", "op": "op-ac", "full": "full-ac"}
    assert PUBLISHED_RECOMPUTE == PUBLISHED == ("none", "selective", "full")
    assert PAPER == ("none", "selective", "full")
    assert PER_OP_NOTE == "selective per op"


def test_a_name_resolves_once_into_its_policy() -> None:
    assert all(recompute_policy(n) is RECOMPUTES[n] for n in RECOMPUTE)
    assert recompute_policy(OP) is OP
    with pytest.raises(ValueError, match="recompute must be one of 'none', 'selective', 'op', "
                                         "'full', got 'some'"):
        recompute_policy("some")
    with pytest.raises(TypeError, match="recompute must be a Recompute"):
        recompute_policy(3)
    # a layout stores the name a user writes, and takes the policy too
    assert Layout(recompute=FULL).recompute == "full"
    assert Layout(recompute="op").recompute_policy is OP
    with pytest.raises(ValueError, match="recompute must be one of"):
        Layout(recompute="sometimes")


def test_what_each_policy_keeps_and_repeats() -> None:
    table = {rc.name: (rc.keeps, rc.again, rc.tp_again, rc.runs_as) for rc in RECOMPUTES.values()}
    assert table == {
        "none": (Keeps.EVERYTHING, Again.NOTHING, TpAgain.NONE, "none"),
        "selective": (Keeps.NO_QUADRATIC, Again.ATTENTION, TpAgain.NONE, "none"),
        "op": (Keeps.PER_OP, Again.UNSAVED_PRODUCTS, TpAgain.WITHOUT_SP, "op"),
        "full": (Keeps.INPUT, Again.LAYER, TpAgain.ALL, "full")}
    assert [rc.name for rc in RECOMPUTES.values() if rc.checkpointed] == ["op", "full"]
    assert [rc.name for rc in RECOMPUTES.values() if rc.repeats_attention] == ["selective",
                                                                             "full"]
    assert [(rc.name, sp) for rc in RECOMPUTES.values() for sp in (False, True)
            if rc.repeats_tp_forward(sp)] == [("op", False), ("full", False), ("full", True)]
    picks = {rc.name: rc.forward_again_flops(layer=3.0, attention=2.0, unsaved_products=1.0)
             for rc in RECOMPUTES.values()}
    assert picks == {"none": 0.0, "selective": 2.0, "op": 1.0, "full": 3.0}


def test_published_runs_state_the_per_op_policy_as_selective_with_a_note() -> None:
    assert from_published("selective", PER_OP_NOTE) is OP
    assert from_published("selective", "selective per layer") is SELECTIVE
    assert from_published("selective") is SELECTIVE
    assert from_published("full", "every layer") is FULL
    assert from_published("none") is NONE
    with pytest.raises(ValueError, match="recompute must be one of 'none', 'selective', 'full'"):
        from_published("op")


@pytest.mark.parametrize("name", RECOMPUTE)
def test_the_models_do_what_the_policy_says(name: str) -> None:
    """The step adds the forward work the policy runs again; the memory keeps what it keeps."""
    rc = RECOMPUTES[name]
    hw = hardware("h100", 8)
    lay = Layout(tp=8, sequence_parallel=True, global_batch=1, recompute=name)
    base = stage_flops(LLAMA, lay.with_(recompute="none"), 4, last=False)
    fl = stage_flops(LLAMA, lay, 4, last=False)
    assert (fl.recompute > 0) == rc.recomputes
    if rc.again is Again.LAYER:
        assert fl.recompute == pytest.approx(base.forward, rel=1e-12)
    opt = activation_options(lay, "flash", False, None, 1, False, False)
    kept = layer_kept_tensors(LLAMA, lay, opt)
    whole = layer_kept_tensors(LLAMA, lay.with_(recompute="none"), opt)
    if rc.keeps_input_only:
        assert kept == (LLAMA.seq_len * LLAMA.hidden * 2 // 8,)   # the sequence-sharded input
    elif rc.keeps is Keeps.EVERYTHING or rc.keeps is Keeps.NO_QUADRATIC:
        assert kept == whole    # flash attention keeps no s^2 tensor for selective to drop
    else:
        assert sum(kept) < sum(whole)
    # backward runs the layer's forward tensor-parallel collectives again only where the policy
    # repeats them (with sequence parallelism: full recompute alone)
    tp = step_time(LLAMA, lay, hw).tp_s
    plain = step_time(LLAMA, lay.with_(recompute="none"), hw).tp_s
    assert (tp > plain * (1 + 1e-9)) == rc.repeats_tp_forward(True)


def test_a_policy_is_a_typed_value() -> None:
    assert isinstance(FULL, Recompute) and FULL.label == "full-ac" and NONE.label == ""
    assert "torchtitan" in OP.source and "Korthikanti" in SELECTIVE.source
