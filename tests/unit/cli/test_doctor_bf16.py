"""The doctor on a CPU without native bf16: a row and a note that name the fix (precision=fp32)."""
from fastpipe.cli import doctor


def test_a_cpu_without_native_bf16_gets_a_note_naming_precision_fp32(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "cpu_bf16", lambda: {"native": False, "isa": [], "source": "torch.cpu",
                                                     "looked_for": ["AVX512-BF16", "AMX-BF16"]})
    monkeypatch.setattr(doctor.torch.cuda, "is_available", lambda: False)  # training runs on this CPU
    monkeypatch.setattr(doctor, "compile_smoke", lambda backend, device: {  # the other checks: not this test's
        "ok": True, "backend": backend, "device": device, "seconds": 0.0, "error": None})
    monkeypatch.setattr(doctor, "config_composes", lambda: None)
    code = doctor.main(["--compile-backend", "eager"])
    out = capsys.readouterr().out
    assert code == 0  # a note, not a problem: fp32 trains at full speed
    assert "  CPU bf16     emulated (no AVX512-BF16 or AMX-BF16): precision=amp is slow on this CPU\n" in out
    assert ("  note         this CPU has no native bf16 (no AVX512-BF16 or AMX-BF16): precision=amp (bf16 autocast) "
            "runs emulated and much slower than fp32 here; use precision=fp32 on this machine\n") in out
