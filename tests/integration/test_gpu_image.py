"""The Dockerfile's ``gpu`` target, as built: the learner's compile decision inside it is to compile on CUDA, and the
compiler it finds builds what Triton builds at run time (a C extension against Python's headers).

Needs a Docker engine and the built image (``WARPPIPE_GPU_IMAGE``, default ``warppipe:cuda``; docs/deployment.md
shows the build); skipped where either is missing, as on CI. No GPU is needed: the decision reads PATH, and the
C build is Triton's launcher step without its CUDA link.
"""

import os
import shutil
import subprocess

import pytest

IMAGE = os.environ.get("WARPPIPE_GPU_IMAGE", "warppipe:cuda")


def image_present() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=60)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not image_present(), reason=f"no Docker engine or no image {IMAGE}")

DECISION = """
import torch
from learner.warm_up import missing_compiler
print("cuda build:", torch.version.cuda is not None)
print("cuda decision:", repr(missing_compiler("cuda")))
"""

# What Triton does at run time with the compiler it finds: a shared C module built against Python's headers.
C_MODULE = r"""
set -e
cd "$(mktemp -d)"
printf '#include <Python.h>\nstatic struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "probe", NULL, -1, NULL};\n%s\n' \
    'PyMODINIT_FUNC PyInit_probe(void) { return PyModule_Create(&m); }' > probe.c
cc -shared -fPIC -O1 $(python -c 'import sysconfig; print("-I" + sysconfig.get_paths()["include"])') probe.c -o probe.so
python -c 'import sys; sys.path.insert(0, "."); import probe; print("built", probe.__name__)'
"""


def run_in_image(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", cmd[0], IMAGE, *cmd[1:]], capture_output=True, text=True, timeout=300
    )


def test_the_gpu_image_carries_a_cuda_torch_and_decides_to_compile():
    out = run_in_image("python", "-c", DECISION)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "cuda build: True" in out.stdout, out.stdout
    assert "cuda decision: ''" in out.stdout, out.stdout  # '' = a compiler is on PATH: the learner compiles on CUDA


def test_the_gpu_image_compiler_builds_a_python_c_module():
    out = run_in_image("sh", "-c", C_MODULE)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "built probe" in out.stdout
