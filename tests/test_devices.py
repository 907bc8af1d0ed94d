import platform

from accel import devices


def test_a_cpus_class_is_its_fastest_matrix_instructions_else_its_architecture(monkeypatch):
    avx2 = {"sse2", "avx", "avx2", "fma"}
    epyc_zen4 = avx2 | {"avx512f", "avx512_bf16"}
    for flags, named in (
        (epyc_zen4 | {"amx_tile", "amx_bf16"}, "AMX"),
        (epyc_zen4, "AVX512-BF16"),
        (avx2 | {"avx512f"}, "AVX-512"),
        (avx2, "AVX2"),
        ({"sse2"}, platform.machine()),
        (None, platform.machine()),  # flags unreadable (not Linux)
    ):
        monkeypatch.setattr(devices, "cpu_flags", lambda flags=flags: flags)
        assert devices.cpu_class() == named
    assert devices.environment()["cpu_class"] == platform.machine()  # every run's env.json names it
