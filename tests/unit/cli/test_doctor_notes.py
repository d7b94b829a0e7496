"""The doctor's notes that name a fix: a CPU without native bf16 (precision=fp32), fastpipe's Hydra
plugins hidden from Hydra's scan (reinstall)."""
from fastpipe.cli import doctor


def quick(monkeypatch):
    """The checks these tests are not about, stubbed."""
    monkeypatch.setattr(doctor, "compile_smoke", lambda backend, device: {
        "ok": True, "backend": backend, "device": device, "seconds": 0.0, "error": None})
    monkeypatch.setattr(doctor, "config_composes", lambda: None)


def test_a_cpu_without_native_bf16_gets_a_note_naming_precision_fp32(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "cpu_bf16", lambda: {"native": False, "isa": [], "source": "torch.cpu",
                                                     "looked_for": ["AVX512-BF16", "AMX-BF16"]})
    monkeypatch.setattr(doctor.torch.cuda, "is_available", lambda: False)  # training runs on this CPU
    quick(monkeypatch)
    code = doctor.main(["--compile-backend", "eager"])
    out = capsys.readouterr().out
    assert code == 0  # a note, not a problem: fp32 trains at full speed
    assert "  CPU bf16     emulated (no AVX512-BF16 or AMX-BF16): precision=amp is slow on this CPU\n" in out
    assert ("  note         this CPU has no native bf16 (no AVX512-BF16 or AMX-BF16): precision=amp (bf16 autocast) "
            "runs emulated and much slower than fp32 here; use precision=fp32 on this machine\n") in out


def test_plugins_hidden_from_hydras_scan_get_a_note_naming_the_reinstall(capsys, monkeypatch):
    quick(monkeypatch)
    assert doctor.sweep_plugins() == ["hydra/launcher=gpus", "hydra/sweeper=halving"]  # this install: both found
    monkeypatch.setattr(doctor, "sweep_plugins", lambda: ["hydra/sweeper=halving"])
    code = doctor.main(["--compile-backend", "eager"])
    out = capsys.readouterr().out
    assert code == 0  # fastpipe itself still runs them: a note
    assert "  plugins      hydra/sweeper=halving (found by Hydra's plugin scan)\n" in out
    assert ("  note         Hydra's plugin scan does not find hydra/launcher=gpus (an editable install made with an "
            "older fastpipe?): Hydra apps other than fastpipe cannot use them; reinstall fastpipe with the README's "
            "install command\n") in out


def test_a_package_a_registered_choice_needs_is_a_note_unless_its_extra_is_required(capsys, monkeypatch):
    from fastpipe.config import registry
    from fastpipe.config.data import DefaultLoaderConfig

    needy = registry.Choice("data", "needy", DefaultLoaderConfig, "fastpipe.data.default:build_default_loader",
                            requires=registry.Requirement("no_such_module_fastpipe", "fastpipe[needy]",
                                                          "the needy library", "data=default"))
    monkeypatch.setitem(registry._CHOICES["data"], "needy", needy)  # as registering data=needy would
    quick(monkeypatch)
    note = ('data=needy needs the needy library, which is not installed: pip install "fastpipe[needy]" '
            "(or use data=default)")
    assert doctor.main(["--compile-backend", "eager"]) == 0
    assert f"  note         {note}\n" in capsys.readouterr().out
    assert doctor.main(["--compile-backend", "eager", "--require", "needy"]) == 1  # the extra's name
    assert f"  problem      {note}\n" in capsys.readouterr().out
