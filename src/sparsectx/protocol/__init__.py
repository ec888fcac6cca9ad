"""Protocol cards: each study's settings beside what its paper states (``conf/protocol/<paper>.yaml``).

    python -m sparsectx.protocol experiment=scopd_qwen2_5_vl_7b            # prints the card
    python -m sparsectx.protocol experiment=scopd_qwen2_5_vl_7b out=card.md

``record`` reads a paper's record, ``leaves`` turns a composed config into settings, ``settings`` composes
every job of a study as the DAG does, ``card`` compares and renders, ``study`` puts them together (make_tables
writes ``<results>/<experiment>/tables/protocol.md``), ``runlog`` names a run's departures from the paper in
its log (train.py, evaluate.py).
"""
