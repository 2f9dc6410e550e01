"""A scripted NVML (``engine.doctor.nvml_probe.NvmlLibrary``) for tests: GPUs as dicts, any call
can raise. ``FakeNvml(gpus=[healthy_gpu()], fail={"power": err})``."""

from __future__ import annotations

from typing import Any

GiB = 1 << 30


class FakeNvmlError(Exception):
    """Stands in for pynvml.NVMLError."""


def healthy_gpu(**over: Any) -> dict[str, Any]:
    gpu = {
        "name": "Fake H100",
        "memory": (80 * GiB, 10 * GiB),
        "utilization": 95,
        "temperature": 60,
        "slowdown": 90,
        "shutdown": 95,
        "power": (400_000, 700_000),
        "clocks": (1980, 2619, 1980),
        "throttle": 0,
        "ecc": 0,
        "pcie": (5, 16, 5, 16),
        "nvlinks": 18,
        "processes": [],
        "capability": (9, 0),
    }
    gpu.update(over)
    return gpu


class FakeNvml:
    def __init__(
        self,
        gpus: list[dict[str, Any]] | None = None,
        *,
        fail: dict[str, BaseException] | None = None,
        driver: str = "550.54.15",
        cuda: int = 12040,
    ) -> None:
        self.gpus = gpus if gpus is not None else [healthy_gpu()]
        self.fail = fail or {}
        self.driver = driver
        self.cuda = cuda
        self.calls = 0

    def _call(self, name: str) -> None:
        self.calls += 1
        if name in self.fail:
            raise self.fail[name]

    def init(self) -> None:
        self._call("init")

    def shutdown(self) -> None:
        self._call("shutdown")

    def driver_version(self) -> str:
        self._call("driver_version")
        return self.driver

    def cuda_driver_version(self) -> int:
        self._call("cuda_driver_version")
        return self.cuda

    def device_count(self) -> int:
        self._call("device_count")
        return len(self.gpus)

    def name(self, index: int) -> str:
        self._call("name")
        return str(self.gpus[index]["name"])

    def memory(self, index: int) -> tuple[int, int]:
        self._call("memory")
        return self.gpus[index]["memory"]  # type: ignore[no-any-return]

    def utilization(self, index: int) -> int:
        self._call("utilization")
        return int(self.gpus[index]["utilization"])

    def temperature(self, index: int) -> int:
        self._call("temperature")
        return int(self.gpus[index]["temperature"])

    def temperature_threshold(self, index: int, which: str) -> int:
        self._call("temperature_threshold")
        return int(self.gpus[index][which])

    def power(self, index: int) -> tuple[int, int]:
        self._call("power")
        return self.gpus[index]["power"]  # type: ignore[no-any-return]

    def clocks(self, index: int) -> tuple[int, int, int]:
        self._call("clocks")
        return self.gpus[index]["clocks"]  # type: ignore[no-any-return]

    def throttle_reasons(self, index: int) -> int:
        self._call("throttle_reasons")
        return int(self.gpus[index]["throttle"])

    def ecc_uncorrected(self, index: int) -> int:
        self._call("ecc_uncorrected")
        return int(self.gpus[index]["ecc"])

    def pcie(self, index: int) -> tuple[int, int, int, int]:
        self._call("pcie")
        return self.gpus[index]["pcie"]  # type: ignore[no-any-return]

    def nvlinks_active(self, index: int) -> int:
        self._call("nvlinks_active")
        return int(self.gpus[index]["nvlinks"])

    def processes(self, index: int) -> list[tuple[int, int | None]]:
        self._call("processes")
        return list(self.gpus[index]["processes"])

    def compute_capability(self, index: int) -> tuple[int, int]:
        self._call("compute_capability")
        return self.gpus[index]["capability"]  # type: ignore[no-any-return]
