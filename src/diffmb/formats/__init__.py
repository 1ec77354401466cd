"""Model files in and out: URDF (:mod:`.urdf`), MJCF import through MuJoCo's compiler
(:mod:`.mjcf_import`) and MJCF export of a diffmb model (:mod:`.mjcf`). The dynamics core
never imports them (``tests/test_import_layers.py``). Modules load on first use.
"""
