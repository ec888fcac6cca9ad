"""The LT-OPD grid's Table 4 cells: GLM-4.6V and the LLaVA-OneVision stand-in are scheduled; LLaVA-OV-1.5 is
reported missing with its reason; every scheduled model has its ``conf/model`` file."""

from __future__ import annotations

from sparsectx import workflow as wf


def test_table_4_schedules_glm_and_the_llava_stand_in_and_footnotes_llava_1_5() -> None:
    grid = wf.load_grid("ltopd_qwen3_5_4b")
    cells = set(grid.cells())
    for model in ("glm46v_9b", "llava_onevision_qwen2_7b"):
        assert wf.Cell(model, "base", "cdpruner", 0.05, "textvqa") in cells
        assert wf.Cell(model, "lt_opd", "cdpruner", 0.05, "textvqa") in cells
        assert wf.TrainRun(model, "lt_opd", "cdpruner", 0.05) in grid.train_runs
    missing = [m for m in wf.missing_cells(grid) if m.cell.model == "llava_onevision_1_5_4b"]
    assert missing and {m.block for m in missing} == {"model_families"}
    assert all(m.reason.startswith("model llava_onevision_1_5_4b: LLaVA-OneVision-1.5 has no class") for m in missing)
    assert not [c for c in cells if c.model == "llava_onevision_1_5_4b"]
    assert grid.unknown_conf_names() == []
