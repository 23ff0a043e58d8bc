"""ctypes binding of libfp4kit: loading, C structs, prototypes and the status -> exception mapping.

Nothing here knows about NumPy or PyTorch; the rest of the package builds fp4_matrix/fp4_qmatrix
structs from array pointers and calls the functions declared below.
"""

import ctypes
import glob
import os
import sys

_LIB_NAMES = ("libfp4kit.so", "libfp4kit.dylib", "fp4kit.dll")

# ---- errors --------------------------------------------------------------------------------------

OK = 0
ERR_INVALID_ARGUMENT = -1
ERR_UNSUPPORTED = -2
ERR_OUT_OF_MEMORY = -3
ERR_CUDA = -4
ERR_IO = -5
ERR_FORMAT = -6
ERR_NOT_FOUND = -7
ERR_INTERNAL = -8


class Error(Exception):
    """Base of every error fp4kit raises. ``status`` is the C status: the library's for an error it
    returned, the status of the error's kind for one the package's own checks raise (the C library
    would have returned that status for the same mistake)."""

    STATUS = None  # the status of the kind, where there is one

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = self.STATUS if status is None else status


class InvalidArgumentError(Error, ValueError):
    """A bad argument: shape, dtype, layout, alignment, device mismatch (FP4_ERR_INVALID_ARGUMENT)."""

    STATUS = ERR_INVALID_ARGUMENT


class UnsupportedError(Error, NotImplementedError):
    """A valid request that no backend, device or build here can run (FP4_ERR_UNSUPPORTED)."""

    STATUS = ERR_UNSUPPORTED


class NotFoundError(Error, ValueError):
    """A named backend or config that does not exist (FP4_ERR_NOT_FOUND)."""

    STATUS = ERR_NOT_FOUND


class OutOfMemoryError(Error, MemoryError):
    """A host or device allocation failed (FP4_ERR_OUT_OF_MEMORY)."""

    STATUS = ERR_OUT_OF_MEMORY


class LibraryError(Error, RuntimeError):
    """CUDA, I/O, format or internal failures of the library (always raised with the library's
    status: FP4_ERR_CUDA, FP4_ERR_IO, FP4_ERR_FORMAT or FP4_ERR_INTERNAL)."""


_STATUS_ERRORS = {
    ERR_INVALID_ARGUMENT: InvalidArgumentError,
    ERR_UNSUPPORTED: UnsupportedError,
    ERR_NOT_FOUND: NotFoundError,
    ERR_OUT_OF_MEMORY: OutOfMemoryError,
}


# ---- C structs (include/fp4kit.h) ----------------------------------------------------------------

class QMatrix(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("scales", ctypes.c_void_p),
        ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
        ("format", ctypes.c_int),
        ("layout", ctypes.c_int),
        ("multiplier", ctypes.c_float),
        ("memory", ctypes.c_int),
    ]


class Matrix(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
        ("ld", ctypes.c_int64),
        ("dtype", ctypes.c_int),
        ("memory", ctypes.c_int),
    ]


class RunInfo(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_char * 32),
        ("config", ctypes.c_char * 64),
        ("pdl", ctypes.c_int),
        ("note", ctypes.c_char * 160),
    ]


class Options(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_char_p),
        ("config", ctypes.c_char_p),
        ("enable_pdl", ctypes.c_int),
        ("stream", ctypes.c_void_p),
        ("info", ctypes.POINTER(RunInfo)),
        ("alpha_device", ctypes.c_void_p),
        ("global_scale_device", ctypes.c_void_p),
    ]


class GroupedQMatrix(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("scales", ctypes.c_void_p),
        ("multipliers", ctypes.c_void_p),
        ("experts", ctypes.c_int64),
        ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
        ("format", ctypes.c_int),
        ("layout", ctypes.c_int),
        ("memory", ctypes.c_int),
    ]


class MoeExperts(ctypes.Structure):
    _fields_ = [
        ("gate_up", GroupedQMatrix),
        ("down", GroupedQMatrix),
        ("gate_up_act_scale", ctypes.c_float),
        ("down_act_scale", ctypes.c_float),
        ("act_scales_device", ctypes.c_void_p),
    ]


class MoeLayer(ctypes.Structure):
    _fields_ = [
        ("mode", ctypes.c_int),
        ("routed", MoeExperts),
        ("shared", ctypes.POINTER(MoeExperts)),
    ]


class MoeRouting(ctypes.Structure):
    _fields_ = [
        ("topk_ids", ctypes.c_void_p),
        ("tokens", ctypes.c_int64),
        ("top_k", ctypes.c_int64),
        ("topk_weights", Matrix),
        ("shared_weights", ctypes.c_void_p),
    ]


FORMAT_NVFP4, FORMAT_MXFP4 = 0, 1
MOE_W4A16, MOE_W4A4 = 0, 1
LAYOUT_LINEAR, LAYOUT_128X4, LAYOUT_8X4 = 0, 1, 2
DTYPE_F32, DTYPE_BF16, DTYPE_F16, DTYPE_E2M1X2, DTYPE_E4M3, DTYPE_UE8M0 = range(6)
MEMORY_HOST, MEMORY_DEVICE = 0, 1

_c_status = ctypes.c_int
_i64 = ctypes.c_int64
_vp = ctypes.c_void_p
_QP = ctypes.POINTER(QMatrix)
_MP = ctypes.POINTER(Matrix)
_OP = ctypes.POINTER(Options)
_SZP = ctypes.POINTER(ctypes.c_size_t)
_LP = ctypes.POINTER(MoeLayer)
_RP = ctypes.POINTER(MoeRouting)

# name -> (restype, argtypes) of every symbol the package calls. Symbols of later library versions
# (probe, tune) are bound only when present; see OPTIONAL_SYMBOLS.
_PROTOTYPES = {
    "fp4_version": (ctypes.c_char_p, []),
    "fp4_status_str": (ctypes.c_char_p, [_c_status]),
    "fp4_last_error": (ctypes.c_char_p, []),
    "fp4_context_create": (_c_status, [ctypes.POINTER(_vp), ctypes.c_int]),
    "fp4_context_destroy": (None, [_vp]),
    "fp4_scales_size": (_c_status, [ctypes.c_int, ctypes.c_int, _i64, _i64, ctypes.POINTER(ctypes.c_size_t)]),
    "fp4_scales_convert": (_c_status, [ctypes.c_int, _i64, _i64, _vp, ctypes.c_int, _vp, ctypes.c_int]),
    "fp4_quantize": (_c_status, [_vp, _MP, ctypes.c_float, _QP, _OP]),
    "fp4_dequantize": (_c_status, [_QP, _MP]),
    "fp4_mm": (_c_status, [_vp, _QP, _QP, ctypes.c_float, _MP, _OP]),
    "fp4_mm_w4a16": (_c_status, [_vp, _MP, _QP, ctypes.c_float, _MP, _OP]),
    "fp4_backend_count": (ctypes.c_int, []),
    "fp4_backend_name": (ctypes.c_char_p, [ctypes.c_int]),
    "fp4_backend_summary": (ctypes.c_char_p, [ctypes.c_int]),
    "fp4_backend_available": (_c_status, [_vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
}

# The capability probe and the tuner (bound when the loaded library has them; probe() and tune()
# raise UnsupportedError naming the symbol otherwise).
class Capability(ctypes.Structure):
    _fields_ = [("support", ctypes.c_int), ("evidence", ctypes.c_int), ("reason", ctypes.c_char * 192)]


class BackendProbe(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_char * 32),
        ("available", ctypes.c_int),
        ("reason", ctypes.c_char * 192),
        ("device_memory", ctypes.c_int),
        ("caps", Capability * 5),
    ]


class DeviceProbe(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_int),
        ("name", ctypes.c_char * 128),
        ("cc", ctypes.c_int),
        ("sm_count", ctypes.c_int),
        ("memory_bytes", ctypes.c_uint64),
        ("driver_version", ctypes.c_int),
        ("runtime_version", ctypes.c_int),
        ("cublaslt_version", ctypes.c_int),
        ("cudnn_version", ctypes.c_int),
        ("binary_has_code", ctypes.c_int),
        ("arch", ctypes.c_char * 16),
    ]


class TuneKey(ctypes.Structure):
    _fields_ = [
        ("op", ctypes.c_int),
        ("format", ctypes.c_int),
        ("a_dtype", ctypes.c_int),
        ("out_dtype", ctypes.c_int),
        ("m", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
    ]


class TuneResult(ctypes.Structure):
    _fields_ = [
        ("key", TuneKey),
        ("backend", ctypes.c_char * 32),
        ("config", ctypes.c_char * 64),
        ("median_us", ctypes.c_double),
        ("candidates", ctypes.c_int),
        ("rejected", ctypes.c_int),
        ("cut", ctypes.c_int),
    ]


OPTIONAL_SYMBOLS = {
    "fp4_build_cuda_targets": (ctypes.c_char_p, []),
    "fp4_probe_device_count": (ctypes.c_int, []),
    "fp4_probe_device": (_c_status, [ctypes.c_int, ctypes.POINTER(DeviceProbe)]),
    "fp4_probe_backend": (_c_status, [_vp, ctypes.c_char_p, ctypes.POINTER(BackendProbe)]),
    "fp4_probe_backend_arch": (_c_status, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(BackendProbe)]),
    "fp4_cap_name": (ctypes.c_char_p, [ctypes.c_int]),
    "fp4_support_name": (ctypes.c_char_p, [ctypes.c_int]),
    "fp4_evidence_name": (ctypes.c_char_p, [ctypes.c_int]),
    "fp4_tuning_cache_create": (_c_status, [_vp, ctypes.POINTER(_vp)]),
    "fp4_tuning_cache_destroy": (None, [_vp]),
    "fp4_tuning_cache_load": (_c_status, [_vp, ctypes.c_char_p]),
    "fp4_tuning_cache_save": (_c_status, [_vp, ctypes.c_char_p]),
    "fp4_tuning_cache_default_path": (_c_status, [ctypes.c_char_p, ctypes.c_size_t]),
    "fp4_tune": (_c_status, [_vp, ctypes.POINTER(TuneKey), ctypes.c_int, ctypes.c_int, _vp,
                             ctypes.POINTER(TuneResult), _vp, _vp]),
    # the MoE layer, the context workspace and the workspace queries
    "fp4_moe_workspace_size": (_c_status, [_LP, _i64, _i64, _OP, _SZP]),
    "fp4_moe_forward": (_c_status, [_vp, _LP, _MP, _RP, _vp, ctypes.c_size_t, _MP, _OP]),
    "fp4_context_reserve_workspace": (_c_status, [_vp, ctypes.c_size_t]),
    "fp4_context_workspace_bytes": (ctypes.c_size_t, [_vp]),
    "fp4_mm_workspace_size": (_c_status, [_vp, _QP, _QP, _MP, _OP, _SZP]),
    "fp4_mm_w4a16_workspace_size": (_c_status, [_vp, _MP, _QP, _MP, _OP, _SZP]),
}


# ---- loading ---------------------------------------------------------------------------------------

def _candidates():
    """Paths to try, in order: FP4KIT_LIB, then the library bundled in the package directory."""
    env = os.environ.get("FP4KIT_LIB")
    if env:
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    for sub in ("", "lib", "lib64", "bin"):
        for name in _LIB_NAMES:
            found.extend(sorted(glob.glob(os.path.join(here, sub, name))))
    return found, False


def _wheel_runtime_dirs():
    """CUDA runtime folders of the wheels PyTorch installs (nvidia-cuda-runtime-cu12, and the
    nvidia/cu13 layout of CUDA 13 wheels)."""
    dirs = []
    for entry in sys.path:
        dirs += glob.glob(os.path.join(entry, "nvidia", "cuda_runtime", "lib"))
        dirs += glob.glob(os.path.join(entry, "nvidia", "cu*", "lib"))
    return [d for d in dirs if os.path.isdir(d)]


def _cuda_runtime_dirs():
    """Folders that may hold libcudart when the dynamic linker cannot find it on its own."""
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        root = os.environ.get(var)
        if root:
            dirs += [os.path.join(root, "lib64"), os.path.join(root, "lib"),
                     os.path.join(root, "targets", "x86_64-linux", "lib")]
    dirs += _wheel_runtime_dirs()
    dirs += ["/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda/targets/x86_64-linux/lib"]
    return [d for d in dirs if os.path.isdir(d)]


def _preload_cudart(dirs):
    """Loads the first libcudart found in dirs into the global namespace, so that libfp4kit's
    dependency resolves to it by soname; returns the paths tried."""
    tried = []
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "libcudart.so.*")), reverse=True):
            tried.append(path)
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return tried
            except OSError:
                continue
    return tried


def _needs_cudart(path):
    try:
        with open(path, "rb") as f:
            return b"libcudart.so" in f.read()
    except OSError:
        return False


def _share_torch_runtime(path):
    """Only one libcudart of a soname can be loaded in a process. When PyTorch's CUDA runtime wheel
    is installed, load that one first: otherwise an `import torch` after `import fp4kit` would bind
    PyTorch to the (possibly older) toolkit runtime libfp4kit found on its own."""
    dirs = _wheel_runtime_dirs()
    if dirs and "torch" not in sys.modules and _needs_cudart(path):
        _preload_cudart(dirs)


# The C name of every struct mirrored above: load() compares their sizes with the library's.
MIRRORED_STRUCTS = {"fp4_qmatrix": QMatrix, "fp4_matrix": Matrix, "fp4_run_info": RunInfo, "fp4_options": Options,
                    "fp4_capability": Capability, "fp4_backend_probe": BackendProbe,
                    "fp4_device_probe": DeviceProbe, "fp4_tune_key": TuneKey, "fp4_tune_result": TuneResult,
                    "fp4_grouped_qmatrix": GroupedQMatrix, "fp4_moe_experts": MoeExperts, "fp4_moe_layer": MoeLayer,
                    "fp4_moe_routing": MoeRouting}


def layout_mismatches(lib):
    """(name, python size, library size) of every mirrored struct whose size differs from the
    library's fp4_struct_size (empty when the library predates that function)."""
    if not hasattr(lib, "fp4_struct_size"):
        return []
    fn = lib.fp4_struct_size
    fn.restype, fn.argtypes = ctypes.c_size_t, [ctypes.c_char_p]
    out = []
    for name, cls in MIRRORED_STRUCTS.items():
        size = fn(name.encode())
        if size != ctypes.sizeof(cls):
            out.append((name, ctypes.sizeof(cls), size))
    return out


def _bind(lib):
    bad = layout_mismatches(lib)
    if bad:
        raise OSError("the library's structs differ from this package's mirror of include/fp4kit.h ("
                      + ", ".join("%s: %d bytes here, %d in the library" % b for b in bad)
                      + "): the package and libfp4kit come from different versions")
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, argtypes) in OPTIONAL_SYMBOLS.items():
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
    return lib


def load():
    """Loads libfp4kit and binds its prototypes; raises ImportError saying what was tried."""
    paths, from_env = _candidates()
    if not paths:
        raise ImportError(
            "fp4kit: libfp4kit is not bundled in %s; install the package with `pip install ./python` "
            "from the fp4kit repository, or set FP4KIT_LIB to the path of a built libfp4kit.so"
            % os.path.dirname(os.path.abspath(__file__)))
    errors = []
    for path in paths:
        try:
            _share_torch_runtime(path)
            return _bind(ctypes.CDLL(path)), path
        except OSError as e:
            if "libcudart" in str(e):
                tried = _preload_cudart(_cuda_runtime_dirs())
                try:
                    return _bind(ctypes.CDLL(path)), path
                except OSError as e2:
                    errors.append("%s: %s (libcudart looked for in: %s)" % (path, e2, ", ".join(tried) or "nowhere found"))
                    continue
            errors.append("%s: %s" % (path, e))
        except AttributeError as e:
            errors.append("%s: missing symbol (%s); the library is older than this package" % (path, e))
    where = "FP4KIT_LIB" if from_env else "the package directory"
    raise ImportError("fp4kit: could not load libfp4kit from %s:\n  %s" % (where, "\n  ".join(errors)))


LIB, LIB_PATH = load()


def last_error():
    msg = LIB.fp4_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def status_name(status):
    name = LIB.fp4_status_str(status)
    return name.decode() if name else str(status)


def check(status, what=""):
    """Raises the exception of a failing status with fp4_last_error()'s message."""
    if status == OK:
        return
    msg = last_error() or "%s failed with %s" % (what or "fp4kit", status_name(status))
    raise _STATUS_ERRORS.get(status, LibraryError)(msg, status)


def has_symbol(name):
    return hasattr(LIB, name)

# ---- the compiled hot path ---------------------------------------------------------------------------

def _load_native():
    """fp4kit._native, the compiled hot path of the GEMM and quantize calls on tensors (built with the
    library when CMake finds Python's headers): the package's own copy (a wheel), else the one in the
    loaded library's folder (a build tree; nowhere else, so a stray copy is never picked up). Returns
    (module or None, why not)."""
    import importlib
    import importlib.machinery
    import importlib.util
    try:
        mod = importlib.import_module("fp4kit._native")
    except ImportError as e:
        first = str(e)
        names = ["_native" + s for s in importlib.machinery.EXTENSION_SUFFIXES]
        here = os.path.dirname(os.path.abspath(LIB_PATH))
        paths = [os.path.join(here, n) for n in names]
        path = next((p for p in paths if os.path.isfile(p)), None)
        if path is None:
            built = sorted(glob.glob(os.path.join(here, "_native*")))
            return None, ("no _native module for this Python (%s) in the package or beside %s%s" % (
                importlib.machinery.EXTENSION_SUFFIXES[0], LIB_PATH,
                "; found " + ", ".join(os.path.basename(b) for b in built) if built else
                ": the library was built without Python's headers (python3-dev)"))
        try:
            spec = importlib.util.spec_from_file_location("fp4kit._native", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except ImportError as e2:
            return None, "%s: %s (and %s)" % (path, e2, first)
    want = (ctypes.sizeof(Matrix), ctypes.sizeof(QMatrix), ctypes.sizeof(Options), ctypes.sizeof(RunInfo))
    if tuple(mod.struct_sizes) != want:
        return None, "%s was built against other struct layouts (%s, the package has %s)" % (
            getattr(mod, "__file__", "_native"), tuple(mod.struct_sizes), want)
    return mod, ""


NATIVE, NATIVE_WHY = _load_native()
