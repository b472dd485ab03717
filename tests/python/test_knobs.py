"""The Python side reads FSDP_* knobs through their one declaration in common/knobs.h
(fsdp_runtime._C), never through a second default of its own: FSDP_TIMEOUT_SEC unset gives the C++
default, set gives its value, malformed is refused naming the variable."""
import os
import sys

sys.path.insert(0, os.environ["FSDP_PYTHON_PATH"])
import torch  # noqa: E402,F401  (the extension links against it)

from fsdp_runtime import _C  # noqa: E402

if __name__ == "__main__":
    os.environ.pop("FSDP_TIMEOUT_SEC", None)
    default = _C.timeout_sec()
    assert default == 300.0, default  # knobs.cc's kTimeoutSec
    os.environ["FSDP_TIMEOUT_SEC"] = "2.5"
    assert _C.timeout_sec() == 2.5, _C.timeout_sec()
    os.environ["FSDP_TIMEOUT_SEC"] = "soon"
    try:
        _C.timeout_sec()
    except Exception as e:  # InvalidArgument, as pybind11 translates it
        assert "FSDP_TIMEOUT_SEC" in str(e), e
    else:
        raise AssertionError("a malformed FSDP_TIMEOUT_SEC was accepted")
    print(f"FSDP_TIMEOUT_SEC through common/knobs.h: default {default} s", flush=True)
