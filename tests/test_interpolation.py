"""Interpolations resolve value by value; what cannot be known stays Unknown and unjudged."""

from verl_pdbg_conf.core import interpolation
from verl_pdbg_conf.core.document import Document, Unknown, is_unknown


def test_resolves_what_it_can_and_keeps_the_rest_unknown(monkeypatch):
    monkeypatch.setenv("PDBG_TEST_DIR", "/data/cfg")
    monkeypatch.delenv("PDBG_TEST_UNSET", raising=False)
    doc = Document("x.yaml", {
        "shell": Unknown("${RUN}/p", "shell variable"),
        "uses_shell": "${shell}/c",
        "env": "${oc.env:PDBG_TEST_DIR}/config.json",
        "unset": "${oc.env:PDBG_TEST_UNSET}",
        "sel": "${oc.select:missing.key,fallback}",
        "list": "${oc.select:nothing,[1, 2]}",
        "plain": "no interpolation",
    })
    interpolation.resolve(doc)
    d = doc.data
    assert is_unknown(d["shell"]) and is_unknown(d["uses_shell"]) and is_unknown(d["unset"])
    assert d["env"] == "/data/cfg/config.json" and d["sel"] == "fallback" and d["list"] == [1, 2]
    assert d["plain"] == "no interpolation"


def test_no_interpolation_does_not_import_omegaconf():
    import subprocess
    import sys

    code = ("import sys; from verl_pdbg_conf.core import interpolation; from verl_pdbg_conf.core.document import Document;"
            "interpolation.resolve(Document('x', {'a': 1})); print('omegaconf' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
